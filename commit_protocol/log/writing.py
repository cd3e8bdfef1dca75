"""What a log file holds, composed for ``MetadataLog.stage``
(:mod:`commit_protocol.log.metadata_log`): the version line, rotsink's state entry
(the head; a compaction adds the snapshot), the entries a compaction carries over from the log
so far -- streamed, so memory stays flat in the number of entries -- and the entries of the
files the batch finalizes. It needs of the log only what :class:`ListedLog` says, and so
never imports the log that calls it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from commit_protocol.log.files import (
    COMPACT_SUFFIX,
    VERSION_LINE,
    is_compaction_batch,
    is_state_line,
    raw_blocks,
)
from commit_protocol.log.lines import (
    BLOCK_SIZE,
    OWN_BLOCK,
    dumps,
    joined,
    kept_lines,
    parse_line,
)
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.storage.concurrent import each
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.naming import STATE_DIR
from commit_protocol.vocabulary.uris import EntryPaths, to_uri


class ListedLog(Protocol):
    """What composing a log file reads of the log (a ``MetadataLog``)."""

    storage: Storage
    interval: int

    def batch_ids(self) -> list[int]:
        """The committed batch ids, listed afresh."""

    def listing_files(self, batch_id: int) -> list[str]:
        """The log files that list the output as of ``batch_id``."""

# A log file up to this size is kept in memory for its publish (an object store takes it in
# one PUT instead of reading the intent back); a larger compaction streams to its intent.
KEPT_BYTES = 8 << 20


def file_chunks(log: ListedLog, state: SinkState, previous: SinkState | None,
                new_entries: list[dict[str, Any]], now_ms: int,
                retention_ms: int | None,
                dropped: frozenset[str] = frozenset()) -> Iterator[bytes]:
    """The bytes of ``state.batch_id``'s log file, in chunks: the version line and the head
    (what changed since ``previous``); for a compaction batch the snapshot, then every entry
    listed as of the batch before (older than ``retention_ms``, and the relative paths
    ``dropped``, left out); then the new entries (the files this batch finalizes)."""
    head = state.head_json(previous)
    compaction = is_compaction_batch(state.batch_id, log.interval)
    head["snapshot"] = compaction
    root = log.storage.root_uri
    yield (VERSION_LINE + "\n").encode() + dumps(state_entry(root, "rotsink", head, now_ms))
    if compaction:
        yield dumps(state_entry(root, "rotsink_snapshot", state.snapshot_json(), now_ms))
    if compaction and state.batch_id > 0:
        oldest = None if retention_ms is None else now_ms - retention_ms
        lines = compacted_lines(log, state.batch_id - 1, oldest)
        if dropped:
            lines = _without(lines, dropped, EntryPaths(root))
        yield from joined(lines)
        failpoints.hit("log.during_compaction")
    yield from joined(dumps(e) for e in new_entries)


def compacted_lines(log: ListedLog, batch_id: int, oldest: int | None) -> Iterator[bytes]:
    """The finalized entries listed as of ``batch_id``, as the next compaction writes them.

    The sink's own lines are checked a block at a time and copied byte for byte (no JSON
    parsing or dumping: compaction is linear in the log, so its constant matters), but
    for the paths earlier versions wrote (``s3://``, an unquoted root), renamed as Spark's
    readers need them (:class:`~commit_protocol.vocabulary.uris.EntryPaths`); any other line is
    parsed, checked and rewritten. Entries modified before ``oldest`` are
    dropped. A missing log file fails the compaction: skipping it would drop its files
    from every later listing.
    """
    log.batch_ids()
    paths = log.listing_files(batch_id)
    entry_paths = EntryPaths(log.storage.root_uri)
    # The deltas are small: on an object store they are fetched together, not one
    # request after another (a local disk streams each in turn)
    deltas = [p for p in paths if not p.endswith(COMPACT_SUFFIX)]
    fetched = dict(zip(deltas, each(log.storage, log.storage.open_read, deltas),
                       strict=True)) if log.storage.concurrency > 1 else {}
    for path in paths:
        for offset, block in raw_blocks(log.storage, path, fetched.pop(path, None)):
            if is_state_line(block):
                continue
            if oldest is None and OWN_BLOCK.fullmatch(block):
                yield entry_paths.canonical_lines(block)
                continue
            try:
                yield from kept_lines(path, 0, block, oldest, entry_paths)
            except CorruptLogError:  # name its line: count the lines before the block
                first = log.storage.read(path, 0, offset).count(b"\n") + 1
                for _ in kept_lines(path, first, block, oldest, entry_paths):
                    pass
                raise


def _without(lines: Iterator[bytes], dropped: frozenset[str],
             entry_paths: EntryPaths) -> Iterator[bytes]:
    """``lines`` (chunks of whole entry lines) but the entries of the relative paths
    ``dropped``: parsed one by one, which costs only the rare compaction that follows a
    table's removals."""
    for chunk in lines:
        for line in chunk.splitlines(keepends=True):
            if entry_paths.relative(parse_line(COMPACTION, 0, line)["path"]) not in dropped:
                yield line


COMPACTION = "(the compaction being written)"


def state_entry(root_uri: str, key: str, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """An entry Spark's readers skip (``isDir``), holding rotsink's ``body``."""
    return {"path": to_uri(root_uri, STATE_DIR), "size": 0,
            "isDir": True, "modificationTime": now_ms, "blockReplication": 1,
            "blockSize": BLOCK_SIZE, "action": "add", key: body}
