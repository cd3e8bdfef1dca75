"""Appendable files on object stores, as immutable *segments*: layout, checks and plans.

A file ``p`` that is being appended to is stored as objects ``p/<offset>``, where ``<offset>``
is the file offset of the segment's first byte, zero-padded to 16 digits; the file is its
segments in offset order. Each segment is created with an exclusive create, so two writers
that start at the same offset cannot both succeed. A finished file (published part file, log
file, marker) is one plain object ``p``; a path never has both forms.

This module is pure (no I/O except through the ``put`` callback of :class:`SegmentWriter`):
how listed objects become files, the contiguity check, and the plan that turns a file's
byte ranges into multipart-upload parts.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from commit_protocol.vocabulary.errors import SegmentError

SEGMENT_BYTES = 8 << 20  # a writer's buffer becomes a segment at this size, and on close
MIN_PART_BYTES = 5 << 20  # S3: every multipart part but the last has at least this size
MAX_PART_BYTES = 5 << 30  # S3: the largest part (and the largest single PUT)
MAX_PARTS = 10_000  # S3: parts per multipart upload
_DIGITS = 16



@dataclass(frozen=True)
class Blob:
    """One stored object: its filesystem path (bucket included), size, mtime and ETag."""

    path: str
    size: int
    mtime_ms: int
    etag: str = ""


@dataclass(frozen=True)
class Piece:
    """Bytes ``[start, start + length)`` of one object."""

    blob: Blob
    start: int
    length: int


@dataclass(frozen=True)
class Part:
    """One part of a composed object: a server-side copy of one piece, or downloaded pieces."""

    copy: bool
    pieces: tuple[Piece, ...]


def segment_path(path: str, offset: int) -> str:
    """The object holding the segment of file ``path`` that starts at ``offset``.

    >>> segment_path("b/t.tmp", 1024)
    'b/t.tmp/0000000000001024'
    """
    return f"{path}/{offset:0{_DIGITS}d}"


def segment_offset(name: str) -> int | None:
    """The offset a segment name encodes, None for any other name.

    >>> segment_offset("0000000000001024"), segment_offset("part-0.jsonl"), segment_offset("12")
    (1024, None, None)
    """
    return int(name) if len(name) == _DIGITS and name.isdigit() else None


def segments_of(abs_path: str, blobs: Iterable[Blob]) -> list[tuple[int, Blob]]:
    """The segments of the file stored at ``abs_path`` among ``blobs``, by offset."""
    return segments_by_file(blobs).get(abs_path, [])


def segments_by_file(blobs: Iterable[Blob]) -> dict[str, list[tuple[int, Blob]]]:
    """The segments among ``blobs`` by the file they belong to, each file's by offset: one
    listing of a directory, for many of its files.

    >>> blobs = [Blob("d/f/0000000000000004", 2, 0), Blob("d/f/0000000000000000", 4, 0),
    ...          Blob("d/plain", 3, 0)]
    >>> {f: [off for off, _ in found] for f, found in segments_by_file(blobs).items()}
    {'d/f': [0, 4]}
    """
    found: dict[str, list[tuple[int, Blob]]] = {}
    for blob in blobs:
        parent, _, name = blob.path.rpartition("/")
        if (offset := segment_offset(name)) is not None:
            found.setdefault(parent, []).append((offset, blob))
    return {path: sorted(segments) for path, segments in found.items()}


def deletion_requests(files: Iterable[tuple[str, list[str]]]) -> list[list[str]]:
    """The delete requests that remove ``files`` (each its path and its segments' objects
    in offset order, none for a plain object), in order: first the first segment of every
    file with more than one, then everything else, so a delete cut short between the two
    leaves no file, only remains (listed, so clean-up removes them, and refusing appends).

    >>> deletion_requests([("d/f", ["d/f/0", "d/f/4"]), ("d/g", ["d/g/0"]), ("d/p", [])])
    [['d/f/0'], ['d/f/4', 'd/f', 'd/g/0', 'd/g', 'd/p']]
    """
    firsts: list[str] = []
    rest: list[str] = []
    for path, segments in files:
        if len(segments) > 1:
            firsts.append(segments[0])
            segments = segments[1:]
        rest += [*segments, path]
    return [request for request in (firsts, rest) if request]


def segment_pieces(path: str, segments: list[tuple[int, Blob]]) -> list[Piece]:
    """The bytes of segmented file ``path`` as pieces, checked to be contiguous.

    Returns [] when there is no segment at offset 0 (no segmented file, or only the remains
    of a delete that was cut short: a delete removes the first segment first). Raises
    :class:`SegmentError` when a segment does not start where the previous one ended.
    """
    if not segments or segments[0][0] != 0:
        return []
    end = 0
    for offset, blob in segments:
        if offset != end:
            kind = "gap" if offset > end else "overlap"
            raise SegmentError(f"segmented file {path} is damaged: a segment starts at offset "
                               f"{offset}, expected {end} ({kind} after the previous segment)")
        end += blob.size
    return [Piece(b, 0, b.size) for _, b in segments]


def slice_pieces(pieces: list[Piece], start: int, end: int) -> list[Piece]:
    """The pieces holding file bytes ``[start, end)`` (clipped to the file's end).

    >>> a, b = Blob("a", 4, 0), Blob("b", 6, 0)
    >>> cut = slice_pieces([Piece(a, 0, 4), Piece(b, 0, 6)], 2, 7)
    >>> [(p.blob.path, p.start, p.length) for p in cut]
    [('a', 2, 2), ('b', 0, 3)]
    """
    out, offset = [], 0
    for p in pieces:
        lo, hi = max(start, offset), min(end, offset + p.length)
        if lo < hi:
            out.append(Piece(p.blob, p.start + lo - offset, hi - lo))
        offset += p.length
    return out


def plan_parts(pieces: list[Piece], *, min_part: int = MIN_PART_BYTES,
               max_part: int = MAX_PART_BYTES) -> list[Part]:
    """Multipart parts that assemble ``pieces``: large runs copied server-side, small ones
    downloaded and joined, every part but the last at least ``min_part`` bytes.

    A piece is copied when no downloaded bytes are pending and it has ``min_part`` bytes (or
    is the last piece); pending bytes are topped up to exactly ``min_part`` from the next
    pieces, so at most ``min_part`` bytes of a large piece are downloaded. Worked example,
    ``min_part=5``, pieces of 2, 8, 1 and 6 bytes (a, b, c, d)::

        a[0:2] + b[0:3] downloaded | b[3:8] copied | c[0:1] + d[0:4] downloaded | d[4:6] copied

    >>> blobs = [Blob(n, s, 0) for n, s in zip("abcd", (2, 8, 1, 6))]
    >>> plan = plan_parts([Piece(b, 0, b.size) for b in blobs], min_part=5)
    >>> for part in plan:
    ...     print(part.copy, [(x.blob.path, x.start, x.length) for x in part.pieces])
    False [('a', 0, 2), ('b', 0, 3)]
    True [('b', 3, 5)]
    False [('c', 0, 1), ('d', 0, 4)]
    True [('d', 4, 2)]
    """
    parts: list[Part] = []
    pending: list[Piece] = []
    nonempty = [p for p in pieces if p.length]
    for i, piece in enumerate(nonempty):
        last = i == len(nonempty) - 1
        start, left = piece.start, piece.length
        while left:
            if not pending and (left >= min_part or last):
                n = min(left, max_part)
                parts.append(Part(True, (Piece(piece.blob, start, n),)))
            else:
                have = sum(p.length for p in pending)
                n = min(left, min_part - have) if pending else left
                pending.append(Piece(piece.blob, start, n))
                if have + n >= min_part:
                    parts.append(Part(False, tuple(pending)))
                    pending = []
            start, left = start + n, left - n
    if pending:
        parts.append(Part(False, tuple(pending)))
    return parts


def source_digest(pieces: list[Piece]) -> str:
    """A fingerprint of exactly these bytes of these object versions (paths, ranges, ETags):
    stored on a composed object, it proves later that the object was made from them."""
    text = "\n".join(f"{p.blob.path} {p.blob.etag} {p.start} {p.length}" for p in pieces)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def group_files(prefix: str, blobs: Iterable[Blob], *,
                recursive: bool) -> dict[str, tuple[int, int]]:
    """Listed objects as files: ``{path relative to prefix: (size, mtime_ms)}``.

    A plain object is a file; the objects named ``<file>/<16 digits>`` are the segments of
    ``<file>``, whose size is where its last segment ends and whose mtime is its newest
    segment's. Contiguity is not checked here (reads and copies check it), so cleanup still
    sees, and can delete, a damaged file. Without ``recursive``, only files directly in the
    prefix.

    >>> blobs = [Blob("r/a", 3, 5), Blob("r/t/0000000000000000", 4, 6),
    ...          Blob("r/t/0000000000000004", 2, 9), Blob("r/d/x", 1, 1)]
    >>> group_files("r/", blobs, recursive=False)
    {'a': (3, 5), 't': (6, 9)}
    """
    files: dict[str, tuple[int, int]] = {}
    for blob in blobs:
        rel = blob.path[len(prefix):]
        parent, _, name = rel.rpartition("/")
        offset = segment_offset(name) if parent else None
        path, end = (rel, blob.size) if offset is None else (parent, offset + blob.size)
        if recursive or "/" not in path:
            size, mtime = files.get(path, (0, 0))
            files[path] = (max(size, end), max(mtime, blob.mtime_ms))
    return files


class SegmentWriter(io.RawIOBase):
    """The writer :meth:`ObjectStorage.open_append` returns.

    Bytes are buffered; a buffer of ``threshold`` bytes, and what is left at ``close()``,
    becomes the segment at the file offset where it begins, through ``put(offset, data)``,
    an exclusive create. A writer that lost a race for an offset raises ``FileExistsError``
    from ``write`` or ``close`` and writes nothing more. ``flush()`` does not cut a segment
    (pyarrow calls it often); ``tell()`` is the logical end of the file, as in append mode.
    """

    def __init__(self, put: Callable[[int, bytes], None], *, start: int, threshold: int) -> None:
        super().__init__()
        self._put = put
        self._offset = start  # where the buffered bytes begin
        self._buffer = bytearray()
        self._threshold = threshold
        self._failed = False

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        if self.closed or self._failed:
            raise ValueError("write to a closed or failed segment writer")
        self._buffer += data
        if len(self._buffer) >= self._threshold:
            self._emit()
        return len(data) if not isinstance(data, memoryview) else data.nbytes

    def tell(self) -> int:
        return self._offset + len(self._buffer)

    def _emit(self) -> None:
        data, self._buffer = bytes(self._buffer), bytearray()
        try:
            self._put(self._offset, data)
        except BaseException:
            self._failed = True
            raise
        self._offset += len(data)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._buffer and not self._failed:
                self._emit()
        finally:
            super().close()
