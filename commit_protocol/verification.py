"""``rotsink verify``: does storage hold exactly what the metadata log commits?

Runs anywhere, without Spark (the CLI, a test, a crash harness): it reads the log, lists the
output tree and, when asked, decodes the committed bytes of every file. Each problem is one
line that names the file or batch and says what was expected and what was found. With
``repair=True`` it first rolls forward the commits a driver decided (staged as intents) but
did not publish, exactly as the next plan or commit of the query would.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from commit_protocol.committer import Committer
from commit_protocol.config import SinkConfig
from commit_protocol.errors import CorruptLogError, RotsinkError
from commit_protocol.file_checks import (
    InProgressCheck,
    authenticate,
    check_finalized,
    check_in_progress,
    unlisted_visible,
)
from commit_protocol.housekeeping import orphans
from commit_protocol.log import MetadataLog
from commit_protocol.log_files import (
    batch_id_of,
    batch_names,
    last_compaction_at_or_before,
    log_file_name,
    log_file_names,
)
from commit_protocol.naming import (
    INPROGRESS_DIR,
    INTENT_DIR,
    LOG_DIR,
    success_marker,
)
from commit_protocol.reading import (
    open_committed,
)
from commit_protocol.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.uris import from_uri


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

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_output(storage: Storage, *, ring: Mapping[str, bytes] | None = None,
                  deep: bool = False, repair: bool = False) -> Verification:
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
        First roll forward decided-but-unpublished commits.

    Returns
    -------
    Verification
        Never raises for what it finds on storage: damage becomes a problem line.

    A check compares storage with one committed state, so a commit that lands meanwhile (a
    running query, or a killed driver's commit worker that outlives it for a moment) can move
    a file the check then misses. Problems count only if the names in the log, intent and
    in-progress directories did not change during the check; otherwise the check runs again
    on the newer state (up to ``_ATTEMPTS`` times).
    """
    problems: list[str] = []
    repaired = _repair(storage, problems) if repair else []
    for attempt in range(_ATTEMPTS):
        before = _commit_traces(storage)
        found = _check(storage, ring=ring, deep=deep, repaired=repaired)
        if found.ok or _commit_traces(storage) == before:
            break
        time.sleep(_BACKOFF_S * (attempt + 1))
    else:
        found = replace(found, problems=[*found.problems, (
            f"{storage.root_uri}: the log or the in-progress files changed during each of "
            f"{_ATTEMPTS} checks (a query is writing): problems above may be moves by its "
            "commits; verify again")])
    return replace(found, problems=problems + found.problems)


_ATTEMPTS = 5
_BACKOFF_S = 0.2


def _commit_traces(storage: Storage) -> frozenset[str]:
    """The names in the log, intent and in-progress directories: every commit step that can
    move a checked file changes one of them (staging an intent, publishing a temp file,
    fencing a copy, cleaning up orphans, writing the log file)."""
    return frozenset(path for directory in (LOG_DIR, INTENT_DIR, INPROGRESS_DIR)
                     for path in storage.names(directory))


def _check(storage: Storage, *, ring: Mapping[str, bytes] | None, deep: bool,
           repaired: list[int]) -> Verification:
    """One check of storage against the latest committed state."""
    problems: list[str] = []
    names = _log_names(storage)
    problems += _duplicate_log_files(names)
    latest = max(names, default=None)
    pending, explained, moved = _pending(storage, latest, problems)
    if latest is None:
        if not pending:
            problems.append(f"{storage.root_uri}: no committed batch in {LOG_DIR}")
        return Verification(None, problems, 0, 0, [], [], pending, repaired, 0)
    try:
        state = _committed_state(storage)
    except CorruptLogError as e:
        problems.append(str(e))  # without the latest state nothing else can be checked
        return Verification(latest, problems, 0, 0, [], [], pending, repaired, 0)
    listed = _listed_files(storage, state, latest, names, problems)
    finalized = check_finalized(storage, listed, problems)
    in_progress, prefixes = check_in_progress(storage, state, problems, moved=moved)
    problems += unlisted_visible(storage, set(listed) | explained)
    problems += [f"{success_marker(d)}: the log's batch {latest} completed partition "
                 f"{d or '(root)'} but its marker is missing" for d in state.markers
                 if not storage.exists(success_marker(d))]
    authenticated = 0
    if deep or ring is not None:
        authenticated = authenticate(storage, state, finalized + prefixes, ring, problems)
    return Verification(latest, problems, len(listed), sum(listed.values()), in_progress,
                        [i.path for i in orphans(storage, state)], pending, repaired,
                        authenticated)


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


def _pending(storage: Storage, latest: int | None,
             problems: list[str]) -> tuple[list[int], set[str], frozenset[str]]:
    """Batch ids staged as intents past ``latest``, the final names their commits publish
    and the temp files those are renamed from.

    Intents at or below ``latest`` belong to finished commits: kept for a while (clean-up
    deletes them), harmless.
    """
    pending, explained, moved = [], set(), set()
    for info in sorted(storage.list(INTENT_DIR), key=lambda i: i.path):
        name = info.path.rsplit("/", 1)[-1]
        batch_id = batch_id_of(name)
        if batch_id is None or (latest is not None and batch_id <= latest):
            continue
        pending.append(batch_id)
        problems.append(f"{info.path}: batch {batch_id} was decided but not published (the "
                        "driver died during its commit): restart the query or run "
                        "`rotsink verify --repair`")
        try:
            state = _intent_state(storage, name, batch_id)
        except CorruptLogError as e:
            problems.append(str(e))
            continue
        explained |= {publish.name for publish in state.publish}
        moved |= {publish.temp for publish in state.publish}
    return sorted(pending), explained, frozenset(moved)


def _intent_state(storage: Storage, name: str, batch_id: int) -> SinkState:
    return MetadataLog(storage, compact_interval=_naming_interval(name, batch_id)) \
        .read_intent_state(batch_id)


def _naming_interval(name: str, batch_id: int) -> int:
    """A compaction interval under which batch ``batch_id``'s log file is called ``name``
    (to find the file; the state in it then says the path's real interval).

    >>> _naming_interval("9.compact", 9), _naming_interval("12", 12)
    (10, 14)
    """
    return batch_id + 1 if name.endswith(".compact") else batch_id + 2


def _repair(storage: Storage, problems: list[str]) -> list[int]:
    """Roll pending intents forward as the query's next commit would; the ids it published."""
    intents = {batch_id: name for info in storage.list(INTENT_DIR)
               if (batch_id := batch_id_of(name := info.path.rsplit("/", 1)[-1])) is not None}
    if not intents:
        return []
    before = max(log_file_names(storage), default=None)
    pending = sorted(b for b in intents if before is None or b > before)
    try:
        state = (_intent_state(storage, intents[pending[0]], pending[0]) if pending
                 else _committed_state(storage))
        config = SinkConfig(path=storage.root_uri, compact_interval=state.compact_interval)
        after = Committer(storage, config, state.schema_json).recover()
    except (RotsinkError, OSError) as e:  # e.g. a renamed file is gone: report, never guess
        problems.append(f"{storage.root_uri}: cannot repair ({type(e).__name__}: {e})")
        return []
    return [b for b in pending if after is not None and b <= after]
