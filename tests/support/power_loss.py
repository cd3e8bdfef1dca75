"""A power-loss model of a local disk, for the commit protocol's durability tests.

:class:`PowerLossStorage` is a :class:`LocalStorage` that numbers its mutating operations,
can cut the power at the k-th one (it raises :class:`PowerCut` instead of running it, as if
the machine stopped there), and records every ``fsync``: a file's synced length, and a
directory's entries as of its last sync. :meth:`PowerLossStorage.image` then writes what the
disk may hold after the cut:

- a directory's entries are those of its last sync, or (``keep`` says, per directory) those
  it has now: an entry created, linked, renamed or removed since the last sync of its
  directory may or may not have reached the disk;
- a file's bytes are its synced length, or (``keep``, per file) everything written so far:
  unsynced bytes may or may not have reached the disk (never half of an ``fsync``'s);
- a directory missing from its parent's surviving entries is gone with everything in it.

The content of files removed since they were synced stays readable through a descriptor the
model keeps open (the protocol never rewrites bytes it wrote, so a file's content at a sync
is a prefix of its content now).
"""

from __future__ import annotations

import os
import random
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from commit_protocol.storage import LocalStorage

Keep = Callable[[str], bool]
"""Whether what was not synced survives, asked per directory and per file (by path)."""


class PowerCut(BaseException):  # noqa: N818 -- not an error of the code under test
    """The power went out before storage operation number ``at``."""

    def __init__(self, at: int, operation: str) -> None:
        super().__init__(f"power cut before storage operation {at} ({operation})")
        self.at, self.operation = at, operation


class PowerLossStorage(LocalStorage):
    """Local storage under the power-loss model; what exists at construction counts as
    durable."""

    def __init__(self, root: str, *, cut_at: int | None = None) -> None:
        super().__init__(root)
        self.cut_at = cut_at
        self.operations = 0
        self.log: list[str] = []  # the operations run, in order
        self._kept: dict[int, int] = {}  # inode -> a descriptor that keeps its content
        self._synced_length: dict[int, int] = {}
        self._synced_entries: dict[str, dict[str, int | None]] = {}  # dir -> name -> inode
        for directory, _, files in os.walk(self.root):
            self._record_directory(directory)
            for name in files:
                fd = os.open(os.path.join(directory, name), os.O_RDONLY)
                try:
                    self._record_file(fd)
                finally:
                    os.close(fd)

    def close(self) -> None:
        for fd in self._kept.values():
            os.close(fd)
        self._kept.clear()

    # -- the cut -------------------------------------------------------------------------
    def _operation(self, name: str, *args: Any) -> None:
        self.operations += 1
        if self.cut_at is not None and self.operations >= self.cut_at:
            raise PowerCut(self.operations, f"{name}{args!r}")
        self.log.append(f"{name}{args!r}")

    def open_append(self, path: str, *, at: int | None = None) -> BinaryIO:
        self._operation("open_append", path)
        return super().open_append(path, at=at)

    def write_exclusive(self, path: str, chunks: Iterable[bytes]) -> None:
        self._operation("write_exclusive", path)
        super().write_exclusive(path, chunks)

    def create_marker(self, path: str) -> bool:
        self._operation("create_marker", path)
        return super().create_marker(path)

    def link(self, src: str, dst: str) -> None:
        self._operation("link", src, dst)
        super().link(src, dst)

    def publish(self, src: str, dst: str, *, length: int | None = None) -> None:
        self._operation("publish", src, dst)
        super().publish(src, dst, length=length)

    def copy_prefix(self, src: str, dst: str, length: int) -> None:
        self._operation("copy_prefix", src, dst, length)
        super().copy_prefix(src, dst, length)

    def delete(self, path: str) -> None:
        self._operation("delete", path)
        super().delete(path)

    def sync(self, paths: Iterable[str]) -> None:
        paths = list(paths)
        if paths:
            self._operation("sync", *paths)
        super().sync(paths)

    def sync_directories(self, directories: Iterable[str]) -> None:
        directories = list(directories)
        if directories:
            self._operation("sync_directories", *directories)
        super().sync_directories(directories)

    # -- what an fsync makes durable -----------------------------------------------------
    def _sync_fd(self, fd: int) -> None:
        """Record instead of syncing: the model, not the disk, decides what survives."""
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            self._record_directory(os.readlink(f"/proc/self/fd/{fd}"))
        else:
            self._record_file(fd)

    def _record_file(self, fd: int) -> None:
        inode = os.fstat(fd).st_ino
        self._keep(inode, fd)
        self._synced_length[inode] = os.fstat(fd).st_size

    def _record_directory(self, directory: str) -> None:
        relative = os.path.relpath(directory, self.root)
        self._synced_entries["" if relative == "." else relative] = self._entries_now(directory)

    def _entries_now(self, directory: str) -> dict[str, int | None]:
        """A directory's entries: name -> inode (None for a subdirectory)."""
        entries: dict[str, int | None] = {}
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):
                entries[entry.name] = None
            else:
                fd = os.open(entry.path, os.O_RDONLY)
                try:
                    self._keep(entry.inode(), fd)
                finally:
                    os.close(fd)
                entries[entry.name] = entry.inode()
        return entries

    def _keep(self, inode: int, fd: int) -> None:
        if inode not in self._kept:
            self._kept[inode] = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)

    # -- after the cut -------------------------------------------------------------------
    def image(self, destination: Path, keep: Keep) -> None:
        """Write to ``destination`` (new) what the disk may hold after the power cut: names
        of one file stay hard links of one file (a publish cut between its link and unlink
        leaves two names for one inode, which a retried publish recognises)."""
        self._image_directory("", destination, keep, {})

    def _image_directory(self, relative: str, destination: Path, keep: Keep,
                         written: dict[int, Path]) -> None:
        destination.mkdir(parents=True)
        live = os.path.join(self.root, relative)
        if keep(relative or ".") and os.path.isdir(live):
            entries = self._entries_now(live)
        else:
            entries = self._synced_entries.get(relative, {})
        for name, inode in entries.items():
            path = f"{relative}/{name}" if relative else name
            if inode is None:
                self._image_directory(path, destination / name, keep, written)
            elif inode in written:
                os.link(written[inode], destination / name)
            else:
                fd = self._kept[inode]
                length = (os.fstat(fd).st_size if keep(path)
                          else self._synced_length.get(inode, 0))
                (destination / name).write_bytes(os.pread(fd, length, 0))
                written[inode] = destination / name


def keep_nothing(_: str) -> bool:
    """The worst case: nothing unsynced reached the disk."""
    return False


def keep_everything(_: str) -> bool:
    """The kindest: everything written reached the disk (a killed process)."""
    return True


def keep_at_random(seed: int) -> Keep:
    """Each directory and file kept or lost by a coin, the same answer for one path."""
    coins: dict[str, bool] = {}
    rng = random.Random(seed)
    return lambda path: coins.setdefault(path, rng.random() < 0.5)
