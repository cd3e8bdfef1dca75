"""Compression of row-format part files, one independent member per append.

Each append is compressed on its own (a gzip member, a bz2 stream, a zstd frame) and the
members are concatenated. So a committed offset is always a member boundary, the committed
prefix of an in-progress file is a complete compressed file, and appending after a reopen
needs no compressor state. Spark's readers (Hadoop codecs, chosen by the ``.gz`` / ``.bz2`` /
``.zst`` suffix) and the decoders here read concatenated members as one stream.

Never ``.lz4`` or ``.snappy`` row files: Hadoop's codecs for those names expect Hadoop's
own block framing, and a standard lz4-frame or snappy-framed file crashes Spark's JVM with an
out-of-memory error.

gzip without a level is written by ISA-L (``isal``), Intel's deflate for storage: about 10x
faster than zlib's default level 6 here, for files 2-15% larger. gzip in the Python worker at
level 6 cost twice what the rest of a task did, and ran 1.35x Spark's own gzip writer. A level
set by the user means zlib at that level, exactly as ``gzip -N``.

Bulk formats compress inside the file (pyarrow's codecs); their modules check the name and
level the user chose (:func:`bulk_codec`).
"""

from __future__ import annotations

import bz2
import io
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, cast

from commit_protocol.vocabulary.errors import OptionError

if TYPE_CHECKING:
    from commit_protocol.formats import Format

ROW_CODEC_SUFFIX = {"none": "", "gzip": ".gz", "bz2": ".bz2", "zstd": ".zst"}
# (lowest, highest) level accepted by each codec's library, then the level used when unset
_LEVELS = {"gzip": (0, 9), "bz2": (1, 9), "zstd": (1, 22)}
_DEFAULT_LEVELS = {"bz2": 9, "zstd": 3}  # gzip: none, ISA-L at its own default
ISAL_LEVEL = 2  # ISA-L's default (of 0-3): 2-15% larger than zlib -6 in our benchmarks


@dataclass(frozen=True)
class RowCodec:
    """A row codec and its level; frozen and picklable (it travels to executors)."""

    name: str = "none"
    level: int | None = None

    def __post_init__(self) -> None:
        if self.name not in ROW_CODEC_SUFFIX:
            hint = (" (Spark's readers crash on .lz4/.snappy row files)"
                    if self.name in ("lz4", "snappy") else "")
            raise OptionError(f"option compression={self.name!r} for a row format: expected "
                              f"one of {', '.join(ROW_CODEC_SUFFIX)}{hint}")
        if self.level is not None:
            if self.name == "none":
                raise OptionError(f"option compression.level={self.level!r}: compression "
                                  "is none; a level needs a codec")
            low, high = _LEVELS[self.name]
            if not low <= self.level <= high:
                raise OptionError(f"option compression.level={self.level!r} for "
                                  f"compression={self.name}: expected {low}..{high}")

    @property
    def suffix(self) -> str:
        return ROW_CODEC_SUFFIX[self.name]

    def _level(self) -> int:
        return self.level if self.level is not None else _DEFAULT_LEVELS[self.name]

    def compress(self, data: bytes) -> bytes:
        """``data`` as one complete member (``b""`` stays ``b""``: no empty members)."""
        if self.name == "none" or not data:
            return data
        if self.name == "gzip":
            # wbits=31: a gzip member with a zero mtime, so replays write identical bytes
            if self.level is None:
                from isal import isal_zlib

                return isal_zlib.compress(data, ISAL_LEVEL, wbits=31)
            # zlib.compress takes wbits only from Python 3.11; a compressobj does on 3.10 too
            gzip = zlib.compressobj(self.level, zlib.DEFLATED, 31)
            return gzip.compress(data) + gzip.flush()
        if self.name == "bz2":
            return bz2.compress(data, self._level())
        import zstandard

        # The frame checksum makes a flipped bit a decode error, as gzip's and bz2's CRCs do
        return zstandard.ZstdCompressor(level=self._level(), write_checksum=True).compress(data)

    def decompress(self, data: bytes) -> bytes:
        """All members of ``data`` concatenated (the whole committed file).

        Raises ``OSError``, ``EOFError`` or ``ValueError`` on damaged data.
        """
        if self.name == "none" or not data:
            return data
        if self.name == "gzip":
            from isal import igzip, isal_zlib

            try:
                return igzip.decompress(data)  # ISA-L inflates any gzip 1.5x faster
            except isal_zlib.error as e:  # type: ignore[misc]  # isal's stub: a bad deflate block, not an OSError
                raise ValueError(f"gzip: {e}") from e
        if self.name == "bz2":
            return bz2.decompress(data)
        import zstandard

        # Only the stream reader decodes every frame; one-shot decompress stops after the
        # first. A cut frame reads short here without an error: callers check the length
        # against the log before decoding.
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data),
                                                            read_across_frames=True)
        try:
            with reader:
                return reader.read()
        except zstandard.ZstdError as e:
            raise ValueError(f"zstd: {e}") from e


    def reader(self, source: BinaryIO) -> BinaryIO:
        """The decompressed bytes of every member of ``source`` (from its position on), as a
        stream: a reader holds a member's window, not the file. A cut or damaged member
        raises one of :func:`decode_errors` when read."""
        if self.name == "none":
            return source
        if self.name == "gzip":
            from isal import igzip

            return cast(BinaryIO, igzip.IGzipFile(fileobj=source, mode="rb"))
        if self.name == "bz2":
            return cast(BinaryIO, bz2.BZ2File(source, mode="rb"))  # reads every stream
        import zstandard

        return cast(BinaryIO, zstandard.ZstdDecompressor().stream_reader(
            source, read_across_frames=True, closefd=False))


def decode_errors() -> tuple[type[BaseException], ...]:
    """What the codecs' readers raise on bytes that are not theirs (gzip, bz2 and zstd each
    raise other types; ISA-L a ``zlib``-style error for a bad deflate block)."""
    import zstandard
    from isal import isal_zlib

    isal_error = cast(type[BaseException], isal_zlib.error)  # isal's stub types it loosely
    return (OSError, EOFError, ValueError, zlib.error, isal_error, zstandard.ZstdError)


def bulk_codec(fmt: Format, compression: str, level: int | None) -> str:
    """The ``compression`` option of bulk format ``fmt`` after checking it with its level
    (pyarrow would fail only on write, in a task)."""
    name = compression.lower()
    if name not in fmt.compressions:
        raise OptionError(f"option compression={compression!r} for format {fmt.name}: expected "
                          f"one of {', '.join(fmt.compressions)}")
    if level is None:
        return name
    if not fmt.levels:
        writer = f"pyarrow's {fmt.name} writer" if fmt.bulk else f"rotsink's {fmt.name} writer"
        raise OptionError(f"option compression.level={level!r} for format {fmt.name}: "
                          f"{writer} takes no compression level")
    import pyarrow as pa  # only to ask the codec its levels: planning imports no pyarrow

    pyarrow_name = "lz4" if name == "lz4_raw" else name
    if name == "none" or not pa.Codec.supports_compression_level(pyarrow_name):
        raise OptionError(f"option compression={compression!r} compression.level={level!r} for "
                          f"format {fmt.name}: this codec takes no level")
    low = pa.Codec.minimum_compression_level(pyarrow_name)
    high = pa.Codec.maximum_compression_level(pyarrow_name)
    if not low <= level <= high:
        raise OptionError(f"option compression={compression!r} compression.level={level!r} for "
                          f"format {fmt.name}: expected {low}..{high}")
    return name
