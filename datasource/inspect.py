"""What the log says about an output path: per-batch commits, in-progress files, orphans."""

from __future__ import annotations

from dataclasses import dataclass

from commit_protocol.housekeeping import orphans
from commit_protocol.log import MetadataLog
from commit_protocol.naming import from_uri
from commit_protocol.reading import open_committed
from commit_protocol.state import SinkState
from commit_protocol.storage import open_storage


@dataclass(frozen=True)
class BatchSummary:
    batch_id: int
    finalized: list[tuple[str, int, str]]
    in_progress: list[tuple[str, int, int]]
    compacted: bool


def _log_and_latest(path: str,
                    fs_options: dict[str, str] | None = None) -> tuple[MetadataLog, int | None]:
    storage = open_storage(path, fs_options)
    committed = open_committed(storage)
    if committed is None:
        return MetadataLog(storage, compact_interval=1), None
    log, latest, _ = committed
    return log, latest


def batch_summaries(path: str, fs_options: dict[str, str] | None = None) -> list[BatchSummary]:
    """One summary per log file still on storage (deltas list what their batch finalized)."""
    log, _ = _log_and_latest(path, fs_options)
    summaries = []
    for batch_id in log.batch_ids():
        state = log.read_state(batch_id)
        published = [(name, size, reason) for _, name, size, reason in state.extra.get("publish", [])]
        in_progress = [(f.name, f.size, f.records) for f in state.in_progress]
        compacted = log.path_of(batch_id).endswith(".compact")
        summaries.append(BatchSummary(batch_id, published, in_progress, compacted))
    return summaries


def verify(path: str, fs_options: dict[str, str] | None = None) -> list[str]:
    """Problems found: listed files missing or of the wrong size, short in-progress files."""
    log, latest = _log_and_latest(path, fs_options)
    if latest is None:
        return [f"{path}: no committed batch in _spark_metadata"]
    storage, state = log.storage, log.read_state(latest)
    problems = []
    for entry in log.finalized_entries(latest):
        name = from_uri(storage.root_uri, entry["path"])
        problems += _size_problem(storage, name, int(entry["size"]), exact=True)
    for f in state.in_progress:
        problems += _size_problem(storage, f.temp, f.size, exact=False)
    return problems


def _size_problem(storage, name: str, expected: int, *, exact: bool) -> list[str]:
    try:
        size = storage.size(name)
    except FileNotFoundError:
        return [f"{name}: listed in the log ({expected} bytes) but missing"]
    if size < expected or (exact and size != expected):
        return [f"{name}: the log commits {expected} bytes, storage holds {size}"]
    return []


def orphan_files(path: str, fs_options: dict[str, str] | None = None) -> list[str]:
    log, latest = _log_and_latest(path, fs_options)
    state: SinkState | None = None if latest is None else log.read_state(latest)
    return [] if state is None else [i.path for i in orphans(log.storage, state)]
