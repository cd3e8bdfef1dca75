"""fsspec's single-process ``memory://`` under
:class:`~commit_protocol.storage.object_store.ObjectStorage`, for tests and single-process use:
one process, so a check and a create under one process-wide lock is an exclusive create."""

from __future__ import annotations

import builtins
import errno
import threading
from collections.abc import Callable
from typing import Any

from commit_protocol.storage.objects import epoch_ms
from commit_protocol.storage.segments import Blob, Piece

_MEMORY_LOCK = threading.RLock()


class MemoryObjects:
    """fsspec's ``memory://``: one process, so check-then-create under one process-wide lock
    is an exclusive create. For tests and single-process use."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def list(self, prefix: str) -> builtins.list[Blob]:
        with _MEMORY_LOCK:
            return [Blob(p, f.size, epoch_ms(f.created)) for p, f in list(self.fs.store.items())
                    if p.startswith(prefix)]

    def head(self, path: str) -> tuple[Blob, dict[str, str]]:
        with _MEMORY_LOCK:
            f = self.fs.store.get(path)
            if f is None:
                raise FileNotFoundError(errno.ENOENT, "no such object", path)
            return Blob(path, f.size, epoch_ms(f.created)), {}

    def get(self, path: str) -> bytes:
        with _MEMORY_LOCK:
            f = self.fs.store.get(path)
            if f is None:
                raise FileNotFoundError(errno.ENOENT, "no such object", path)
            return bytes(f.getbuffer())

    def read(self, pieces: builtins.list[Piece]) -> bytes:
        return b"".join(self.fs.cat_file(p.blob.path, p.start, p.start + p.length)
                        for p in pieces if p.length)

    def put(self, path: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        with _MEMORY_LOCK:
            if path in self.fs.store:
                raise FileExistsError(errno.EEXIST, "object exists", path)
            self.fs.pipe_file(path, data)

    def compose(self, dst: str, pieces: builtins.list[Piece]) -> None:
        with _MEMORY_LOCK:
            self.put(dst, self.read(pieces))

    def made_from(self, dst: str, pieces: builtins.list[Piece]) -> bool:
        """Whether ``dst`` holds exactly these bytes (memory is cheap to compare)."""
        with _MEMORY_LOCK:
            f = self.fs.store.get(dst)
            return f is not None and bytes(f.getbuffer()) == self.read(pieces)

    def delete(self, paths: builtins.list[str]) -> None:
        with _MEMORY_LOCK:
            for p in paths:
                self.fs.store.pop(p, None)

    def abort_uploads(self, prefix: str, before_ms: int,
                      owned: Callable[[str], bool]) -> builtins.list[str]:
        return []  # memory has no multipart uploads
