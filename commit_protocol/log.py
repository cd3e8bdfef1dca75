"""The metadata log, in the on-disk format of Spark's ``FileStreamSinkLog`` (version 1).

``_spark_metadata/<batch>`` lists the files finalized by a batch; every ``compact_interval``
batches ``<batch>.compact`` lists all files so far. Spark's readers honour it, so they see
exactly the committed, finalized output. Each file also carries rotsink's state as its first
entry (``isDir: true``, skipped by Spark), so one atomic file commits a batch.

A commit is staged as an *intent* file under ``_rotsink/intent/`` and then published into
``_spark_metadata`` with an exclusive link: the batch is committed exactly when the log file
exists, and an intent whose log file is missing is a commit that was decided but cut short.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from commit_protocol import failpoints
from commit_protocol.errors import CorruptLogError
from commit_protocol.log_files import (
    VERSION_LINE,
    batch_files,
    entries,
    is_compaction_batch,
    last_compaction_at_or_before,
    log_file_name,
    log_file_names,
    raw_blocks,
    read_state_file,
)
from commit_protocol.log_lines import (
    BLOCK_SIZE,
    OWN_BLOCK,
    dumps,
    joined,
    kept_lines,
    with_s3a_paths,
)
from commit_protocol.naming import INTENT_DIR, LOG_DIR, STATE_DIR, to_uri
from commit_protocol.state import SinkState
from commit_protocol.storage import Storage


def open_committed(storage: Storage) -> tuple[MetadataLog, int, SinkState] | None:
    """The log of ``storage`` as committed: the log, its latest batch id and that batch's
    state; None when no batch is committed.

    The log is opened with the compaction interval of the committed state, never a default:
    readers must use the interval the path was written with (Spark derives it from the
    ``.compact`` names on disk), or they read the wrong files after a compaction.
    """
    names = log_file_names(storage)
    if not names:
        return None
    latest = max(names)
    state = read_state_file(storage, f"{LOG_DIR}/{names[latest]}", latest)
    return MetadataLog(storage, compact_interval=state.compact_interval, names=names), latest, state


class MetadataLog:
    """Read, stage, publish, compact and clean the log of one output path."""

    def __init__(self, storage: Storage, *, compact_interval: int,
                 names: dict[int, str] | None = None) -> None:
        self.storage = storage
        self.interval = compact_interval
        self._names: dict[int, str] = dict(names or {})  # as last listed

    # -- reading -------------------------------------------------------------------------
    def batch_ids(self) -> list[int]:
        """Ids of every log file on storage, ascending (see :func:`log_file_names`)."""
        self._names = log_file_names(self.storage)
        return sorted(self._names)

    def latest_batch_id(self) -> int | None:
        ids = self.batch_ids()
        return ids[-1] if ids else None

    def path_of(self, batch_id: int) -> str:
        """The log file of ``batch_id``: as last listed, else as the interval names it."""
        name = self._names.get(batch_id) or log_file_name(batch_id, self.interval)
        return f"{LOG_DIR}/{name}"

    def read_state(self, batch_id: int) -> SinkState:
        """rotsink's state committed by ``batch_id`` (the first entry of its log file)."""
        return read_state_file(self.storage, self.path_of(batch_id), batch_id)

    def read_intent_state(self, batch_id: int) -> SinkState:
        """The state a staged, unpublished commit of ``batch_id`` decided."""
        return read_state_file(self.storage, self.intent_path(batch_id), batch_id)

    def finalized_entries(self, batch_id: int) -> Iterator[dict[str, Any]]:
        """Every finalized file listed as of ``batch_id``: the last compaction plus deltas."""
        return (entry for _, entry in self.listed_entries(batch_id))

    def entries_of(self, batch_id: int) -> Iterator[dict[str, Any]]:
        """The finalized files listed in ``batch_id``'s own log file (all files so far for a
        compaction, that batch's for a delta)."""
        return (entry for _, entry in entries(self.storage, self.path_of(batch_id))
                if not entry.get("isDir"))

    def listed_entries(self, batch_id: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(log file, entry)`` for every finalized file listed as of ``batch_id``."""
        for path in self.listing_files(batch_id):
            for _, entry in entries(self.storage, path):
                if not entry.get("isDir"):
                    yield path, entry

    def listing_files(self, batch_id: int) -> list[str]:
        """The log files that list the output as of ``batch_id``: the last compaction and
        every delta after it (Spark's readers assume the ids contiguous), each checked to
        exist, so that a file deleted by hand is named instead of its entries silently lost."""
        start = last_compaction_at_or_before(batch_id, self.interval)
        first = 0 if start is None else start
        needed = range(first, batch_id + 1)
        if any(bid not in self._names for bid in needed):
            self.batch_ids()  # never listed, or listed before a commit: look again
        missing = [bid for bid in needed if bid not in self._names]
        if missing:
            names = ", ".join(f"{LOG_DIR}/{log_file_name(b, self.interval)}" for b in missing)
            what = "file {} is" if len(missing) == 1 else "files {} are"
            raise CorruptLogError(
                f"metadata log {what.format(names)} missing: the output as of batch {batch_id} "
                f"is listed by every log file from batch {first} to {batch_id}; deleted by "
                "hand? Restore from a backup: the files listed there are unreadable without it")
        return [self.path_of(bid) for bid in needed]

    # -- writing -------------------------------------------------------------------------
    def intent_path(self, batch_id: int) -> str:
        return f"{INTENT_DIR}/{log_file_name(batch_id, self.interval)}"

    def stage(self, state: SinkState, new_entries: list[dict[str, Any]], *,
              now_ms: int, retention_ms: int | None) -> None:
        """Write the intent for ``state.batch_id``: the exact bytes its log file will hold.

        A compaction batch streams the previous compaction and the deltas since then into
        the new file, dropping entries older than ``retention_ms``: memory stays flat in the
        number of entries.
        """
        batch_id = state.batch_id
        self.storage.write_exclusive(self.intent_path(batch_id),
                                     self._file_chunks(state, new_entries, now_ms, retention_ms))

    def _file_chunks(self, state: SinkState, new_entries: list[dict[str, Any]], now_ms: int,
                     retention_ms: int | None) -> Iterator[bytes]:
        yield (VERSION_LINE + "\n").encode() + dumps(self._state_entry(state, now_ms))
        if is_compaction_batch(state.batch_id, self.interval) and state.batch_id > 0:
            oldest = None if retention_ms is None else now_ms - retention_ms
            yield from joined(self._compacted_lines(state.batch_id - 1, oldest))
            failpoints.hit("log.during_compaction")
        yield from joined(dumps(e) for e in new_entries)

    def _compacted_lines(self, batch_id: int, oldest: int | None) -> Iterator[bytes]:
        """The finalized entries listed as of ``batch_id``, as the next compaction writes them.

        The sink's own lines are checked a block at a time and copied byte for byte (no JSON
        parsing or dumping: compaction is linear in the log, so its constant matters), but
        for the ``s3://`` paths earlier versions wrote, renamed ``s3a://`` for Spark; any
        other line is parsed, checked and rewritten. Entries modified before ``oldest`` are
        dropped. A missing log file fails the compaction: skipping it would drop its files
        from every later listing.
        """
        self.batch_ids()
        for path in self.listing_files(batch_id):
            for offset, block in raw_blocks(self.storage, path):
                if oldest is None and OWN_BLOCK.fullmatch(block):
                    yield with_s3a_paths(block)
                    continue
                try:
                    yield from kept_lines(path, 0, block, oldest)
                except CorruptLogError:  # name its line: count the lines before the block
                    first = self.storage.read(path, 0, offset).count(b"\n") + 1
                    for _ in kept_lines(path, first, block, oldest):
                        pass
                    raise

    def _state_entry(self, state: SinkState, now_ms: int) -> dict[str, Any]:
        return {"path": to_uri(self.storage.root_uri, STATE_DIR), "size": 0,
                "isDir": True, "modificationTime": now_ms, "blockReplication": 1,
                "blockSize": BLOCK_SIZE, "action": "add", "rotsink": state.to_json()}

    def publish(self, batch_id: int, *, sync: bool = False) -> bool:
        """Make the staged intent the log file of ``batch_id``: the commit point.

        Returns False when the log file already existed (another writer, or an earlier
        attempt of this commit, won); the existing file is never touched. ``sync``: the log
        file's name is made durable before the intent goes (the directories reach the disk
        independently: a power loss must not leave neither).
        """
        intent = self.intent_path(batch_id)
        try:
            self.storage.link(intent, self.path_of(batch_id))
        except FileExistsError:
            return False
        if sync:
            self.storage.sync_directories([LOG_DIR])
        self.storage.delete(intent)
        return True

    def discard_intent(self, batch_id: int) -> None:
        self.storage.delete(self.intent_path(batch_id))

    def delete_expired(self, *, latest: int, now_ms: int, delay_ms: int) -> list[str]:
        """Delete log files no reader needs any more and older than ``delay_ms``.

        Readers need the newest compaction and what follows; we also keep the compaction
        before it (a reader that listed the directory just before the newest appeared still
        reads it), so at least two ``.compact`` files always remain.
        """
        newest = last_compaction_at_or_before(latest, self.interval)
        if newest is None or newest < self.interval:
            return []
        keep_from = newest - self.interval
        deleted = []
        for batch_id, infos in batch_files(self.storage, LOG_DIR).items():
            for info in infos:
                if batch_id < keep_from and info.mtime_ms < now_ms - delay_ms:
                    self.storage.delete(info.path)
                    deleted.append(info.path)
        return deleted
