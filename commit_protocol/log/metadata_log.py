"""The metadata log of one output path: :class:`MetadataLog` reads states and listings, and
stages, publishes and cleans up log files (what a log file holds is composed by
:mod:`commit_protocol.log.writing`)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

from commit_protocol.log.cache import STATES
from commit_protocol.log.files import (
    batch_files,
    entries,
    is_compaction_batch,
    last_compaction_at_or_before,
    log_file_name,
    log_file_names,
    read_head,
    read_snapshot,
)
from commit_protocol.log.writing import KEPT_BYTES, file_chunks
from commit_protocol.metrics import timed
from commit_protocol.records.state import SinkState, StateHead
from commit_protocol.storage import FileInfo, Storage
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.naming import INTENT_DIR, LOG_DIR


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
    head = read_head(storage, f"{LOG_DIR}/{names[latest]}", latest)
    log = MetadataLog(storage, compact_interval=head.state.compact_interval, names=names)
    return log, latest, log.state_of(head)


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

    def read_state(self, batch_id: int, *, state_id: str | None = None) -> SinkState:
        """rotsink's whole state committed by ``batch_id``. ``state_id``, the id the caller
        knows it by (the basis of a plan), takes it from this process's cache without a read
        when it is there."""
        if state_id:
            cached = STATES.get(self.storage.root_uri, batch_id, state_id)
            if cached is not None:
                return cached
        return self.state_of(self.read_head(batch_id))

    def read_head(self, batch_id: int) -> StateHead:
        """The head of ``batch_id``'s log file: its small fields (owner, schema, options)
        without the work of the whole state."""
        return read_head(self.storage, self.path_of(batch_id), batch_id)

    def read_intent_state(self, batch_id: int) -> SinkState:
        """The state a staged, unpublished commit of ``batch_id`` decided."""
        path = self.intent_path(batch_id)
        return self.state_of(read_head(self.storage, path, batch_id), path=path)

    def state_of(self, head: StateHead, *, path: str | None = None) -> SinkState:
        """The whole state ``head`` (read from ``path``, by default its log file) belongs
        to: from this process's cache, the head's own snapshot, or back through the heads
        before it to a whole state, each checked to name the one before."""
        root = self.storage.root_uri
        pending: list[StateHead] = []
        base: SinkState | None = None
        while True:
            batch_id = head.state.batch_id
            cached = STATES.get(root, batch_id, head.state.state_id)
            if cached is not None:
                base = cached
                break
            if head.whole:
                base = head.state
                break
            before = None if head.after is None else STATES.get(root, batch_id - 1, head.after)
            if before is not None or head.after is None:
                pending.append(head)
                base = before
                break
            if head.snapshot:
                base = read_snapshot(self.storage, path or self.path_of(batch_id), head)
                break
            if not pending:  # about to walk back: name every missing file of the way at once
                self.listing_files(batch_id if path is None else batch_id - 1)
            pending.append(head)
            earlier = self.read_head(batch_id - 1)
            if earlier.state.state_id != head.after:
                newer = path or self.path_of(batch_id)
                raise CorruptLogError(
                    f"metadata log file {newer} follows the state {head.after!r}, but "
                    f"{self.path_of(batch_id - 1)} holds the state "
                    f"{earlier.state.state_id!r}: a log file was replaced by hand, or copied "
                    "from another output path")
            head, path = earlier, None
        for step in reversed(pending):
            base = step.applied_to(base)
        assert base is not None
        STATES.put(root, base)
        return base

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

    @timed("log")
    def stage(self, state: SinkState, new_entries: list[dict[str, Any]], *,
              previous: SinkState | None, now_ms: int, retention_ms: int | None,
              intent: bool = True, dropped: frozenset[str] = frozenset()) -> bytes | None:
        """The log file of ``state.batch_id``: written as its intent (``intent``), and
        returned for :meth:`publish`, unless it is a compaction larger than ``KEPT_BYTES``,
        which only its intent holds (None).

        Its head holds what changed since ``previous`` (the committed state of the batch
        before; None for batch 0); a compaction batch adds the snapshot, and streams the
        previous compaction and the deltas since then into the new file, dropping entries
        older than ``retention_ms`` and those of ``dropped`` (relative paths: files the
        table the log follows removed): memory stays flat in the number of entries. A batch
        that renames nothing needs no intent (nothing happens between its decision and its
        log file), except a compaction too large to keep, published from its intent.
        """
        batch_id = state.batch_id
        chunks = file_chunks(self, state, previous, new_entries, now_ms, retention_ms, dropped)
        kept: list[bytes] = []
        size = 0
        compaction = is_compaction_batch(batch_id, self.interval)
        for chunk in chunks:  # a compaction beyond KEPT_BYTES is streamed, not kept
            kept.append(chunk)
            size += len(chunk)
            if compaction and len(kept) > 1 and size > KEPT_BYTES:
                self.storage.write_exclusive(self.intent_path(batch_id), chain(kept, chunks))
                STATES.put(self.storage.root_uri, state)
                return None
        data = b"".join(kept)
        if intent:
            self.storage.write_exclusive(self.intent_path(batch_id), [data])
        STATES.put(self.storage.root_uri, state)
        return data

    @timed("log")
    def publish(self, batch_id: int, data: bytes | None = None, *, sync: bool = False) -> bool:
        """Create the log file of ``batch_id`` exclusively: the commit point. ``data`` is its
        content as :meth:`stage` returned it; None copies the staged intent (a compaction,
        or a commit another driver staged).

        Returns False when the log file already existed (another writer, or an earlier
        attempt of this commit, won); the existing file is never touched. ``sync``: the log
        file's name is made durable before the commit returns (Spark then records the batch
        as done). The intent stays: a second commit of the batch from stale reports fails
        to create it again, and clean-up deletes it later (:meth:`delete_expired`).
        """
        try:
            if data is None:
                self.storage.link(self.intent_path(batch_id), self.path_of(batch_id))
            else:
                self.storage.write_exclusive(self.path_of(batch_id), [data])
        except FileExistsError:
            return False
        if sync:
            self.storage.sync_directories([LOG_DIR])
        return True

    def expired(self, *, latest: int, now_ms: int, delay_ms: int) -> dict[int, list[FileInfo]]:
        """The log files no reader needs any more and older than ``delay_ms``, by batch id.

        Readers need the newest compaction and what follows; we also keep the compaction
        before it (a reader that listed the directory just before the newest appeared still
        reads it), so at least two ``.compact`` files always remain.

        A compaction and the deltas after it go together, once all are older than the
        delay: a delta's state and listing are read through the log files of its group before
        it, so a delta whose compaction was deleted could not be read by the next clean-up
        (which keeps expired states for change feeds) nor by a reader.
        """
        newest = last_compaction_at_or_before(latest, self.interval)
        if newest is None or newest < self.interval:
            return {}
        keep_from = newest - self.interval
        listed = {batch_id: infos for batch_id, infos in batch_files(self.storage, LOG_DIR).items()
                  if batch_id < keep_from}
        old = {batch_id: [info for info in infos if info.mtime_ms < now_ms - delay_ms]
               for batch_id, infos in listed.items()}
        young = {self._group(batch_id) for batch_id, infos in listed.items()
                 if len(old[batch_id]) < len(infos)}
        return {batch_id: infos for batch_id, infos in old.items()
                if infos and self._group(batch_id) not in young}

    def _group(self, batch_id: int) -> int:
        """The compaction a batch's log file is read through (-1: before the first)."""
        found = last_compaction_at_or_before(batch_id, self.interval)
        return -1 if found is None else found

    def delete_expired(self, expired: dict[int, list[FileInfo]]) -> list[str]:
        """Delete the log files :meth:`expired` found."""
        files = [info for infos in expired.values() for info in infos]
        self.storage.delete_all(files)
        return [info.path for info in files]

    def delete_old_intents(self, *, latest: int) -> list[str]:
        """Delete the intents of batches committed ``compact_interval`` or more batches
        before ``latest``: the newer ones stay, so that a commit repeated from stale reports
        (a driver that hung past its batch) fails to stage its intent again and changes
        nothing, while the intent directory, which every planning lists, stays short."""
        old = [info for batch_id, infos in batch_files(self.storage, INTENT_DIR).items()
               for info in infos if batch_id <= latest - self.interval]
        self.storage.delete_all(old)
        return [info.path for info in old]
