"""``rotsink verify``: does storage hold exactly what the metadata log commits?

Runs anywhere, without Spark (the CLI, a test, a crash harness): it reads the log, lists the
output tree and, when asked, decodes the committed bytes of every file. Each problem is one
line that names the file or batch and says what was expected and what was found. With
``repair=True`` it first rolls forward the commits a driver decided (staged as intents) but
did not publish, exactly as the next plan or commit of the query would; a commit still in
flight (a live driver's) is waited for, never reported or rolled forward
(:mod:`commit_protocol.checks.in_flight`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from commit_protocol.checks.file_checks import (
    InProgressCheck,
    authenticate,
    check_finalized,
    check_in_progress,
    unlisted_paths,
    unlisted_problem,
)
from commit_protocol.checks.in_flight import (
    COMMIT_TIMEOUT_S,
    POLL_S,
    PendingIntent,
    intent_state,
    pending_intents,
    settle,
)
from commit_protocol.checks.repair import repair_output
from commit_protocol.commit.housekeeping import orphans
from commit_protocol.log import MetadataLog
from commit_protocol.log.files import batch_names, last_compaction_at_or_before, log_file_name
from commit_protocol.metrics.totals import gauges_of
from commit_protocol.reading import open_committed
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.tables import table_format_of
from commit_protocol.tables.checks import check_table, health_lines
from commit_protocol.tables.recorded import table_config
from commit_protocol.tables.sharing import Followed
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.naming import (
    INPROGRESS_DIR,
    INTENT_DIR,
    LOG_DIR,
    is_final_name,
    success_marker,
)
from commit_protocol.vocabulary.progress import Progress, no_progress
from commit_protocol.vocabulary.uris import from_uri


@dataclass(frozen=True)
class Verification:
    """What :func:`verify_output` found; ``ok`` when it found no problem.

    ``orphans`` (temp files no committed state references) are invisible to every reader
    and removed by cleanup after ``log.cleanupDelay``: listed, never a problem.
    """

    latest: int | None
    problems: list[str]
    finalized_files: int
    finalized_bytes: int
    in_progress: list[InProgressCheck]
    orphans: list[str]
    pending: list[int]
    repaired: list[int]
    authenticated: int
    notes: list[str] = field(default_factory=list)  # worth saying, not problems
    # the table's age and what bounds its metadata; "table grows: ..." lines are warnings
    table_health: list[str] = field(default_factory=list)
    # the log's totals: rows in finalized files, and the batches they miss (an earlier
    # release's; metrics.totals)
    finalized_rows: int = 0
    batches_uncounted: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_output(storage: Storage, *, ring: Mapping[str, bytes] | None = None,
                  deep: bool = False, repair: bool = False,
                  commit_timeout_s: float = COMMIT_TIMEOUT_S,
                  on_wait: Callable[[PendingIntent], None] | None = None,
                  fs_options: dict[str, str] | None = None,
                  progress: Progress = no_progress) -> Verification:
    """Check an output path against its metadata log.

    Parameters
    ----------
    storage
        The output path.
    ring
        Keys by key id (``KeyRefs(...).ring()``): authenticate every committed byte.
    deep
        Read and decode every committed byte (decompress; decrypt, which needs ``ring``).
    repair
        First roll forward decided-but-unpublished commits whose driver is gone.
    commit_timeout_s
        How long a commit may stay decided but unpublished before its driver counts as
        dead (:mod:`commit_protocol.checks.in_flight`); 0 when the caller knows it is.
    on_wait
        Told about each commit in flight that the check waits for.
    fs_options
        The filesystem's options (``fs.*``), for a table that follows the log
        (``table.format``): its files are checked too, and ``repair`` catches it up.

    Returns
    -------
    Verification
        Never raises for what it finds on storage: damage becomes a problem line.

    A check compares storage with one committed state, so a commit that lands meanwhile (a
    running query, or a killed driver's commit worker that outlives it for a moment) can move
    a file the check then misses. Problems count only if the names in the log, intent and
    in-progress directories did not change during the check; otherwise the check runs again
    on the newer state (up to ``_ATTEMPTS`` times). A check that finds a commit in flight
    waits until it is published or stalls, then looks again.
    """
    problems: list[str] = []
    repaired = repair_output(storage, problems, commit_timeout_s, on_wait, fs_options) \
        if repair else []
    changed = 0
    for _ in range(_LOOKS + int(commit_timeout_s / POLL_S)):
        before = _commit_traces(storage)
        found, in_flight = _check(storage, ring=ring, deep=deep, repaired=repaired,
                                  timeout_s=commit_timeout_s, fs_options=fs_options,
                                  progress=progress)
        if in_flight:  # a live commit, or a driver dead a moment ago: the second look says
            settle(storage, timeout_s=commit_timeout_s, on_wait=on_wait)  # waits for intents
            if _TABLE_COMMIT in in_flight:  # nothing to wait on but the table, or the time
                time.sleep(POLL_S)
            continue
        if found.ok or _commit_traces(storage) == before:
            break
        changed += 1
        if changed == _ATTEMPTS:
            found = replace(found, problems=[*found.problems, (
                f"{storage.root_uri}: the log or the in-progress files changed during each of "
                f"{_ATTEMPTS} checks (a query is writing): problems above may be moves by its "
                "commits; verify again")])
            break
        time.sleep(_BACKOFF_S * changed)
    else:  # every look found another commit in flight
        found = replace(found, problems=[*found.problems, (
            f"{storage.root_uri}: each of {_LOOKS} checks found a commit in flight (a query "
            "is writing): verify again")])
    return replace(found, problems=problems + found.problems)


_ATTEMPTS = 5
_BACKOFF_S = 0.2
_LOOKS = 50  # checks in all, the second looks after commits in flight included
_TABLE_COMMIT = -1  # in flight: the table commit of the latest batch (table.format)


def _commit_traces(storage: Storage) -> frozenset[str]:
    """The names in the log, intent and in-progress directories: every commit step that can
    move a checked file changes one of them (staging an intent, publishing a temp file,
    fencing a copy, cleaning up orphans, writing the log file)."""
    return frozenset(path for directory in (LOG_DIR, INTENT_DIR, INPROGRESS_DIR)
                     for path in storage.names(directory))


def _check(storage: Storage, *, ring: Mapping[str, bytes] | None, deep: bool,
           repaired: list[int], timeout_s: float, fs_options: dict[str, str] | None,
           progress: Progress = no_progress) -> tuple[Verification, list[int]]:
    """One check of storage against the latest committed state; and the batches found in
    flight (their renames explained, not problems)."""
    problems: list[str] = []
    names = _log_names(storage)
    problems += _duplicate_log_files(names)
    latest = max(names, default=None)
    pending, in_flight, explained, moved = _pending(storage, latest, problems, timeout_s)
    if latest is None:
        if not pending and not in_flight:
            problems.append(f"{storage.root_uri}: no committed batch in {LOG_DIR}")
        return Verification(None, problems, 0, 0, [], [], pending, repaired, 0), in_flight
    try:
        state = _committed_state(storage)
    except CorruptLogError as e:
        problems.append(str(e))  # without the latest state nothing else can be checked
        return Verification(latest, problems, 0, 0, [], [], pending, repaired, 0), in_flight
    logged = _listed_files(storage, state, latest, names, problems)
    followed = Followed.of(state.extra)
    listed = followed.applied(logged.items())  # as rotsink's readers list the output
    problems += _vacuumed_early(storage, followed, logged)
    finalized = check_finalized(storage, listed, problems, progress)
    in_progress, prefixes = check_in_progress(storage, state, problems, moved=moved)
    table = table_config(storage, state, fs_options)
    owned = () if table is None or table.table_format is None else \
        table_format_of(table).owned_directories(table)
    notes: list[str] = []
    health: list[str] = []
    if table is not None:  # table.format: the table must list the finalized files
        log = MetadataLog(storage, compact_interval=state.compact_interval,
                          names={batch_id: found[0] for batch_id, found in names.items()})
        checked = check_table(storage, log, state, table, listed, timeout_s=timeout_s)
        problems += checked.problems
        notes += checked.notes
        health = health_lines(checked.health)
        explained |= set(checked.added_since)  # other writers' files, followed next commit
        in_flight = [*in_flight, _TABLE_COMMIT] if checked.in_flight else in_flight
    unlisted = unlisted_paths(storage, set(logged) | set(listed) | explained
                              | set(followed.retired), owned)
    others = [p for p in unlisted if table is not None and not is_final_name(p)]
    problems += [unlisted_problem(p) for p in unlisted if p not in others]
    if others:  # a shared table's: written and removed again between two of rotsink's commits
        notes.append(f"{len(others)} file(s) of other writers that neither the table nor the "
                     f"log lists (first {others[0]}): rewritten or deleted since they were "
                     "written; the table's clean-up (VACUUM, orphan removal) deletes them")
    problems += [f"{success_marker(d)}: the log's batch {latest} completed partition "
                 f"{d or '(root)'} but its marker is missing" for d in state.markers
                 if not storage.exists(success_marker(d))]
    authenticated = 0
    if deep or ring is not None:
        authenticated = authenticate(storage, state, finalized + prefixes, ring, problems,
                                     progress)
    totals = gauges_of(state)
    return Verification(latest, problems, len(listed), sum(listed.values()), in_progress,
                        [i.path for i in orphans(storage, state)], pending, repaired,
                        authenticated, notes, health,
                        finalized_rows=totals["rowsFinalized-total"],
                        batches_uncounted=totals["batchesUncounted-total"]), in_flight


def _vacuumed_early(storage: Storage, followed: Followed, logged: dict[str, int]) -> list[str]:
    """Files the table removed that the log still lists for Spark's readers (until its next
    compaction) but storage no longer holds: a VACUUM or orphan removal with a retention
    shorter than a compaction interval of batches deleted them, and Spark's readers fail."""
    gone = [path for path in sorted(followed.removed & set(logged))
            if not storage.exists(path)]
    return [f"{path}: removed by the table and deleted from storage (VACUUM or orphan "
            "removal) before rotsink's next compaction left it out of the log: "
            "spark.read of the output fails until then; keep the table's retention longer "
            "than a compaction interval of batches" for path in gone]


# -- the log ---------------------------------------------------------------------------------
def _committed_state(storage: Storage) -> SinkState:
    """The latest committed state (``open_committed``, which reads the log's interval)."""
    committed = open_committed(storage)
    if committed is None:  # listed a moment ago: deleted meanwhile
        raise CorruptLogError(f"{storage.root_uri}: {LOG_DIR} vanished while it was read")
    return committed[2]


def _log_names(storage: Storage) -> dict[int, list[str]]:
    """Names of the log files on storage by batch id (two for one id is damage)."""
    return {batch_id: [path.rsplit("/", 1)[-1] for path in paths]
            for batch_id, paths in batch_names(storage, LOG_DIR).items()}


def _duplicate_log_files(names: dict[int, list[str]]) -> list[str]:
    return [f"{' and '.join(f'{LOG_DIR}/{n}' for n in sorted(found))}: two log files for "
            f"batch {batch_id}: readers may take either"
            for batch_id, found in sorted(names.items()) if len(found) > 1]


def _listed_files(storage: Storage, state: SinkState, latest: int,
                  names: dict[int, list[str]], problems: list[str]) -> dict[str, int]:
    """Logged size of every finalized file in the listing as of ``latest``.

    Each log file is read on its own, so that one damaged file is named and the others are
    still checked (of two files for one batch, already reported, the first listed).
    """
    interval = state.compact_interval
    first = last_compaction_at_or_before(latest, interval) or 0
    log = MetadataLog(storage, compact_interval=interval,
                      names={batch_id: found[0] for batch_id, found in names.items()})
    listed: dict[str, int] = {}
    seen_in: dict[str, list[int]] = {}
    for batch_id in range(first, latest + 1):
        if batch_id not in names:
            problems.append(f"{LOG_DIR}/{log_file_name(batch_id, interval)}: missing: readers "
                            f"need every log file from batch {first} to {latest}")
            continue
        try:
            entries = list(log.entries_of(batch_id))
            paths = [from_uri(storage.root_uri, entry["path"]) for entry in entries]
        except CorruptLogError as e:  # names the file and the line
            problems.append(str(e))
            continue
        except ValueError as e:  # an entry outside the output path
            problems.append(f"{log.path_of(batch_id)}: {e}")
            continue
        for path, entry in zip(paths, entries, strict=True):
            listed[path] = int(entry["size"])
            seen_in.setdefault(path, []).append(batch_id)
    problems += [f"{path} (batches {', '.join(map(str, ids))}): listed twice: Spark's readers "
                 "would return its rows twice" for path, ids in seen_in.items() if len(ids) > 1]
    return listed


def _pending(storage: Storage, latest: int | None, problems: list[str], timeout_s: float
             ) -> tuple[list[int], list[int], set[str], frozenset[str]]:
    """Batch ids staged as intents past ``latest``: stalled (each a problem) and in flight;
    the final names their commits publish and the temp files those are renamed from.

    Intents at or below ``latest`` belong to finished commits: kept for a while (clean-up
    deletes them), harmless.
    """
    stalled, in_flight, explained, moved = [], [], set(), set()
    for intent in pending_intents(storage, latest):
        if intent.in_flight(timeout_s):
            in_flight.append(intent.batch_id)
        else:
            stalled.append(intent.batch_id)
            problems.append(intent.stalled_problem())
        try:
            state = intent_state(storage, intent.name, intent.batch_id)
        except CorruptLogError as e:
            problems.append(str(e))
            continue
        except FileNotFoundError:  # published and cleaned up since it was listed
            continue
        explained |= {publish.name for publish in state.publish}
        moved |= {publish.temp for publish in state.publish}
    return stalled, in_flight, explained, frozenset(moved)
