"""The committed bytes of one file as a seekable stream, wherever the protocol moves the file
while it is read.

A read plans from one committed state and may run while later commits move that state's
in-progress files: a roll publishes one under its final name (on object stores: composes it
and deletes its segments), a fence continues one from a copy at a fresh temp name and the
old temp is deleted as an orphan after ``log.cleanupDelay``. Committed bytes never change,
so the same bytes read where the file went are exactly the planned data. A
:class:`CommittedInput` opens the first place that holds them and, when a read there fails
because the file moved mid-read (segments deleted by a compose), reopens the next place at
the same offset. Only when no place holds them is the file lost: a loud error naming it.

Nothing past the committed length is ever read, and a finalized file (immutable) must hold
exactly its committed length: more means it was modified after its commit.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

from commit_protocol.log import open_committed
from commit_protocol.reading.files import CommittedFile
from commit_protocol.storage import Storage
from commit_protocol.storage.inputs import PrefixInput, SeekableInput
from commit_protocol.vocabulary.errors import IntegrityError, SegmentError, TruncatedFileError

# A moved file reads as missing: gone from a local directory, or on an object store its
# segments (partly) deleted by the compose that published it.
MOVED = (FileNotFoundError, SegmentError)
# Reads through ``io.BufferedReader`` fetch at least this much: ranged GETs on object stores
# stay few, and a task's memory stays small.
BUFFER_BYTES = 1 << 20


class CommittedInput(SeekableInput):
    """Bytes ``[0, f.length)`` of ``f``: see the module docstring."""

    def __init__(self, storage: Storage, f: CommittedFile) -> None:
        super().__init__()
        self.file = f
        self.path, self.length = f.path, f.length
        self._storage = storage
        self._places = _locations(storage, f)
        self._short: int | None = None  # bytes the planned path held, when too few
        self._input = self._open_next()

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while True:
            try:
                self._input.seek(self._pos)
                got = self._input.readinto(buffer)
            except MOVED:
                self._input.close()
                self._input = self._open_next()
                continue
            if got == 0 and self._pos < self.file.length and len(buffer):
                raise TruncatedFileError(f"{self.file.path} ends at byte {self._pos}; the log "
                                         f"commits {self.file.length}")
            self._pos += got
            return got

    def readall(self) -> bytes:
        """The rest of the committed bytes in one buffer (``RawIOBase`` would read them in
        8 KiB calls)."""
        buffer = bytearray(max(0, self.file.length - self._pos))
        view, done = memoryview(buffer), 0
        while done < len(buffer):
            done += self.readinto(view[done:])
        return bytes(buffer)

    def close(self) -> None:
        if not self.closed and getattr(self, "_input", None) is not None:
            self._input.close()
        super().close()

    def _open_next(self) -> PrefixInput:
        f = self.file
        for path in self._places:
            try:
                opened = self._storage.open_input(path, f.length)
            except MOVED:
                continue
            if opened.stored >= f.length and (f.in_progress or opened.stored == f.length):
                return opened
            opened.close()
            if not f.in_progress and opened.stored > f.length:
                raise IntegrityError(f"{f.path} holds {opened.stored} bytes; the log commits "
                                     f"exactly {f.length} to this finalized file: it was "
                                     "modified")
            if path == f.path:
                self._short = opened.stored
        raise self._lost()

    def _lost(self) -> TruncatedFileError:
        f = self.file
        if self._short is not None:
            return TruncatedFileError(f"{f.path} holds {self._short} bytes; the log commits "
                                      f"{f.length}")
        if not f.in_progress:
            return TruncatedFileError(f"finalized file {f.path} is missing: the log lists it "
                                      f"with {f.length} committed bytes; deleted by hand? "
                                      "Restore it from a backup")
        published = f" (and no later commit published it as {f.final})" if f.final else ""
        return TruncatedFileError(f"in-progress file {f.path} is missing{published}: the log "
                                  f"lists it with {f.length} committed bytes; deleted by hand? "
                                  "Restore it from a backup")


def open_input(storage: Storage, f: CommittedFile, *, start: int = 0) -> io.BufferedReader:
    """A buffered :class:`CommittedInput` of ``f`` positioned at ``start``."""
    reader: io.BufferedReader = io.BufferedReader(CommittedInput(storage, f),
                                                  buffer_size=BUFFER_BYTES)
    reader.seek(start)
    return reader


def read_committed(storage: Storage, f: CommittedFile, start: int = 0) -> bytes:
    """The committed bytes of ``f`` from byte ``start``, in memory: for small files and
    headers (a read of output streams through :func:`open_input`)."""
    with CommittedInput(storage, f) as source:
        source.seek(start)
        return source.read() or b""


def _locations(storage: Storage, f: CommittedFile) -> Iterator[str]:
    """Where ``f``'s committed prefix may be, most likely first: its planned temp, its final
    name (rolled since), its temp in the newest committed state (fenced since), and its final
    name once more (rolled while we looked). The log is read only when the first two miss."""
    yield f.path
    if f.final is None:
        return
    if not f.staged:  # a staged file is encoded at its roll, not renamed: never its final name
        yield f.final
    committed = open_committed(storage)
    if committed is not None:
        current = {g.name: g.temp for g in committed[2].in_progress}.get(f.final)
        if current is not None and current != f.path:
            yield current
    if not f.staged:
        yield f.final
