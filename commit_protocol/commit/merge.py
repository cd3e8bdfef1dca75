"""Checking task reports against committed state and storage, and folding them into it.

Pure decisions plus ``size`` look-ups: which files continue, which finalize and why. The
committer then performs what this module decided.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from commit_protocol.records.config import RotationPolicy
from commit_protocol.records.messages import FileReport, TaskReport
from commit_protocol.records.rotation import IDLE, SCHEMA, roll_reason
from commit_protocol.records.state import InProgressFile, Slot
from commit_protocol.storage import Storage
from commit_protocol.storage.concurrent import each
from commit_protocol.vocabulary.errors import CommitError, TruncatedFileError


@dataclass(frozen=True)
class Finalized:
    """A file the commit publishes: ``temp`` becomes ``name`` holding exactly ``size`` bytes."""

    name: str
    temp: str
    size: int
    records: int
    reason: str
    rolled_by_driver: bool = False  # by a commit-time rule; a task-rolled file is complete
    footer: bytes | None = None  # a finished Parquet file's, as its encoder wrote it


@dataclass(frozen=True)
class Merged:
    in_progress: list[InProgressFile]
    finalized: list[Finalized]


def merge_reports(committed: dict[Slot, InProgressFile], reports: list[TaskReport],
                  storage: Storage, policy: RotationPolicy, *, is_bulk: bool,
                  now_ms: int, retire: bool = False) -> Merged:
    """Apply the tasks' files to the committed slots, then the commit-time rotation rules.

    With ``retire`` (a batch that changes the schema of a format that fixes its columns at
    the file's head), every committed file finishes first, reason ``schema``; the tasks of
    that batch opened new files. With ``rotation.rollOnIdle``, a batch in which no task got
    a row (a heartbeat's) rolls every file. A task that got no rows may already have encoded
    its partition's staged files for that rule ("idle"); when another task did get rows, the
    batch is not idle and those files stay in progress (the unused finished temp is an
    orphan).
    """
    slots = dict(committed)
    finalized: list[Finalized] = []
    if retire:  # a schema change: every committed file finishes as it is (WritePlan)
        finalized += [Finalized(f.name, f.temp, f.size, f.records, SCHEMA, rolled_by_driver=True)
                      for f in slots.values()]
        slots = {}
    idle = policy.roll_on_idle and not any(f.new_records for r in reports for f in r.files)
    stored = _stored_sizes(storage, [f for r in reports for f in r.files])
    for slot, files in _files_by_slot(reports).items():
        _check_continuity(slots.get(slot), files)
        for report in files:
            _check_storage(report, stored)
            if report.reason == IDLE and not idle:
                continue  # an untouched slot: it stays as committed
            previous = slots.pop(slot, None)
            if report.closed:
                reason = report.reason or _task_roll_reason(report, policy)
                if report.final_temp is not None:  # a staged file, encoded by the task
                    finalized.append(Finalized(report.name, report.final_temp,
                                               report.final_size, report.records, reason,
                                               footer=report.final_footer))
                elif is_bulk:
                    raise CommitError(f"{report.name}: a rolled staged file without its "
                                      "finished file: expected the task to report it")
                else:
                    finalized.append(Finalized(report.name, report.temp, report.end,
                                               report.records, reason))
            else:
                slots[slot] = _advance(previous, report, now_ms)
    # A staged (bulk) file's committed size counts staged bytes, not the finished file's:
    # its size limit is applied by the task, on its estimate of the finished size.
    rules = replace(policy, max_bytes=0) if is_bulk else policy
    for slot, f in list(slots.items()):
        due = IDLE if idle else roll_reason(f, rules, now_ms)
        if due:
            del slots[slot]
            finalized.append(Finalized(f.name, f.temp, f.size, f.records, due,
                                       rolled_by_driver=True))
    return Merged(list(slots.values()), finalized)


def _files_by_slot(reports: list[TaskReport]) -> dict[Slot, list[FileReport]]:
    by_slot: dict[Slot, list[FileReport]] = {}
    owner: dict[Slot, int] = {}
    for report in reports:
        for f in report.files:
            if owner.setdefault(f.slot, report.partition) != report.partition:
                raise CommitError(f"slot {f.slot} reported by tasks {owner[f.slot]} and "
                                  f"{report.partition}; expected one task per slot")
            by_slot.setdefault(f.slot, []).append(f)
    return by_slot


def _check_continuity(previous: InProgressFile | None, files: list[FileReport]) -> None:
    """The first file of a slot continues its committed file (if any); the rest are new."""
    for i, f in enumerate(files):
        resumed = previous if i == 0 else None
        if resumed is not None and f.name != resumed.name:
            raise CommitError(f"task for slot {f.slot} skipped committed file {resumed.name}: "
                              f"expected it first, found {f.name}")
        expected_start = resumed.size if resumed is not None else 0
        if f.start != expected_start:
            raise CommitError(f"{f.name}: expected the task to start at committed offset "
                              f"{expected_start}, found {f.start}")
        continues = resumed is not None
        source = resumed.temp if resumed is not None else None
        if continues and f.temp != source and f.fenced_from != source:
            raise CommitError(f"{f.name}: expected appends to {source} or a fenced copy of it, "
                              f"found {f.temp} (copied from {f.fenced_from})")
        if f.end < f.start:
            raise CommitError(f"{f.name}: end offset {f.end} before start {f.start}")


def _stored_sizes(storage: Storage, files: list[FileReport]) -> dict[str, int | None]:
    """The size of each file the commit relies on (None: missing), looked up concurrently:
    a staged file the task encoded needs only its finished file (its staged bytes are
    never published nor continued)."""
    paths = sorted({f.temp if f.final_temp is None else f.final_temp for f in files})

    def size(path: str) -> int | None:
        try:
            return storage.size(path)
        except FileNotFoundError:
            return None

    return dict(zip(paths, each(storage, size, paths), strict=True))


def _check_storage(f: FileReport, stored: dict[str, int | None]) -> None:
    if f.final_temp is not None:
        finished = stored[f.final_temp]
        if finished is None:
            raise CommitError(f"{f.name}: finished file {f.final_temp} reported by the task "
                              "is missing")
        if finished != f.final_size:
            raise CommitError(f"{f.final_temp} ({f.name}): expected the {f.final_size} bytes "
                              f"the task reported, found {finished}")
        return
    size = stored[f.temp]
    if size is None:
        raise CommitError(f"{f.name}: temp file {f.temp} reported by the task is missing")
    if size < f.end:
        raise TruncatedFileError(f"{f.temp} ({f.name}) holds {size} bytes; the task reported "
                                 f"{f.end}: bytes were lost")


def _task_roll_reason(f: FileReport, policy: RotationPolicy) -> str:
    """A task rolls a row file for its record limit or its byte limit, and for bytes often
    below the limit: when the next row would not fit (``maxOpenFiles`` only releases)."""
    if policy.max_records and f.records >= policy.max_records:
        return "maxRecords"
    return "maxBytes"


def _advance(previous: InProgressFile | None, f: FileReport, now_ms: int) -> InProgressFile:
    if previous is not None and previous.name == f.name:
        return replace(previous, temp=f.temp, size=f.end, records=f.records,
                       batches=previous.batches + 1, last_append_ms=now_ms)
    return InProgressFile(partition=f.partition, directory=f.directory, name=f.name,
                          temp=f.temp, size=f.end, records=f.records, batches=1,
                          opened_ms=now_ms, last_append_ms=now_ms)
