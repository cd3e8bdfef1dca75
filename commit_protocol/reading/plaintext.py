"""The plaintext of a row or staged file's committed bytes, as a stream.

Row files are written one independent piece per append: a sealed record (or several) on an
encrypted path, a compression member inside it. So the bytes from any committed offset to
the end of the committed prefix decrypt record by record and decompress member by member,
and a reader holds one record and one member's window at a time, never the file. A staged
file (a bulk format's in-progress rows) has no codec of its own: its format's codec applies
when the slot rolls.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from typing import BinaryIO

from commit_protocol.formats import file_codec
from commit_protocol.formats.codecs import RowCodec, decode_errors
from commit_protocol.reading.files import CommittedFile, Layout
from commit_protocol.reading.inputs import BUFFER_BYTES, open_input
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import EncryptionKeyError, IntegrityError, RotsinkError


def open_plaintext(storage: Storage, f: CommittedFile, *, layout: Layout,
                   ring: Mapping[str, bytes] | None, start: int = 0) -> io.BufferedReader:
    """Plaintext of the committed bytes ``[start, f.length)`` of ``f`` (``start`` a committed
    offset): authenticated and decompressed as the path was written. A finalized encrypted
    file must end with its ``FINAL`` record. Errors name the file (``IntegrityError`` for
    damaged bytes, ``TruncatedFileError`` for missing ones)."""
    source = open_input(storage, f)
    stream: io.BufferedReader
    if layout.encrypted:
        from commit_protocol.crypto.sealed import iter_plaintext

        stream = io.BufferedReader(ChunkReader(iter_plaintext(
            source, require_ring(ring, f.path), path=f.path, end=f.length, start=start,
            require_final=not f.in_progress), source), buffer_size=BUFFER_BYTES)
    else:
        source.seek(start)
        stream = source
    if f.staged or file_codec(layout.format, layout.compression) == "none":
        return stream
    codec = RowCodec(layout.compression)
    return io.BufferedReader(_Decompressed(codec.reader(stream), stream, f.path, codec.name,
                                           start), buffer_size=BUFFER_BYTES)


def require_ring(ring: Mapping[str, bytes] | None, path: str) -> Mapping[str, bytes]:
    if not ring:
        raise EncryptionKeyError(f"{path} is encrypted: set encryption.key (or encryption.keys "
                                 "for several keys) to read it")
    return ring


class ChunkReader(io.RawIOBase):
    """A byte stream over an iterator of chunks (decrypted records) read from ``source``,
    which closes with it."""

    def __init__(self, chunks: Iterator[bytes], source: BinaryIO) -> None:
        super().__init__()
        self._chunks = chunks
        self._source = source
        self._chunk = memoryview(b"")

    def close(self) -> None:
        self._source.close()
        super().close()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        while not self._chunk:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk = memoryview(chunk)
        count = min(len(view), len(self._chunk))
        view[:count] = self._chunk[:count]
        self._chunk = self._chunk[count:]
        return count


class _Decompressed(io.RawIOBase):
    """A codec's reader (``inner``, over ``source``) whose decoding errors name the file,
    codec and offset; closing it closes both."""

    def __init__(self, inner: BinaryIO, source: BinaryIO, path: str, codec: str,
                 start: int) -> None:
        super().__init__()
        self._inner, self._source = inner, source
        self._path, self._codec, self._start = path, codec, start

    def close(self) -> None:
        self._inner.close()
        self._source.close()
        super().close()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        try:
            return self._inner.read(size)
        except RotsinkError:
            raise
        except decode_errors() as e:
            # gzip, bz2 and zstd raise different types; each means these are not our bytes
            where = f" from byte {self._start}" if self._start else ""
            raise IntegrityError(f"{self._path}: cannot decompress {self._codec} data{where} "
                                 f"({type(e).__name__}: {e})") from e

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[:len(data)] = data
        return len(data)
