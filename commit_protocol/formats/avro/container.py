"""The object container file's framing: the header (magic, metadata, sync marker), Avro's
longs, and the blocks that follow the header, found without decoding a row."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pyarrow as pa

from commit_protocol.formats.avro.schema import avro_schema

MAGIC = b"Obj\x01"
SYNC_BYTES = 16
# the ``compression`` option's values, and the codec names Avro files carry
CODECS = {"snappy": "snappy", "deflate": "deflate", "zstd": "zstandard", "none": "null"}


def sync_marker(file_name: str) -> bytes:
    """The sync marker of the file finalized as ``file_name``."""
    return hashlib.sha256(b"rotsink avro sync marker\0" + file_name.encode()).digest()[:16]


def header(schema: pa.Schema, compression: str, sync: bytes) -> bytes:
    meta = {"avro.schema": json.dumps(avro_schema(schema), separators=(",", ":")).encode(),
            "avro.codec": CODECS[compression].encode()}
    parts = [MAGIC, write_long(len(meta))]
    for key, value in meta.items():
        parts += [write_long(len(key)), key.encode(), write_long(len(value)), value]
    return b"".join([*parts, write_long(0), sync])


def write_long(n: int) -> bytes:
    """Avro's long: zigzag, then a varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_long(data: bytes | memoryview, pos: int) -> tuple[int, int]:
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
            count, pos = read_long(data, pos)
            if count == 0:
                break
            if count < 0:  # a block of the map with its byte size
                count = -count
                _, pos = read_long(data, pos)
            for _ in range(count):
                size, pos = read_long(data, pos)
                key = bytes(data[pos:pos + size]).decode()
                pos += size
                size, pos = read_long(data, pos)
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


def blocks(data: bytes | memoryview, pos: int) -> Iterator[tuple[int, int, int, int]]:
    """``(rows, data start, data end, block end)`` of each whole block from ``pos``."""
    while pos < len(data):
        try:
            rows, at = read_long(data, pos)
            size, at = read_long(data, at)
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
    ends = [block_end for *_, block_end in blocks(data, start)]
    return ends[-1] if ends else start
