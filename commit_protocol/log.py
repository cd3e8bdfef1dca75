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

import json
from collections.abc import Iterator
from typing import Any, BinaryIO

from commit_protocol import failpoints
from commit_protocol.errors import CorruptLogError
from commit_protocol.log_lines import (BLOCK_SIZE, CHUNK, OWN_BLOCK, dumps, joined,
                                       kept_lines, parse_line)
from commit_protocol.naming import INTENT_DIR, LOG_DIR, STATE_DIR
from commit_protocol.state import SinkState
from commit_protocol.storage import Storage

VERSION_LINE = "v1"
_COMPACT = ".compact"
_MAX_VERSION_LINE = 4096  # a garbage file without newlines is not read whole to say so


def is_compaction_batch(batch_id: int, interval: int) -> bool:
    """Whether ``batch_id`` is written as ``<id>.compact``.

    >>> [b for b in range(25) if is_compaction_batch(b, 10)]
    [9, 19]
    """
    return (batch_id + 1) % interval == 0


def log_file_name(batch_id: int, interval: int) -> str:
    """``"9.compact"`` for a compaction batch, ``"12"`` otherwise (interval 10)."""
    return f"{batch_id}{_COMPACT}" if is_compaction_batch(batch_id, interval) else str(batch_id)


def last_compaction_at_or_before(batch_id: int, interval: int) -> int | None:
    """The newest compaction batch id ``<= batch_id``, or None before the first one.

    >>> last_compaction_at_or_before(25, 10), last_compaction_at_or_before(19, 10)
    (19, 19)
    >>> last_compaction_at_or_before(8, 10) is None
    True
    """
    candidate = (batch_id + 1) // interval * interval - 1
    return candidate if candidate >= 0 else None


def batch_id_of(name: str) -> int | None:
    """Batch id of a log file name, None for anything else (temp files, stray files).

    >>> batch_id_of("19.compact"), batch_id_of("7"), batch_id_of(".7.tmp")
    (19, 7, None)
    """
    stem = name[: -len(_COMPACT)] if name.endswith(_COMPACT) else name
    return int(stem) if stem.isdigit() else None


class MetadataLog:
    """Read, stage, publish, compact and clean the log of one output path."""

    def __init__(self, storage: Storage, *, compact_interval: int) -> None:
        self.storage = storage
        self.interval = compact_interval
        self._names: dict[int, str] = {}

    # -- reading -------------------------------------------------------------------------
    def batch_ids(self) -> list[int]:
        """Ids of every log file on storage, ascending.

        Raises ``CorruptLogError`` when two files hold one batch id (``3`` and ``3.compact``):
        Spark's readers would take either, so neither may be trusted.
        """
        names: dict[int, str] = {}
        for info in self.storage.list(LOG_DIR):
            name = info.path.rsplit("/", 1)[-1]
            if (bid := batch_id_of(name)) is None:
                continue
            if bid in names:
                both = " and ".join(f"{LOG_DIR}/{n}" for n in sorted((names[bid], name)))
                raise CorruptLogError(
                    f"metadata log files {both} both hold batch {bid}: expected one file per "
                    "batch; one was copied or renamed by hand? Remove the one that does not "
                    "belong (readers may take either)")
            names[bid] = name
        self._names = names
        return sorted(names)

    def latest_batch_id(self) -> int | None:
        ids = self.batch_ids()
        return ids[-1] if ids else None

    def path_of(self, batch_id: int) -> str:
        """The log file of ``batch_id``: as last listed, else as the interval names it."""
        name = self._names.get(batch_id) or log_file_name(batch_id, self.interval)
        return f"{LOG_DIR}/{name}"

    def _lines(self, path: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """Parsed entries of one log file with their line numbers, version line checked."""
        for number, raw in self._raw_lines(path):
            yield number, parse_line(path, number, raw)

    def _open_checked(self, path: str) -> BinaryIO:
        """``path`` opened for reading after its version line, which is checked."""
        try:
            handle = self.storage.open_read(path)
        except FileNotFoundError as e:
            raise CorruptLogError(f"metadata log file {path} is missing (deleted while it was "
                                  "read, or by hand)") from e
        try:
            first = handle.readline(_MAX_VERSION_LINE).decode("utf-8", "replace").rstrip("\n")
        except BaseException:
            handle.close()
            raise
        if first != VERSION_LINE:
            handle.close()
            binary = "\ufffd" in first or any(c < " " and c not in "\r\t" for c in first)
            found = "binary data" if binary else repr(first[:40])
            raise CorruptLogError(
                f"metadata log file {path}: expected version line {VERSION_LINE!r}, "
                f"found {found}; it was written by an unknown or newer writer, or is corrupt")
        return handle

    def _raw_lines(self, path: str) -> Iterator[tuple[int, bytes]]:
        """Entry lines of one log file with their line numbers, version line checked."""
        with self._open_checked(path) as handle:
            yield from enumerate(handle, start=2)

    def _raw_blocks(self, path: str) -> Iterator[tuple[int, bytes]]:
        """``(offset, block)``: the entry lines of one log file in blocks of whole lines of
        about ``CHUNK`` bytes (line 2, the state entry, alone), version line checked."""
        with self._open_checked(path) as handle:
            offset = handle.tell()
            if state := handle.readline():
                yield offset, state
                offset += len(state)
            rest = b""
            while chunk := handle.read(CHUNK):
                end = chunk.rfind(b"\n") + 1
                if end:
                    yield offset, rest + chunk[:end]
                    offset += len(rest) + end
                    rest = chunk[end:]
                else:
                    rest += chunk
            if rest:
                yield offset, rest

    def read_state(self, batch_id: int) -> SinkState:
        """rotsink's state committed by ``batch_id`` (the first entry of its log file)."""
        return self._read_state_at(self.path_of(batch_id), batch_id)

    def read_intent_state(self, batch_id: int) -> SinkState:
        """The state a staged, unpublished commit of ``batch_id`` decided."""
        return self._read_state_at(self.intent_path(batch_id), batch_id)

    def _read_state_at(self, path: str, batch_id: int) -> SinkState:
        """The state entry of ``path``, which must be ``batch_id``'s: a log file copied or
        renamed to another batch id would otherwise pass off an old state as the latest."""
        found = "the end of the file"
        for number, entry in self._lines(path):
            body = entry.get("rotsink") if entry.get("isDir") else None
            if body is None:
                found = f"{json.dumps(entry)[:80]!r}"
                break
            try:
                if not isinstance(body, dict):
                    raise TypeError(f"expected an object, found {type(body).__name__}")
                state = SinkState.from_json(body)
            except (KeyError, TypeError, ValueError) as e:
                detail = f"no field {e}" if isinstance(e, KeyError) else str(e)
                raise CorruptLogError(f"metadata log file {path} line {number}: "
                                      f"bad rotsink state ({detail})") from e
            if state.batch_id != batch_id:
                raise CorruptLogError(
                    f"metadata log file {path} holds the state of batch {state.batch_id}: "
                    f"expected batch {batch_id}; copied or renamed by hand?")
            return state
        raise CorruptLogError(f"metadata log file {path}: expected rotsink's state entry on "
                              f"line 2, found {found}; truncated, or written by another sink?")

    def finalized_entries(self, batch_id: int) -> Iterator[dict[str, Any]]:
        """Every finalized file listed as of ``batch_id``: the last compaction plus deltas."""
        return (entry for _, entry in self.listed_entries(batch_id))

    def listed_entries(self, batch_id: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(log file, entry)`` for every finalized file listed as of ``batch_id``."""
        for path in self.listing_files(batch_id):
            for _, entry in self._lines(path):
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
        parsing or dumping: compaction is linear in the log, so its constant matters); any
        other line is parsed, checked and rewritten. Entries modified before ``oldest`` are
        dropped. A missing log file fails the compaction: skipping it would drop its files
        from every later listing.
        """
        self.batch_ids()
        for path in self.listing_files(batch_id):
            for offset, block in self._raw_blocks(path):
                if oldest is None and OWN_BLOCK.fullmatch(block):
                    yield block
                    continue
                try:
                    yield from kept_lines(path, 0, block, oldest)
                except CorruptLogError:  # name its line: count the lines before the block
                    first = self.storage.read(path, 0, offset).count(b"\n") + 1
                    for _ in kept_lines(path, first, block, oldest):
                        pass
                    raise

    def _state_entry(self, state: SinkState, now_ms: int) -> dict[str, Any]:
        return {"path": f"{self.storage.root_uri.rstrip('/')}/{STATE_DIR}", "size": 0,
                "isDir": True, "modificationTime": now_ms, "blockReplication": 1,
                "blockSize": BLOCK_SIZE, "action": "add", "rotsink": state.to_json()}

    def has_intent(self, batch_id: int) -> bool:
        return self.storage.exists(self.intent_path(batch_id))

    def publish(self, batch_id: int) -> bool:
        """Make the staged intent the log file of ``batch_id``: the commit point.

        Returns False when the log file already existed (another writer, or an earlier
        attempt of this commit, won); the existing file is never touched.
        """
        intent = self.intent_path(batch_id)
        try:
            self.storage.link(intent, self.path_of(batch_id))
        except FileExistsError:
            return False
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
        for info in self.storage.list(LOG_DIR):
            bid = batch_id_of(info.path.rsplit("/", 1)[-1])
            if bid is not None and bid < keep_from and info.mtime_ms < now_ms - delay_ms:
                self.storage.delete(info.path)
                deleted.append(info.path)
        return deleted
