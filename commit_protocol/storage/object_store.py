"""Storage on object stores without append or rename (S3, Cloud Storage, Azure Blob Storage,
fsspec's ``memory://``), the same guarantees as :class:`~commit_protocol.storage.LocalStorage`
by other means, the logic shared once here and each store's primitives in its client
(:mod:`commit_protocol.storage.objects`):

* appends become immutable segments ``<path>/<offset>``
  (:mod:`commit_protocol.storage.segments`);
* every create is exclusive, with the store's own precondition;
* "rename" composes the source into one new object, exclusively and server-side where the
  store can, then deletes the source; a composed object records which object versions it
  was made from, so a retry after a crash between the two steps is recognised.

Request counts below are S3 requests; a LIST returns up to 1,000 objects.
"""

from __future__ import annotations

import builtins
import errno
import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, cast

from commit_protocol.storage.base import FileInfo
from commit_protocol.storage.inputs import PrefixInput
from commit_protocol.storage.objects import (
    Objects,
    client_for,
)
from commit_protocol.storage.segments import (
    SEGMENT_BYTES,
    Blob,
    Piece,
    SegmentWriter,
    deletion_requests,
    group_files,
    segment_path,
    segment_pieces,
    segments_by_file,
    segments_of,
    slice_pieces,
)
from commit_protocol.vocabulary.errors import SegmentError, UnsafeStorageError


class ObjectStorage:
    """A directory tree on an object store (see the module docstring for the mechanisms).

    ``fs`` is an fsspec filesystem (s3fs, gcsfs, adlfs, memory), ``root`` the
    output path in its terms (``bucket/prefix``), ``root_uri`` the URL readers and the log
    use. ``segment_bytes`` is where a writer cuts a segment (tests make it small).
    """

    def __init__(self, fs: Any, root: str, root_uri: str, *,
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        client = next((c for c in (client_for(p, fs) for p in protocols) if c is not None),
                      None)
        if client is None:
            raise UnsafeStorageError(f"cannot write to {root_uri}: {type(fs).__name__} has no "
                                     "client in rotsink (storage.objects.CLIENTS)")
        self._objects: Objects = client
        self.fs = fs
        self.root = root.rstrip("/")
        self.root_uri = root_uri.rstrip("/")
        self.segment_bytes = segment_bytes
        # Requests in flight at once: s3fs's own limit (``fs.max_concurrency``, 10 by
        # default); memory:// takes a few, so that the tests run the concurrent paths.
        self.concurrency = int(getattr(fs, "max_concurrency", 4) or 1)

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def _segments(self, path: str) -> builtins.list[tuple[int, Blob]]:
        abs_path = self._abs(path)
        return segments_of(abs_path, self._objects.list(abs_path + "/"))

    def _pieces(self, path: str) -> builtins.list[Piece]:
        """The file's bytes as object ranges: 1 LIST, plus 1 HEAD when it is a plain object."""
        pieces = segment_pieces(path, self._segments(path))
        if pieces:
            return pieces
        blob, _ = self._objects.head(self._abs(path))
        return [Piece(blob, 0, blob.size)]

    def size(self, path: str) -> int:
        """Length in bytes (1 LIST; +1 HEAD for a plain object); ``SegmentError`` when the
        segments are not contiguous."""
        return sum(p.length for p in self._pieces(path))

    def mtime_ms(self, path: str) -> int:
        """Last modification: the plain object's, or the newest segment's."""
        return max(p.blob.mtime_ms for p in self._pieces(path))

    def exists(self, path: str) -> bool:
        """Whether ``path`` is a plain object or a segmented file (1 LIST, +1 HEAD)."""
        try:
            self._pieces(path)
        except FileNotFoundError:
            return False
        return True

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)``: ranged GETs of the segments (or object) that hold them."""
        pieces = self._pieces(path)
        stop = sum(p.length for p in pieces) if end is None else end
        return self._objects.read(slice_pieces(pieces, start, stop))

    def read_finished(self, path: str, size: int, start: int) -> bytes:
        """Bytes ``[start, size)`` of a finalized file of ``size`` bytes, which is one plain
        object: 1 ranged GET, no listing (``SegmentError``, or ``EOFError``, when it holds
        fewer bytes)."""
        data = self._objects.read([Piece(Blob(self._abs(path), size, 0), start, size - start)])
        if len(data) != size - start:
            raise EOFError(f"{path}: expected {size} bytes, holds {start + len(data)}")
        return data

    def open_read(self, path: str) -> BinaryIO:
        """The whole file in memory (log and intent files are small): 1 GET of the plain
        object that log, intent and published files are; a segmented file's GET finds no
        object (404), then it is listed and read as :meth:`read` does."""
        try:
            return io.BytesIO(self._objects.get(self._abs(path)))
        except FileNotFoundError:
            return io.BytesIO(self.read(path))

    def open_input(self, path: str, length: int | None = None) -> PrefixInput:
        """A seekable reader of the first ``length`` bytes (all when None): the file's pieces
        are listed once (1 LIST, +1 HEAD for a plain object), then each read is ranged GETs
        of the pieces it covers. A segment deleted meanwhile (the compose of a roll) fails
        that read with ``FileNotFoundError`` or ``SegmentError``."""
        pieces = self._pieces(path)
        stored = sum(p.length for p in pieces)

        def read_into(view: memoryview, offset: int) -> int:
            end = min(stored, offset + len(view))
            data = self._objects.read(slice_pieces(pieces, offset, end)) if end > offset else b""
            view[:len(data)] = data
            return len(data)

        return PrefixInput(path, stored if length is None else length, stored, read_into)

    def open_append(self, path: str, *, at: int | None = None) -> BinaryIO:
        """A :class:`SegmentWriter` at the current end (1 LIST, +1 HEAD for a new file);
        ``at``: the length the caller knows the file has (0 for a file it names freshly, or
        one it just checked), with no request: the first segment's exclusive create fails if
        the file grew past it meanwhile.

        Atomic per segment: each is one exclusive create, so of two writers that start at the
        same offset the second fails with ``FileExistsError`` and adds nothing. Nothing is
        written until ``segment_bytes`` are buffered or the writer closes; an empty writer
        writes nothing (so, unlike on a local disk, no empty file appears).
        """
        if at is not None:
            return cast(BinaryIO, SegmentWriter(self._putter(path), start=at,
                                                threshold=self.segment_bytes))
        segments = self._segments(path)
        pieces = segment_pieces(path, segments)
        if segments and not pieces:
            raise SegmentError(f"{path} holds segments from offset {segments[0][0]} but none "
                               "at offset 0: the remains of a delete, not appendable")
        if not segments and self._plain_exists(path):
            raise FileExistsError(errno.EEXIST, "a finished (plain) object cannot be "
                                  "appended to", path)
        start = sum(p.length for p in pieces)
        return cast(BinaryIO, SegmentWriter(self._putter(path), start=start,
                                            threshold=self.segment_bytes))

    def _putter(self, path: str) -> Callable[[int, bytes], None]:
        abs_path = self._abs(path)

        def put(offset: int, data: bytes) -> None:
            self._objects.put(segment_path(abs_path, offset), data)

        return put

    def write_exclusive(self, path: str, chunks: Iterable[bytes]) -> None:
        """Create plain object ``path`` with this content, never replacing (1 PUT).

        Atomic: a single conditional PUT, so readers see nothing or everything, and an
        existing object makes it fail with ``FileExistsError``. The content is joined in memory.
        """
        self._objects.put(self._abs(path), b"".join(chunks))

    def sync(self, paths: Iterable[str]) -> None:
        """Nothing to do: an object (a segment) is durable when its PUT returns."""

    def sync_directories(self, directories: Iterable[str]) -> None:
        """Nothing to do: an object store has no directory entries to lose."""

    def create_marker(self, path: str) -> bool:
        """Create an empty object; True if this call created it (1 conditional PUT).

        Atomic: of several concurrent callers exactly one gets True.
        """
        try:
            self._objects.put(self._abs(path), b"")
        except FileExistsError:
            return False
        return True

    def link(self, src: str, dst: str) -> None:
        """Give new plain object ``dst`` the content of ``src`` (which stays), never replacing.

        Atomic: ``dst`` appears whole in its final step, a conditional PUT (small files) or a
        conditional CompleteMultipartUpload whose parts are server-side copies of large
        segments and joined downloads of small ones; ``FileExistsError`` if ``dst`` exists.
        Requests: listing ``src`` plus 1 PUT, or 2 + one per part.
        """
        self._objects.compose(self._abs(dst), self._pieces(src))

    def publish(self, src: str, dst: str, *, length: int | None = None) -> None:
        """"Rename" ``src`` to ``dst`` without ever replacing ``dst``: compose ``src`` into
        ``dst`` as :meth:`link` does, then delete ``src``'s objects as they were listed
        (1 LIST, the compose, 1-2 DeleteObjects). ``length``: only the first ``length``
        bytes of ``src`` (bytes past them are not ours: a zombie's), and ``EOFError`` when
        ``src`` is shorter.

        Atomic with respect to ``dst`` as :meth:`link`. Retry-safe: when ``dst`` exists and
        records that it was composed from exactly these bytes of ``src`` (an earlier attempt
        stopped before deleting ``src``), the delete is finished and this returns; a foreign
        ``dst`` raises ``FileExistsError`` and leaves ``src`` untouched.
        """
        listed = self._pieces(src)
        pieces = listed
        if length is not None:
            stored = sum(p.length for p in listed)
            if stored < length:
                raise EOFError(f"{src} has fewer than {length} bytes ({stored})")
            pieces = slice_pieces(listed, 0, length)
        try:
            self._objects.compose(self._abs(dst), pieces)
        except FileExistsError:
            if not self._objects.made_from(self._abs(dst), pieces):
                raise
        self.delete_all([FileInfo(src, 0, 0, segments=tuple(
            p.blob.path for p in listed if p.blob.path != self._abs(src)))])

    def copy_prefix(self, src: str, dst: str, length: int) -> None:
        """Create appendable ``dst`` (must not exist) holding the first ``length`` bytes of
        ``src``; ``EOFError`` when ``src`` is shorter.

        Atomic: the prefix is composed (as in :meth:`link`) into the single segment at
        offset 0 of ``dst``, so a crash leaves either no ``dst`` or all of it, and appends
        continue after it. With ``length`` 0 nothing is created (an empty appendable file
        has no objects).
        """
        pieces = self._pieces(src)
        have = sum(p.length for p in pieces)
        if have < length:
            raise EOFError(f"{src} has fewer than {length} bytes ({have})")
        if self._segments(dst) or self._plain_exists(dst):
            raise FileExistsError(errno.EEXIST, "copy target exists", dst)
        if length:
            self._objects.compose(segment_path(self._abs(dst), 0),
                                  slice_pieces(pieces, 0, length))

    def list(self, directory: str) -> builtins.list[FileInfo]:
        """Files directly in ``directory``, a segmented file as one entry (one LIST per
        1,000 objects below ``directory``, subdirectories included)."""
        return list(self._files(directory, recursive=False))

    def names(self, directory: str) -> builtins.list[str]:
        """Paths of the files directly in ``directory`` (the same LISTs as :meth:`list`)."""
        prefix, base = self._abs(directory) + "/", f"{directory.rstrip('/')}/" if directory else ""
        return [base + rel for rel in group_files(prefix, self._objects.list(prefix),
                                                  recursive=False)]

    def walk(self, directory: str = "") -> Iterator[FileInfo]:
        """Every file below ``directory``, recursively."""
        return self._files(directory, recursive=True)

    def _files(self, directory: str, *, recursive: bool) -> Iterator[FileInfo]:
        prefix = self._abs(directory) + "/"
        base = f"{directory.rstrip('/')}/" if directory else ""
        blobs = self._objects.list(prefix)
        segments = {path: tuple(blob.path for _, blob in found)
                    for path, found in segments_by_file(blobs).items()}
        return (FileInfo(base + rel, size, mtime, segments=segments.get(prefix + rel, ()))
                for rel, (size, mtime) in group_files(prefix, blobs,
                                                      recursive=recursive).items())

    def delete(self, path: str) -> None:
        """Remove a plain object or a segmented file; a missing file is not an error. 1 LIST
        and 1 DeleteObjects, +1 for a file of several segments, whose first segment goes
        first (:func:`~commit_protocol.storage.segments.deletion_requests`)."""
        self.delete_all([FileInfo(path, 0, 0)])

    def delete_all(self, files: Iterable[FileInfo]) -> None:
        """Remove these files as :meth:`delete` does, in one or two DeleteObjects per 1,000
        objects: clean-up deletes what it has just listed, and a listed file names its
        objects, so no LIST goes out (a file not listed here is listed first, 1 LIST each)."""
        chosen = {f.path: f for f in files}  # once each
        for request in deletion_requests(
                (self._abs(f.path), builtins.list(f.segments) if f.segments is not None
                 else [blob.path for _, blob in self._segments(f.path)])
                for f in chosen.values()):
            self._objects.delete(request)

    def delete_tree(self, path: str) -> None:
        """Remove every object below ``path``."""
        prefix = self._abs(path) + "/"
        self._objects.delete([b.path for b in self._objects.list(prefix)])

    def abort_stale_uploads(self, older_than_ms: int,
                            owned: Callable[[str], bool]) -> builtins.list[str]:
        """Abort multipart uploads under the root initiated before ``older_than_ms`` (epoch
        ms) of the paths ``owned`` says this writer's (another writer of a shared table may be
        uploading a big file below the root for longer): the remains of a compose whose
        process died. Returns their paths."""
        aborted = self._objects.abort_uploads(self.root + "/", older_than_ms, owned)
        return [p[len(self.root) + 1:] for p in aborted]

    def _plain_exists(self, path: str) -> bool:
        try:
            self._objects.head(self._abs(path))
        except FileNotFoundError:
            return False
        return True
