"""Row codecs: what gzip's default and explicit levels write, and damaged members as errors."""

from __future__ import annotations

import gzip
import zlib

import pytest

from commit_protocol.formats.codecs import ROW_CODEC_SUFFIX, RowCodec

CODECS = [name for name in ROW_CODEC_SUFFIX if name != "none"]
TEXT = b"".join(b'{"id":%d,"name":"user-%d","value":%f}\n' % (i, i % 97, i / 7)
                for i in range(20_000))


def zlib_gzip(data: bytes, level: int) -> bytes:
    """``zlib.compress(data, level, wbits=31)``, which takes ``wbits`` only from Python 3.11."""
    compressor = zlib.compressobj(level, wbits=31)
    return compressor.compress(data) + compressor.flush()


def test_default_gzip_is_standard_gzip_close_to_zlib_level_6():
    codec = RowCodec("gzip")
    first, second = codec.compress(TEXT[:1000]), codec.compress(TEXT[1000:])
    # appends are members of one file that any gzip reader takes as one stream
    assert gzip.decompress(first + second) == TEXT
    assert codec.compress(TEXT[:1000]) == first  # a replay writes the same bytes
    whole = codec.compress(TEXT)
    # ISA-L trades a little size for ~10x speed: 2-5% on the benchmarks' rows, more on this
    # small, very regular text
    assert len(whole) <= 1.15 * len(zlib_gzip(TEXT, 6))


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_an_explicit_gzip_level_is_zlib_at_that_level(level):
    assert RowCodec("gzip", level).compress(TEXT) == zlib_gzip(TEXT, level)


@pytest.mark.parametrize("codec", CODECS)
def test_members_of_either_gzip_writer_decode_together(codec):
    members = RowCodec(codec).compress(TEXT[:500]) + RowCodec(codec, 1).compress(TEXT[500:])
    assert RowCodec(codec).decompress(members) == TEXT


def _damaged(data: bytes, how: str) -> bytes:
    middle = len(data) // 2
    if how == "flipped":
        return data[:middle] + bytes([data[middle] ^ 0x55]) + data[middle + 1:]
    if how == "cut":
        return data[:middle]
    if how == "zeroed":  # a valid header, then no valid deflate block / frame
        return data[:10] + bytes(len(data) - 10)
    return data + b"garbage after the last member"


@pytest.mark.parametrize("how", ["flipped", "cut", "zeroed", "trailing"])
@pytest.mark.parametrize("codec", CODECS)
def test_damaged_data_raises_one_of_the_documented_errors(codec, how):
    """The reader turns exactly these into an error naming the file; anything else (zlib's
    own ``zlib.error`` for a bad deflate block, say) would escape as a bare library error."""
    data = _damaged(RowCodec(codec).compress(TEXT), how)
    try:
        plain = RowCodec(codec).decompress(data)
    except (OSError, EOFError, ValueError):
        return
    # Two quiet cases, both caught before decoding by the reader's size checks against the
    # log: a cut zstd frame reads short, and Python's bz2 stops at bytes that start no stream.
    assert (codec, how) in {("zstd", "cut"), ("bz2", "trailing")}
    assert plain != TEXT if how == "cut" else plain == TEXT
