"""Storage on a local (or mounted POSIX) directory tree."""

from __future__ import annotations

import builtins
import errno
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from commit_protocol.storage.base import FileInfo
from commit_protocol.storage.inputs import PrefixInput, local_input


class LocalStorage:
    """A local (or mounted POSIX) directory tree.

    Atomicity: ``write_exclusive``, ``create_marker`` and ``publish`` rely on ``link(2)``,
    which fails with ``EEXIST`` instead of replacing, and is atomic on POSIX filesystems.

    Durability: the page cache may lose what was written or named since the last ``fsync``
    of the file or of its directory; ``sync`` and ``sync_directories`` are those ``fsync``s,
    and every ``fsync`` goes through :meth:`_sync_fd` (a power-loss model in the tests
    records them there).
    """

    concurrency = 1  # a system call is faster than handing it to a thread

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.root_uri = "file://" + self.root

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, path)

    def size(self, path: str) -> int:
        """Current length in bytes."""
        return os.stat(self._abs(path)).st_size

    def mtime_ms(self, path: str) -> int:
        return int(os.stat(self._abs(path)).st_mtime * 1000)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._abs(path))

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of ``path`` (to its end when ``end`` is None)."""
        with open(self._abs(path), "rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(end - start)

    def read_finished(self, path: str, size: int, start: int) -> bytes:
        """Bytes ``[start, size)`` of a finalized file of ``size`` bytes (``EOFError`` when
        it holds fewer)."""
        data = self.read(path, start, size)
        if len(data) != size - start:
            raise EOFError(f"{path}: expected {size} bytes, holds {start + len(data)}")
        return data

    def open_read(self, path: str) -> BinaryIO:
        return open(self._abs(path), "rb")

    def open_input(self, path: str, length: int | None = None) -> PrefixInput:
        """A seekable reader of the first ``length`` bytes (all when None), ``pread`` on an
        open descriptor: a rename or unlink of ``path`` meanwhile does not disturb it."""
        return local_input(self._abs(path), length)

    def open_append(self, path: str, *, at: int | None = None) -> BinaryIO:
        """Open for appending, creating the file (and its directory) if needed; ``at``: the
        length the caller knows the file has (0 for a new one), else ``FileExistsError``."""
        full = self._abs(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        handle = open(full, "ab")
        if at is not None and handle.tell() != at:
            size = handle.tell()
            handle.close()
            raise FileExistsError(errno.EEXIST, f"appending at offset {at}, found {size} bytes",
                                  path)
        return handle

    def write_exclusive(self, path: str, chunks: Iterable[bytes]) -> None:
        """Create ``path`` with the given content, atomically, never replacing.

        Readers see either no file or the whole file: the bytes go to a hidden temp file in
        the same directory (fsynced), which is then hard-linked to ``path``.
        """
        full = self._abs(path)
        directory, base = os.path.split(full)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{base}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                f.flush()
                self._sync_fd(f.fileno())
            os.link(tmp, full)
        finally:
            _unlink_quietly(tmp)

    def create_marker(self, path: str) -> bool:
        """Create an empty ``path``; True if this call created it, False if it existed.

        Atomic (``O_EXCL``): of several concurrent callers exactly one gets True.
        """
        full = self._abs(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            os.close(os.open(full, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        return True

    def link(self, src: str, dst: str) -> None:
        """Give ``dst`` the content of ``src`` (which stays), never replacing ``dst``.

        ``link(2)``: atomic, and ``FileExistsError`` when ``dst`` exists.
        """
        full_dst = self._abs(dst)
        os.makedirs(os.path.dirname(full_dst), exist_ok=True)
        os.link(self._abs(src), full_dst)

    def publish(self, src: str, dst: str, *, length: int | None = None) -> None:
        """Rename ``src`` to ``dst`` without ever replacing ``dst``; ``length``: only the
        first ``length`` bytes of ``src`` (bytes past them are not ours: a zombie's), and
        ``EOFError`` when ``src`` is shorter.

        ``link`` then ``unlink``: atomic with respect to ``dst`` (it appears whole or not at
        all, and a foreign ``dst`` makes this raise ``FileExistsError``). A prefix is first
        copied whole to ``<src>.<length>.exact``, which is then renamed. Retry-safe: a crash
        between link and unlink leaves both names for one inode (or a ``dst`` holding the
        prefix), which a retry recognises: it finishes the rename and returns.

        Power loss: ``dst``'s directory is synced before ``src`` goes, so that no moment of
        the rename can lose both names (the two directories reach the disk independently).
        """
        source = src
        if length is not None and self.size(src) != length:
            source = self._exact_prefix(src, length)
        try:
            self.link(source, dst)
        except FileExistsError:
            if not self._published_from(source, dst, src, length):
                raise
        else:
            self.sync_directories([os.path.dirname(dst)])
        _unlink_quietly(self._abs(source))
        if source != src:
            _unlink_quietly(self._abs(src))

    def _exact_prefix(self, src: str, length: int) -> str:
        """``<src>.<length>.exact``, a complete copy of the first ``length`` bytes of ``src``
        (a damaged leftover of an earlier attempt is copied again)."""
        exact = f"{src}.{length}.exact"
        if self.exists(exact) and self.size(exact) != length:
            self.delete(exact)
        if not self.exists(exact):
            self.copy_prefix(src, exact, length)  # EOFError: src is shorter
        return exact

    def _published_from(self, source: str, dst: str, src: str, length: int | None) -> bool:
        """Whether ``dst`` is this publish's, done by an earlier attempt: ``source``'s very
        inode, or the same bytes as the prefix of ``src``."""
        full_dst = self._abs(dst)
        if os.path.exists(self._abs(source)) and os.path.samefile(self._abs(source), full_dst):
            return True
        if length is None or os.path.getsize(full_dst) != length:
            return False
        with open(self._abs(src), "rb") as ours, open(full_dst, "rb") as theirs:
            return all(a == b for a, b in zip(_prefix_chunks(ours, src, length),
                                              _prefix_chunks(theirs, dst, length),
                                              strict=True))

    def copy_prefix(self, src: str, dst: str, length: int) -> None:
        """Create ``dst`` (must not exist) holding the first ``length`` bytes of ``src``.

        All or nothing: the bytes go to a hidden temp file that is linked to ``dst`` only
        when complete, so a failure (``EOFError`` for a short ``src``) leaves no ``dst``.
        """
        with open(self._abs(src), "rb") as fin:
            self.write_exclusive(dst, _prefix_chunks(fin, src, length))

    def list(self, directory: str) -> builtins.list[FileInfo]:
        """Files directly in ``directory`` (empty if it does not exist)."""
        found = []
        for path, entry in self._files_in(directory):
            # A file deleted between the directory read and its stat (a clean-up beside a
            # reader) was not there: a listing is one moment, not an error.
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            found.append(FileInfo(path, st.st_size, int(st.st_mtime * 1000)))
        return found

    def names(self, directory: str) -> builtins.list[str]:
        """Paths of the files directly in ``directory``, without their sizes: no ``stat`` per
        file (the directory entry's type suffices), where :meth:`list` stats each. The log's
        listing runs several times per micro-batch over hundreds of files."""
        return [path for path, _ in self._files_in(directory)]

    def _files_in(self, directory: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """(path, directory entry) of each file directly in ``directory``."""
        try:
            entries = list(os.scandir(self._abs(directory)))
        except FileNotFoundError:
            return
        prefix = f"{directory.rstrip('/')}/" if directory else ""
        for entry in entries:
            try:
                if entry.is_file():
                    yield prefix + entry.name, entry
            except FileNotFoundError:  # deleted while listed (is_file may stat)
                continue

    def walk(self, directory: str = "") -> Iterator[FileInfo]:
        """Every file below ``directory``, recursively."""
        base = self._abs(directory)
        for dirpath, _, files in os.walk(base):
            rel = os.path.relpath(dirpath, self.root)
            for name in files:
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:  # deleted while listed, as in list()
                    continue
                path = name if rel == "." else f"{rel}/{name}"
                yield FileInfo(path, st.st_size, int(st.st_mtime * 1000))

    def sync(self, paths: Iterable[str]) -> None:
        """Make the content of each file durable (``fsync``); a missing file is an error."""
        for path in paths:
            fd = os.open(self._abs(path), os.O_RDONLY)
            try:
                self._sync_fd(fd)
            finally:
                os.close(fd)

    def sync_directories(self, directories: Iterable[str]) -> None:
        """Make the names in each directory durable, and the names of the directories
        themselves: every ancestor up to the root is synced too (a directory created since
        its parent's last sync would otherwise vanish with everything in it). A directory
        that does not exist has nothing to lose."""
        todo = set()
        for directory in directories:
            relative = directory.strip("/")
            while relative not in todo:
                todo.add(relative)
                relative = relative.rpartition("/")[0] if relative else relative
        for relative in sorted(todo, key=lambda d: (-d.count("/"), d)):
            try:
                fd = os.open(self._abs(relative) if relative else self.root, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                self._sync_fd(fd)
            finally:
                os.close(fd)

    def _sync_fd(self, fd: int) -> None:
        os.fsync(fd)

    def delete(self, path: str) -> None:
        """Remove a file; a missing file is not an error."""
        _unlink_quietly(self._abs(path))

    def delete_all(self, files: Iterable[FileInfo]) -> None:
        """Remove these files (:meth:`delete` each: an unlink costs no listing)."""
        for f in files:
            self.delete(f.path)

    def delete_tree(self, path: str) -> None:
        shutil.rmtree(self._abs(path), ignore_errors=True)

    def abort_stale_uploads(self, older_than_ms: int,
                            owned: Callable[[str], bool]) -> builtins.list[str]:
        """Nothing to do: local files have no multipart uploads."""
        return []


def _prefix_chunks(handle: BinaryIO, name: str, length: int) -> Iterator[bytes]:
    remaining = length
    while remaining > 0:
        chunk = handle.read(min(remaining, 8 << 20))
        if not chunk:
            raise EOFError(f"{name} has fewer than {length} bytes")
        yield chunk
        remaining -= len(chunk)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
