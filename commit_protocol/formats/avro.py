"""Avro object container files, as Spark's ``spark-avro`` writes and reads them.

A file is a header (magic, the schema and codec in a metadata map, a 16-byte sync marker)
and then blocks (row count, byte size, the rows, compressed by the file's codec, then the
sync marker). So it is a row format: a chunk is one block, appended after the file's
earlier ones, and every committed offset is a block boundary, a valid file any Avro reader
reads. Later chunks of a file come from other tasks and processes: the marker is derived
from the file's final name (a hash: as unpredictable for the data as a random one), so
every writer of a file marks its blocks alike without reading the file back.

Types as ``spark-avro`` maps them (its ``SchemaConverters.toAvroType``): the top-level record
``topLevelRecord``; a nullable column a union ``[type, "null"]``, value first; byte and short
``int``; date ``int``/``date``; timestamp ``long``/``timestamp-micros``; timestamp without
time zone ``long``/``local-timestamp-micros``; decimal a ``fixed`` of the fewest bytes that
hold its precision, named ``<namespace>.<column>.fixed``, with ``decimal``; void ``null``; a
struct a record named after its column in the namespace of the record holding it; arrays and
maps (string keys) with their items' nullability.

Encoding is vectorized (no per-row Python): each column becomes, per row, the bytes of its
value (a union index, a zigzag varint, fixed bytes, a length and the bytes), built in numpy
from Arrow's buffers, and pyarrow joins the columns row by row into the block (a struct's
fields row by row, an array's or a map's items per row by their offsets). Codecs are
Avro's own, per block: ``null``, ``deflate`` (raw deflate: ISA-L's fast level unless a level
is set), ``snappy`` (raw snappy and the CRC32 of the rows, Spark's default) and
``zstandard``. Decoding (rotsink's readers) uncompresses the blocks and hands a ``null``-codec
container to fastavro.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAGIC = b"Obj\x01"
SYNC_BYTES = 16
TOP_LEVEL = "topLevelRecord"
# the ``compression`` option's values, and the codec names Avro files carry
CODECS = {"snappy": "snappy", "deflate": "deflate", "zstd": "zstandard", "none": "null"}

# union indexes as varints: Spark writes a nullable column as [type, "null"]
_VALUE, _NULL = 0x00, 0x02
_STEPS = [np.uint64(1) << np.uint64(7 * k) for k in range(10)]


# -- schema ------------------------------------------------------------------------------
def avro_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Avro schema ``spark-avro`` writes for a Spark schema of this Arrow form."""
    return _record(list(schema), TOP_LEVEL, "")


def _record(fields: list[pa.Field], name: str, namespace: str) -> dict[str, Any]:
    """Spark's ``toAvroType`` of a struct: a record named ``name`` in ``namespace``; its
    fields' records and fixeds are named in the namespace ``namespace.name``."""
    inner = f"{namespace}.{name}" if namespace else name
    record: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        record["namespace"] = namespace
    record["fields"] = [{"name": f.name, "type": _typed(f.type, f.nullable, f.name, inner)}
                        for f in fields]
    return record


def _typed(t: pa.DataType, nullable: bool, name: str, namespace: str) -> Any:
    base = _avro_type(t, name, namespace)
    if base == "null":
        return "null"
    return [base, "null"] if nullable else base


def _avro_type(t: pa.DataType, name: str, namespace: str) -> Any:
    if pa.types.is_struct(t):
        return _record([t.field(i) for i in range(t.num_fields)], name, namespace)
    if pa.types.is_map(t):
        return {"type": "map", "values": _typed(t.item_type, t.item_field.nullable, name,
                                                 namespace)}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": _typed(t.value_type, t.value_field.nullable, name,
                                                  namespace)}
    if pa.types.is_decimal(t):
        fixed = f"{namespace}.{name}.fixed" if namespace else f"{name}.fixed"
        return {"type": "fixed", "name": fixed, "size": fixed_size(t.precision),
                "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    return _leaf_type(name, t)


def _leaf_type(name: str, t: pa.DataType) -> Any:
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "bytes"
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t):
        logical = "timestamp-micros" if t.tz is not None else "local-timestamp-micros"
        return {"type": "long", "logicalType": logical}
    if pa.types.is_null(t):
        return "null"
    raise TypeError(f"format avro cannot hold column {name!r} of type {t}")


def fixed_size(precision: int) -> int:
    """Spark's ``minBytesForPrecision``: the fewest bytes whose two's complement holds every
    unscaled value of ``precision`` digits.

    >>> [fixed_size(p) for p in (1, 2, 3, 9, 10, 18, 38)]
    [1, 1, 2, 4, 5, 8, 16]
    """
    size = 1
    while 2 ** (8 * size - 1) < 10 ** precision:
        size += 1
    return size


# -- writing -----------------------------------------------------------------------------
def sync_marker(file_name: str) -> bytes:
    """The sync marker of the file finalized as ``file_name``."""
    return hashlib.sha256(b"rotsink avro sync marker\0" + file_name.encode()).digest()[:16]


def header(schema: pa.Schema, compression: str, sync: bytes) -> bytes:
    meta = {"avro.schema": json.dumps(avro_schema(schema), separators=(",", ":")).encode(),
            "avro.codec": CODECS[compression].encode()}
    parts = [MAGIC, _long(len(meta))]
    for key, value in meta.items():
        parts += [_long(len(key)), key.encode(), _long(len(value)), value]
    return b"".join([*parts, _long(0), sync])


def encode(table: pa.Table, *, with_header: bool, file_name: str = "",
           compression: str = "none", level: int | None = None) -> bytes:
    """One chunk of the file finalized as ``file_name``: its header first when
    ``with_header``, then ``table``'s rows as one block (none for zero rows)."""
    sync = sync_marker(file_name)
    head = header(table.schema, compression, sync) if with_header else b""
    if table.num_rows == 0:
        return head
    columns = [c for f, column in zip(table.schema, table.columns, strict=True)
               for c in _column_bytes(column.combine_chunks(), f.nullable)]
    rows: bytes | memoryview = b""  # only void columns: rows of no bytes
    if columns:
        rows = _data_of(_joined(columns, table.num_rows))
    data = _compress(rows, compression, level)
    return b"".join([head, _long(table.num_rows), _long(len(data)), data, sync])


def _joined(parts: list[pa.Array], n: int) -> pa.Array:
    """Binary arrays of ``n`` rows joined row by row (none: ``n`` empty values)."""
    if not parts:
        return pa.array([b""] * n, pa.binary())
    return parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, b"")


def _column_bytes(column: pa.Array, union: bool) -> list[pa.Array]:
    """Per row, the bytes of ``column``'s values (union index first when ``union``: a
    nullable column), as binary arrays to be joined row by row."""
    t = column.type
    valid = None if column.null_count == 0 else \
        np.asarray(column.is_valid(), dtype=bool)
    if pa.types.is_null(t):
        return []
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t) \
            or pa.types.is_map(t):
        nested = _nested_bytes(column)
        if valid is not None:  # a null's children are whatever: leave them out
            nested = pc.if_else(pa.array(valid), nested, pa.scalar(b"", pa.binary()))
        if not union:
            return [nested]
        index = np.full(len(column), _VALUE, dtype=np.uint8) if valid is None else \
            np.where(valid, _VALUE, _NULL).astype(np.uint8)
        return [_binary(len(column), np.arange(len(column) + 1, dtype=np.int32), index),
                nested]
    if pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t):
        if pa.types.is_timestamp(t) and t.unit != "us":
            column = column.cast(pa.timestamp("us", t.tz))
        if pa.types.is_date32(t) or pa.types.is_timestamp(t):
            column = column.view(pa.int32() if pa.types.is_date32(t) else pa.int64())
        values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        return [_varints(((values << 1) ^ (values >> 63)).view(np.uint64), valid, union)]
    if pa.types.is_floating(t):
        values = column.fill_null(0).to_numpy(zero_copy_only=False)
        values = values.astype("<f8" if t.bit_width == 64 else "<f4", copy=False)
        return [_fixed(values.view(np.uint8).reshape(len(values), -1), valid, union)]
    if pa.types.is_boolean(t):
        values = column.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
        return [_fixed(values.reshape(-1, 1), valid, union)]
    if pa.types.is_decimal(t):
        size = fixed_size(t.precision)
        raw = column.cast(pa.decimal128(t.precision, t.scale)).fill_null(0)
        little = np.frombuffer(raw.buffers()[1], dtype=np.uint8, count=16 * len(raw),
                               offset=16 * raw.offset).reshape(len(raw), 16)
        return [_fixed(np.ascontiguousarray(little[:, ::-1][:, 16 - size:]), valid, union)]
    # strings and bytes: a length (zigzag: doubled), then the bytes themselves
    binary = column.cast(pa.binary()).fill_null(b"")
    offsets = np.frombuffer(binary.buffers()[1], dtype=np.int32, count=len(binary) + 1,
                            offset=4 * binary.offset)
    lengths = np.diff(offsets).astype(np.uint64) << np.uint64(1)
    return [_varints(lengths, valid, union), binary]


def _nested_bytes(column: pa.Array) -> pa.Array:
    """Per row, a struct's fields one after the other; an array's or a map's items as one
    Avro block (their count, the items, then the empty block that ends them)."""
    t = column.type
    if pa.types.is_struct(t):
        fields = [column.field(i) for i in range(t.num_fields)]  # type: ignore[attr-defined]
        return _joined([c for i, child in enumerate(fields)
                        for c in _column_bytes(child, t.field(i).nullable)], len(column))
    if pa.types.is_map(t):
        entries = column.values  # type: ignore[attr-defined]
        keys = _column_bytes(entries.field(0), False)
        values = _column_bytes(entries.field(1), t.item_field.nullable)
        items = _joined(keys + values, len(entries))
    else:
        items = _joined(_column_bytes(column.values,  # type: ignore[attr-defined]
                                      t.value_field.nullable), len(column.values))  # type: ignore[attr-defined]
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64 if pa.types.is_large_list(t)
                            else np.int32, count=len(column) + 1, offset=column.offset *
                            (8 if pa.types.is_large_list(t) else 4)).astype(np.int64)
    counts = np.diff(offsets)
    lists = pa.ListArray.from_arrays(pa.array(offsets - offsets[0], pa.int32()),
                                     items.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))
    body = pc.binary_join(lists, b"")
    count = _varints(((counts << 1) ^ (counts >> 63)).view(np.uint64), None, False)
    end = np.where(counts > 0, 0, -1)  # a non-empty block is followed by the empty one
    tail = _binary(len(column), _offsets((end + 1).astype(np.int32)),
                   np.zeros(int((end + 1).sum()), dtype=np.uint8))
    return pc.binary_join_element_wise(count, body.cast(pa.binary()), tail, b"")


def _varints(zigzag: np.ndarray, valid: np.ndarray | None, union: bool) -> pa.Array:
    """Per row: the union index (when ``union``), then the varint of ``zigzag`` (nothing
    more for a null)."""
    n = len(zigzag)
    width = 1
    biggest = int(zigzag.max()) if n else 0
    while width < 10 and biggest >= int(_STEPS[width]):
        width += 1
    lead = 1 if union else 0
    matrix = np.empty((n, lead + width), dtype=np.uint8)
    if union:
        matrix[:, 0] = _VALUE if valid is None else np.where(valid, _VALUE, _NULL)
    sizes = np.ones(n, dtype=np.int8)
    for k in range(1, width):
        sizes += zigzag >= _STEPS[k]
    for k in range(width):
        group = (zigzag >> np.uint64(7 * k)).astype(np.uint8) & 0x7F
        if k < width - 1:
            group |= (sizes > k + 1).view(np.uint8) << 7
        matrix[:, lead + k] = group
    lengths = sizes + lead
    if valid is not None:
        lengths = np.where(valid, lengths, 1).astype(np.int8)
    if valid is None and width == 1:
        return _binary(n, np.arange(0, (n + 1) * (lead + 1), lead + 1, dtype=np.int32), matrix)
    keep = np.arange(lead + width, dtype=np.int8)[None, :] < lengths[:, None]
    return _binary(n, _offsets(lengths), matrix[keep])


def _fixed(raw: np.ndarray, valid: np.ndarray | None, union: bool) -> pa.Array:
    """Per row: the union index (when ``union``), then ``raw``'s row of fixed-width bytes
    (nothing more for a null)."""
    n, width = raw.shape
    if not union:
        return _binary(n, np.arange(0, (n + 1) * width, width, dtype=np.int32), raw)
    matrix = np.empty((n, width + 1), dtype=np.uint8)
    matrix[:, 1:] = raw
    if valid is None:
        matrix[:, 0] = _VALUE
        return _binary(n, np.arange(0, (n + 1) * (width + 1), width + 1, dtype=np.int32),
                       matrix)
    matrix[:, 0] = np.where(valid, _VALUE, _NULL)
    keep = np.ones_like(matrix, dtype=bool)
    keep[~valid, 1:] = False
    return _binary(n, _offsets(np.where(valid, width + 1, 1)), matrix[keep])


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _binary(n: int, offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                        pa.py_buffer(np.ascontiguousarray(data))])


def _data_of(joined: pa.Array) -> memoryview:
    """The concatenated values of a binary array, without a copy."""
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32, count=len(joined) + 1,
                            offset=4 * joined.offset)
    return memoryview(joined.buffers()[2])[offsets[0]:offsets[-1]]


def _compress(rows: memoryview | bytes, compression: str, level: int | None) -> bytes:
    if compression == "none":
        return bytes(rows)
    if compression == "snappy":  # Avro's snappy: a raw snappy block, then the rows' CRC32
        block = pa.Codec("snappy").compress(rows, asbytes=True)
        return block + struct.pack(">I", zlib.crc32(rows))
    if compression == "zstd":
        codec = pa.Codec("zstd") if level is None else pa.Codec("zstd", level)
        return codec.compress(rows, asbytes=True)
    if compression == "deflate":  # raw deflate (no zlib header), as Avro's Java codec
        if level is None:
            from isal import isal_zlib

            out = isal_zlib.compressobj(isal_zlib.ISAL_DEFAULT_COMPRESSION,
                                        isal_zlib.DEFLATED, -15)
        else:
            out = zlib.compressobj(level, zlib.DEFLATED, -15)  # type: ignore[assignment]
        return out.compress(rows) + out.flush()
    raise ValueError(f"format avro: unknown compression {compression!r}")


def _long(n: int) -> bytes:
    """Avro's long: zigzag, then a varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# -- reading -----------------------------------------------------------------------------
def _read_long(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The long at ``pos`` and the position after it; IndexError if cut."""
    byte = data[pos]
    pos += 1
    n, shift = byte & 0x7F, 7
    while byte & 0x80:
        byte = data[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def read_header(data: bytes | memoryview) -> tuple[dict[str, bytes], bytes, int] | None:
    """``(metadata, sync marker, length)`` of the header ``data`` starts with; None when
    ``data`` holds only part of it. ValueError when ``data`` is no Avro file."""
    if len(data) < len(MAGIC):
        return None
    if bytes(data[:4]) != MAGIC:
        raise ValueError("not an Avro object container file (no 'Obj\\x01' magic)")
    try:
        pos, meta = 4, {}
        while True:
            count, pos = _read_long(data, pos)
            if count == 0:
                break
            if count < 0:  # a block of the map with its byte size
                count = -count
                _, pos = _read_long(data, pos)
            for _ in range(count):
                size, pos = _read_long(data, pos)
                key = bytes(data[pos:pos + size]).decode()
                pos += size
                size, pos = _read_long(data, pos)
                meta[key] = bytes(data[pos:pos + size])
                pos += size
        if len(data) < pos + SYNC_BYTES:
            return None
        return meta, bytes(data[pos:pos + SYNC_BYTES]), pos + SYNC_BYTES
    except IndexError:
        return None


def header_end(data: bytes) -> int:
    """The length of the header ``data`` (a file's start) begins with; 0 if incomplete."""
    found = read_header(data)
    return 0 if found is None else found[2]


def _blocks(data: bytes | memoryview, pos: int) -> Iterator[tuple[int, int, int, int]]:
    """``(rows, data start, data end, block end)`` of each whole block from ``pos``."""
    while pos < len(data):
        try:
            rows, at = _read_long(data, pos)
            size, at = _read_long(data, at)
        except IndexError:
            return
        end = at + size + SYNC_BYTES
        if rows < 0 or size < 0 or end > len(data):
            return
        yield rows, at, at + size, end
        pos = end


def last_row_end(data: bytes) -> int:
    """Where the last whole block of ``data`` ends (``data`` starts at a block, or at the
    file's header: at least the header's end); 0 when nothing whole is in it."""
    start = 0
    if data[:4] == MAGIC:
        start = header_end(data)
        if not start:
            return 0
    ends = [block_end for *_, block_end in _blocks(data, start)]
    return ends[-1] if ends else start


def decode(data: bytes, schema: pa.Schema) -> pa.Table:
    """The rows of ``data`` (a header, then whole blocks) as ``schema``."""
    found = read_header(data)
    if found is None:
        raise ValueError("an Avro file cut inside its header")
    meta, sync, pos = found
    codec = meta.get("avro.codec", b"null").decode()
    plain = [MAGIC, _long(2)]
    for key, value in (("avro.schema", meta["avro.schema"]), ("avro.codec", b"null")):
        plain += [_long(len(key)), key.encode(), _long(len(value)), value]
    plain += [_long(0), sync]
    for rows, start, end, block_end in _blocks(data, pos):
        if data[end:block_end] != sync:
            raise ValueError(f"an Avro block at byte {start} does not end with the file's "
                             "sync marker")
        body = _uncompress(memoryview(data)[start:end], codec)
        plain += [_long(rows), _long(len(body)), body, sync]
    import fastavro

    records = list(fastavro.reader(io.BytesIO(b"".join(plain))))
    return pa.Table.from_pylist(records, schema=schema)


def _uncompress(block: memoryview, codec: str) -> bytes:
    if codec == "null":
        return bytes(block)
    if codec == "deflate":
        return zlib.decompress(block, -15)
    if codec == "snappy":
        body = block[:-4]
        size, _ = _read_varint(body)
        rows = pa.Codec("snappy").decompress(body, decompressed_size=size, asbytes=True)
        if zlib.crc32(rows) != struct.unpack(">I", block[-4:])[0]:
            raise ValueError("an Avro snappy block fails its CRC32")
        return rows
    if codec == "zstandard":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(block)
    raise ValueError(f"an Avro file with codec {codec!r}: rotsink reads null, deflate, "
                     "snappy and zstandard")


def _read_varint(data: memoryview) -> tuple[int, int]:
    """A plain (not zigzag) varint: snappy's uncompressed length."""
    n = shift = pos = 0
    while True:
        byte = data[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, pos
