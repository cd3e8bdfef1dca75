"""Encoding Arrow rows into Avro blocks, vectorized: no Python per row.

Each column becomes, per row, the bytes of its value (a union index, a zigzag varint, fixed
bytes, a length and the bytes), built in numpy from Arrow's buffers, and pyarrow joins the
columns row by row into the block (a struct's fields row by row, an array's or a map's items
per row by their offsets). The block is then compressed by the file's codec.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.formats.avro.container import header, sync_marker, write_long
from commit_protocol.formats.avro.schema import fixed_size

# union indexes as varints: Spark writes a nullable column as [type, "null"]
_VALUE, _NULL = 0x00, 0x02
_STEPS = [np.uint64(1) << np.uint64(7 * k) for k in range(10)]


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
    return b"".join([head, write_long(table.num_rows), write_long(len(data)), data, sync])


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
