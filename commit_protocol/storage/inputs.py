"""Seekable readers of a stored file's first bytes: what a read task streams through.

A read must never hold a whole file (a part file may be gigabytes), and must never read past
a committed offset (an in-progress file may hold a failed attempt's tail). A
:class:`PrefixInput` is a raw, seekable binary stream over bytes ``[0, length)`` of one file
that fetches only the ranges asked for: ``pread(2)`` on a local disk, ranged GETs of the
segments (or plain object) on an object store. Callers wrap it in ``io.BufferedReader`` when
they read in small pieces.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable

# (buffer to fill, file offset) -> bytes filled; fewer only at the file's end
ReadInto = Callable[[memoryview, int], int]


class SeekableInput(io.RawIOBase):
    """A raw, seekable binary stream of ``length`` bytes at position ``_pos``: subclasses
    define ``readinto``."""

    path: str
    length: int

    def __init__(self) -> None:
        super().__init__()
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.length}[whence]
        if base + offset < 0:
            raise ValueError(f"{self.path}: seek to {base + offset}, before the start")
        self._pos = base + offset
        return self._pos


class PrefixInput(SeekableInput):
    """Bytes ``[0, length)`` of a stored file; ``stored`` is the file's size when opened.

    Reads stop at ``length`` even when the file holds more. A file that holds fewer bytes
    than ``length`` reads short at its end: the caller, which knows what was committed,
    turns that into an error naming the file.
    """

    def __init__(self, path: str, length: int, stored: int, read_into: ReadInto,
                 release: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self.path = path
        self.length = length
        self.stored = stored
        self._read_into = read_into
        self._release = release

    def readinto(self, buffer) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        wanted = max(0, min(len(view), self.length - self._pos))
        if wanted == 0:
            return 0
        got = self._read_into(view[:wanted], self._pos)
        self._pos += got
        return got

    def close(self) -> None:
        if not self.closed:
            self._release()
        super().close()


def local_input(full_path: str, length: int | None) -> PrefixInput:
    """A :class:`PrefixInput` over a local file: ``pread`` into the caller's buffer (no copy
    in Python), the file descriptor held open, so a rename or unlink of the path while it is
    read changes nothing for the reader. ``FileNotFoundError`` when the file is missing."""
    fd = os.open(full_path, os.O_RDONLY)
    try:
        stored = os.fstat(fd).st_size
    except BaseException:
        os.close(fd)
        raise

    def read_into(view: memoryview, offset: int) -> int:
        done = 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], offset + done)
            if got == 0:
                break
            done += got
        return done

    return PrefixInput(full_path, stored if length is None else length, stored, read_into,
                       lambda: os.close(fd))
