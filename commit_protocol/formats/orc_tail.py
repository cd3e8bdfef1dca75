"""The tail of an ORC file (postscript, footer, stripe statistics), read here because pyarrow's
ORC reader exposes neither where its stripes lie nor their statistics.

An ORC file ends with ``metadata | footer | postscript | u8 len(postscript)``. The postscript
is a plain protobuf message naming the codec and the footer's and metadata's lengths; those
two are protobuf messages in the codec's chunks (a 3-byte header each, ``len << 1 | original``).
The footer lists the stripes (offset, lengths, rows) and the type tree (top-level columns are
the children of type 0); the metadata holds each stripe's column statistics. Only the fields
a reader prunes by are decoded (the ORC specification's field numbers are in the constants
below); anything unexpected leaves a unit without statistics rather than failing a read.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from commit_protocol.formats.hybrid_calendar import GREGORIAN_START_DAY, hybrid_to_gregorian
from commit_protocol.formats.units import ColumnStats, Unit

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
# Type kinds (orc_proto.proto, Type.Kind)
_BOOLEAN, _BYTE, _SHORT, _INT, _LONG, _FLOAT, _DOUBLE, _STRING = range(8)
_DECIMAL, _DATE, _VARCHAR, _CHAR, _TIMESTAMP_INSTANT = 14, 15, 16, 17, 18
_NTZ_ATTRIBUTE = ("spark.sql.catalyst.type", "timestamp_ntz")
_CODECS = {0: "none", 1: "zlib", 2: "snappy", 4: "lz4", 5: "zstd"}  # 3: LZO, unread


class OrcTailError(ValueError):
    """The tail cannot be read (an unknown codec, a damaged message)."""


@dataclass(frozen=True)
class _Column:
    kind: int
    ntz: bool


def read_units(source: BinaryIO, size: int) -> list[Unit]:
    """The stripes of the ORC file of ``size`` bytes in ``source``, with the statistics of its
    top-level columns; ``OrcTailError`` when the tail cannot be read."""
    source.seek(max(0, size - 1))
    ps_length = source.read(1)[0]
    source.seek(size - 1 - ps_length)
    postscript = _message(source.read(ps_length))
    footer_length, codec_id = postscript.get(1, [0])[0], postscript.get(2, [0])[0]
    metadata_length = postscript.get(5, [0])[0]
    if codec_id not in _CODECS:
        raise OrcTailError(f"ORC compression kind {codec_id} is not read here")
    codec = _CODECS[codec_id]
    footer_start = size - 1 - ps_length - footer_length
    source.seek(footer_start - metadata_length)
    tail = source.read(metadata_length + footer_length)
    metadata = _message(_decompress(tail[:metadata_length], codec))
    footer = _message(_decompress(tail[metadata_length:], codec))
    stripes = [_message(s) for s in footer.get(3, [])]
    stats = [_message(s).get(1, []) for s in metadata.get(1, [])]
    columns = _top_level_columns([_message(t) for t in footer.get(4, [])])
    units = []
    for index, stripe in enumerate(stripes):
        offset = stripe.get(1, [0])[0]
        length = sum(stripe.get(field, [0])[0] for field in (2, 3, 4))
        rows = stripe.get(5, [0])[0]
        column_stats = stats[index] if index < len(stats) else []
        units.append(Unit(index, offset, length, rows,
                          _stripe_stats(columns, column_stats, rows)))
    return units


def _top_level_columns(types: list[dict[int, list]]) -> dict[str, tuple[int, _Column]]:
    """``name -> (column id, column)`` of the root struct's children."""
    if not types:
        return {}
    root = types[0]
    ids = _packed(root.get(2, []))
    names = [bytes(n).decode() for n in root.get(3, [])]
    found = {}
    for name, column_id in zip(names, ids, strict=False):
        if column_id >= len(types):
            continue
        kind_type = types[column_id]
        attributes = [_message(a) for a in kind_type.get(7, [])]
        ntz = any((bytes(a.get(1, [b""])[0]).decode(), bytes(a.get(2, [b""])[0]).decode())
                  == _NTZ_ATTRIBUTE for a in attributes)
        found[name] = (column_id, _Column(kind_type.get(1, [0])[0], ntz))
    return found


def _stripe_stats(columns: dict[str, tuple[int, _Column]], stats: list, rows: int
                  ) -> dict[str, ColumnStats]:
    found = {}
    for name, (column_id, column) in columns.items():
        if column_id < len(stats):
            parsed = _column_stats(_message(stats[column_id]), column, rows)
            if parsed is not None:
                found[name] = parsed
    return found


def _column_stats(s: dict[int, list], column: _Column, rows: int) -> ColumnStats | None:
    """One column's statistics in a stripe of ``rows`` rows (None when it has none)."""
    values = s.get(1, [None])[0]
    null_count = None if values is None else max(0, rows - values)
    try:
        low, high = _bounds(s, column)
    except (ValueError, OverflowError, decimal.InvalidOperation, struct.error):
        low = high = None
    return ColumnStats(low, high, null_count)


def _bounds(s: dict[int, list], column: _Column) -> tuple[Any, Any]:
    kind = column.kind
    if kind in (_BYTE, _SHORT, _INT, _LONG) and 2 in s:
        ints = _message(s[2][0])
        low, high = (_zigzag(ints[f][0]) if f in ints else None for f in (1, 2))
        if column.ntz:  # Spark's timestamp_ntz: microseconds in a bigint
            return _micros(low), _micros(high)
        return low, high
    if kind in (_FLOAT, _DOUBLE) and 3 in s:
        doubles = _message(s[3][0])
        return _pair(doubles, lambda raw: struct.unpack("<d", raw)[0])
    if kind in (_STRING, _VARCHAR, _CHAR) and 4 in s:
        strings = _message(s[4][0])
        lowest = strings.get(1) or strings.get(4)  # minimum, else lowerBound (truncated)
        highest = strings.get(2) or strings.get(5)
        return (bytes(lowest[0]).decode() if lowest else None,
                bytes(highest[0]).decode() if highest else None)
    if kind == _DECIMAL and 6 in s:
        return _pair(_message(s[6][0]), lambda raw: decimal.Decimal(bytes(raw).decode()))
    if kind == _DATE and 7 in s:
        return _pair(_message(s[7][0]), lambda raw: _date(_zigzag(raw)))
    if kind == _TIMESTAMP_INSTANT and 9 in s:  # zoned: rotsink writes instants only
        stamps = _message(s[9][0])
        # minimumUtc / maximumUtc in milliseconds; the sub-millisecond part only ever
        # raises a value, so the maximum's bound is the next millisecond
        return (_instant(_zigzag(stamps[3][0])) if 3 in stamps else None,
                _instant(_zigzag(stamps[4][0]) + 1) if 4 in stamps else None)
    if kind == _BOOLEAN and 5 in s and 1 in s:
        trues = _packed(_message(s[5][0]).get(1, []))
        if trues:
            return trues[0] == s[1][0], trues[0] > 0
    return None, None


def _pair(fields: dict[int, list], convert: Callable[[Any], Any]) -> tuple[Any, Any]:
    """(minimum, maximum): fields 1 and 2 of a statistics message, converted."""
    low, high = fields.get(1), fields.get(2)
    return (convert(low[0]) if low else None, convert(high[0]) if high else None)


def _micros(value: int | None) -> dt.datetime | None:
    return None if value is None else _EPOCH + dt.timedelta(microseconds=value)


def _instant(millis: int) -> dt.datetime:
    return (_EPOCH + dt.timedelta(milliseconds=millis)).replace(tzinfo=dt.timezone.utc)


def _date(days: int) -> dt.date:
    """A date of an ORC file rotsink wrote: days before 1582-10-15 are counted in the hybrid
    Julian calendar (:mod:`commit_protocol.formats.hybrid_calendar`); the conversion keeps
    order, so the bounds stay bounds."""
    if days < GREGORIAN_START_DAY:
        days = hybrid_to_gregorian(days)
    return _EPOCH_DATE + dt.timedelta(days=days)


# -- compression chunks ----------------------------------------------------------------------
def _decompress(data: bytes, codec: str) -> bytes:
    if codec == "none":
        return data
    out, pos = [], 0
    while pos + 3 <= len(data):
        header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        length, original = header >> 1, header & 1
        chunk = data[pos + 3:pos + 3 + length]
        out.append(chunk if original else _inflate(chunk, codec))
        pos += 3 + length
    return b"".join(out)


def _inflate(chunk: bytes, codec: str) -> bytes:
    if codec == "zlib":
        return zlib.decompress(chunk, -15)
    if codec == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(chunk)
    if codec == "snappy":
        import pyarrow as pa

        size, _ = _varint(chunk, 0)  # snappy's preamble: the uncompressed length
        return pa.Codec("snappy").decompress(chunk, decompressed_size=size, asbytes=True)
    return _lz4_block(chunk)


def _lz4_block(src: bytes) -> bytes:
    """An LZ4 block (no frame: ORC's LZ4) decoded; footers are a few kilobytes."""
    out, i = bytearray(), 0
    while i < len(src):
        token = src[i]
        i += 1
        literals, i = _lz4_length(src, i, token >> 4)
        out += src[i:i + literals]
        i += literals
        if i >= len(src):
            break
        offset = src[i] | src[i + 1] << 8
        matched, i = _lz4_length(src, i + 2, token & 15)
        start = len(out) - offset
        for k in range(matched + 4):  # byte by byte: a match may overlap its own output
            out.append(out[start + k])
    return bytes(out)


def _lz4_length(src: bytes, i: int, length: int) -> tuple[int, int]:
    if length == 15:
        while True:
            extra = src[i]
            i += 1
            length += extra
            if extra != 255:
                break
    return length, i


# -- protobuf's wire format --------------------------------------------------------------------
def _message(data: bytes | memoryview) -> dict[int, list]:
    """A protobuf message's fields by number: varints as ints, length-delimited fields as
    memoryviews, fixed-size fields as their bytes."""
    fields: dict[int, list] = {}
    for number, value in _fields(memoryview(data)):
        fields.setdefault(number, []).append(value)
    return fields


def _fields(view: memoryview) -> Iterator[tuple[int, object]]:
    pos = 0
    while pos < len(view):
        key, pos = _varint(view, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(view, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(view, pos)
            yield number, view[pos:pos + length]
            pos += length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            yield number, bytes(view[pos:pos + width])
            pos += width
        else:
            raise OrcTailError(f"protobuf wire type {wire} at byte {pos}")


def _varint(data, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise OrcTailError("protobuf varint cut short")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _packed(values: list) -> list[int]:
    """A repeated integer field, packed (one length-delimited value) or not."""
    out: list[int] = []
    for value in values:
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            number, pos = _varint(value, pos)
            out.append(number)
    return out
