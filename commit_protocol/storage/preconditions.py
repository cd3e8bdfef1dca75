"""What the clients that make their own conditional requests (Cloud Storage's, Azure's) share:
an exclusive create that recognises its own retried request, a compose that records its
sources, ranged reads in parallel. Each store's module gives the requests themselves:
``_download`` (a range), ``_upload`` (an exclusive create), ``_compose_large`` (a server-side
compose, exclusive on the visible name) and ``head``.

A store's answer that the object exists (S3's and Cloud Storage's 412, Azure's 409) may come
from a retry of this very create whose first attempt succeeded and whose answer was lost:
the object then carries this create's token, and the create succeeded.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import uuid

from commit_protocol.storage.objects import SMALL_BYTES, AsyncObjects, bounded
from commit_protocol.storage.segments import Blob, Piece, source_digest
from commit_protocol.vocabulary.errors import SegmentError


class PreconditionObjects(AsyncObjects):
    """The shared half of a client whose every create carries the store's precondition."""

    TOKEN = "rotsink-token"  # object metadata: which create made the object
    SOURCE = "rotsink-source"  # object metadata: source_digest() of a composed object's bytes

    # -- a store's requests ----------------------------------------------------------------
    def head(self, path: str) -> tuple[Blob, dict[str, str]]:
        raise NotImplementedError

    async def _download(self, path: str, start: int | None = None,
                        length: int | None = None) -> bytes:
        raise NotImplementedError

    async def _upload(self, path: str, data: bytes, metadata: dict[str, str]) -> None:
        raise NotImplementedError

    async def _compose_large(self, dst: str, pieces: builtins.list[Piece],
                             metadata: dict[str, str], token: str) -> None:
        raise NotImplementedError

    # -- reads -----------------------------------------------------------------------------
    def get(self, path: str) -> bytes:
        """The whole object (1 GET); ``FileNotFoundError`` when there is none."""
        return self._run(self._download, path)

    async def _get(self, piece: Piece) -> bytes:
        data = await self._download(piece.blob.path, piece.start, piece.length)
        if len(data) != piece.length:
            raise SegmentError(f"{piece.blob.path}: expected {piece.length} bytes from offset "
                               f"{piece.start}, found {len(data)}")
        return data

    async def _read(self, pieces: builtins.list[Piece]) -> bytes:
        return b"".join(await bounded([self._get(p) for p in pieces if p.length],
                                      self._concurrency()))

    def read(self, pieces: builtins.list[Piece]) -> bytes:
        return self._run(self._read, pieces)

    def _concurrency(self) -> int:
        return int(getattr(self.fs, "max_concurrency", 0) or 8)

    # -- exclusive creates -----------------------------------------------------------------
    def put(self, path: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Exclusive create, with the store's precondition."""
        token = uuid.uuid4().hex
        try:
            self._run(self._upload, path, data, {self.TOKEN: token, **(metadata or {})})
        except FileExistsError as e:
            self._settle(e, path, token)

    def _settle(self, error: FileExistsError, path: str, token: str) -> None:
        """``error`` unless this very create made the object (a retried request whose first
        attempt succeeded)."""
        with contextlib.suppress(FileNotFoundError):
            if self.head(path)[1].get(self.TOKEN) == token:
                return
        raise FileExistsError(errno.EEXIST, "object exists", path) from error

    def compose(self, dst: str, pieces: builtins.list[Piece]) -> None:
        """One new object from ``pieces``, exclusively (see :meth:`ObjectStorage.link`): a
        small one downloaded and created, a larger one composed by the store."""
        metadata = {self.SOURCE: source_digest(pieces)}
        if sum(p.length for p in pieces) < SMALL_BYTES:
            self.put(dst, self.read(pieces), metadata)
            return
        token = uuid.uuid4().hex
        try:
            self._run(self._compose_large, dst, pieces, {self.TOKEN: token, **metadata}, token)
        except FileExistsError as e:
            self._settle(e, dst, token)

    def made_from(self, dst: str, pieces: builtins.list[Piece]) -> bool:
        """Whether ``dst`` records that it was composed from exactly ``pieces``."""
        try:
            return self.head(dst)[1].get(self.SOURCE) == source_digest(pieces)
        except FileNotFoundError:
            return False
