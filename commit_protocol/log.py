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
from typing import Any

from commit_protocol import failpoints
from commit_protocol.errors import CorruptLogError
from commit_protocol.naming import INTENT_DIR, LOG_DIR, STATE_DIR
from commit_protocol.state import SinkState
from commit_protocol.storage import Storage

VERSION_LINE = "v1"
_COMPACT = ".compact"
_BLOCK_SIZE = 33554432  # what Hadoop's local filesystem reports; Spark ignores it for reading


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


def file_entry(uri: str, size: int, mtime_ms: int) -> dict[str, Any]:
    """A finalized file as Spark's ``SinkFileStatus`` (all seven fields, ``action: add``)."""
    return {"path": uri, "size": size, "isDir": False, "modificationTime": mtime_ms,
            "blockReplication": 1, "blockSize": _BLOCK_SIZE, "action": "add"}


def _dumps(entry: dict[str, Any]) -> bytes:
    return (json.dumps(entry, separators=(",", ":")) + "\n").encode()


class MetadataLog:
    """Read, stage, publish, compact and clean the log of one output path."""

    def __init__(self, storage: Storage, *, compact_interval: int) -> None:
        self.storage = storage
        self.interval = compact_interval
        self._names: dict[int, str] = {}

    # -- reading -------------------------------------------------------------------------
    def batch_ids(self) -> list[int]:
        """Ids of every log file on storage, ascending."""
        names = (f.path.rsplit("/", 1)[-1] for f in self.storage.list(LOG_DIR))
        self._names = {bid: name for name in names if (bid := batch_id_of(name)) is not None}
        return sorted(self._names)

    def latest_batch_id(self) -> int | None:
        ids = self.batch_ids()
        return ids[-1] if ids else None

    def path_of(self, batch_id: int) -> str:
        """The log file of ``batch_id``: as last listed, else as the interval names it."""
        name = self._names.get(batch_id) or log_file_name(batch_id, self.interval)
        return f"{LOG_DIR}/{name}"

    def _lines(self, path: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """Parsed entries of one log file with their line numbers, version line checked."""
        try:
            handle = self.storage.open_read(path)
        except FileNotFoundError as e:
            raise CorruptLogError(f"metadata log file {path} is missing") from e
        with handle:
            first = handle.readline().decode("utf-8", "replace").rstrip("\n")
            if first != VERSION_LINE:
                raise CorruptLogError(
                    f"metadata log file {path}: expected version line {VERSION_LINE!r}, "
                    f"found {first[:40]!r}; it was written by an unknown or newer writer, or is corrupt")
            for number, raw in enumerate(handle, start=2):
                yield number, _parse_entry(path, number, raw)

    def read_state(self, batch_id: int) -> SinkState:
        """rotsink's state committed by ``batch_id`` (the first entry of its log file)."""
        return self._read_state_at(self.path_of(batch_id))

    def read_intent_state(self, batch_id: int) -> SinkState:
        """The state a staged, unpublished commit of ``batch_id`` decided."""
        return self._read_state_at(self.intent_path(batch_id))

    def _read_state_at(self, path: str) -> SinkState:
        for number, entry in self._lines(path):
            body = entry.get("rotsink") if entry.get("isDir") else None
            if body is None:
                break
            try:
                return SinkState.from_json(body)
            except (KeyError, TypeError, ValueError) as e:
                raise CorruptLogError(f"metadata log file {path} line {number}: "
                                      f"bad rotsink state ({e})") from e
        raise CorruptLogError(f"metadata log file {path} has no rotsink state entry; "
                              "was this path written by another sink?")

    def finalized_entries(self, batch_id: int) -> Iterator[dict[str, Any]]:
        """Every finalized file listed as of ``batch_id``: the last compaction plus deltas."""
        start = last_compaction_at_or_before(batch_id, self.interval)
        first = 0 if start is None else start
        for bid in range(first, batch_id + 1):
            for _, entry in self._lines(self.path_of(bid)):
                if not entry.get("isDir"):
                    yield entry

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
        yield (VERSION_LINE + "\n").encode()
        yield _dumps(self._state_entry(state, now_ms))
        if is_compaction_batch(state.batch_id, self.interval) and state.batch_id > 0:
            old = self._entries_since_last_compaction(state.batch_id - 1)
            oldest = None if retention_ms is None else now_ms - retention_ms
            yield from (_dumps(e) for e in old
                        if oldest is None or e.get("modificationTime", now_ms) >= oldest)
            failpoints.hit("log.during_compaction")
        yield from (_dumps(e) for e in new_entries)

    def _entries_since_last_compaction(self, batch_id: int) -> Iterator[dict[str, Any]]:
        """Entries of files committed up to ``batch_id`` that exist on storage (ids from 0
        when the log started later, e.g. nothing before a compaction)."""
        ids = set(self.batch_ids())
        start = last_compaction_at_or_before(batch_id, self.interval)
        first = 0 if start is None else start
        for bid in range(first, batch_id + 1):
            if bid in ids:
                yield from (e for _, e in self._lines(self.path_of(bid)) if not e.get("isDir"))

    def _state_entry(self, state: SinkState, now_ms: int) -> dict[str, Any]:
        return {"path": f"{self.storage.root_uri.rstrip('/')}/{STATE_DIR}", "size": 0,
                "isDir": True, "modificationTime": now_ms, "blockReplication": 1,
                "blockSize": _BLOCK_SIZE, "action": "add", "rotsink": state.to_json()}

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


def _parse_entry(path: str, number: int, raw: bytes) -> dict[str, Any]:
    try:
        entry = json.loads(raw)
    except ValueError as e:
        raise CorruptLogError(f"metadata log file {path} line {number} is not JSON "
                              f"({e}): {raw[:80]!r}") from e
    if not isinstance(entry, dict) or "path" not in entry or "size" not in entry:
        raise CorruptLogError(f"metadata log file {path} line {number}: expected an entry "
                              f"with 'path' and 'size', found {raw[:80]!r}")
    return entry
