"""Decoding Avro blocks for rotsink's readers: each block is uncompressed and checked, and
fastavro decodes the rows of a ``null``-codec container made of them."""

from __future__ import annotations

import io
import struct
import zlib

import pyarrow as pa

from commit_protocol.formats.avro.container import MAGIC, blocks, read_header, write_long


def decode(data: bytes, schema: pa.Schema) -> pa.Table:
    """The rows of ``data`` (a header, then whole blocks) as ``schema``."""
    found = read_header(data)
    if found is None:
        raise ValueError("an Avro file cut inside its header")
    meta, sync, pos = found
    codec = meta.get("avro.codec", b"null").decode()
    plain = [MAGIC, write_long(2)]
    for key, value in (("avro.schema", meta["avro.schema"]), ("avro.codec", b"null")):
        plain += [write_long(len(key)), key.encode(), write_long(len(value)), value]
    plain += [write_long(0), sync]
    for rows, start, end, block_end in blocks(data, pos):
        if data[end:block_end] != sync:
            raise ValueError(f"an Avro block at byte {start} does not end with the file's "
                             "sync marker")
        body = _uncompress(memoryview(data)[start:end], codec)
        plain += [write_long(rows), write_long(len(body)), body, sync]
    import fastavro

    records = list(fastavro.reader(io.BytesIO(b"".join(plain))))
    try:
        return pa.Table.from_pylist(records, schema=schema)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        # a file written before its columns widened (schema.evolution=widenTypes): a date
        # read as a timestamp; its own values, then cast as Arrow casts them
        found = pa.Table.from_pylist(records)
        return pa.Table.from_arrays(
            [found.column(f.name).cast(f.type) if f.name in found.column_names
             else pa.nulls(found.num_rows, f.type) for f in schema], schema=schema)


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
