"""Row files (JSON lines, CSV, text) decoded block by block.

A row file's plaintext is cut into *blocks* of whole rows of about :data:`BLOCK_BYTES`
(where a row ends is the format's business: ``last_row_end`` of its module; CSV's quoted
values may hold line breaks), and each block is decoded on its own. So a read task holds one
block and its decoded rows, whatever the file's size. A row longer than a block makes its
block longer, never an error.

Uncompressed, unencrypted files of a format whose rows are single lines (``Format.splittable``)
are also read in *splits*, byte ranges of one file read by different tasks, as Spark's line
reader does: a split reads the rows that *start* in its range, the last of them to its end.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import BinaryIO

import pyarrow as pa

from commit_protocol.formats import FORMATS, READ_BATCH_ROWS, decode_rows
from commit_protocol.reading.conform import conform, held
from commit_protocol.reading.files import CommittedFile, Layout
from commit_protocol.reading.inputs import open_input
from commit_protocol.reading.plaintext import open_plaintext
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import IntegrityError

# Decoded rows take several times their text. Measured on JSON lines: blocks of 2-8 MB decode
# as fast as each other (0.36-0.42 s per 1.5M rows; 1 MB blocks 0.55 s), and with 8 MB blocks
# a reading process grew 73-107 MB against 28-30 MB with 1 MB ones (the allocator keeps the
# larger freed buffers).
BLOCK_BYTES = 4 << 20


def row_batches(storage: Storage, f: CommittedFile, *, layout: Layout, schema: pa.Schema,
                ring: Mapping[str, bytes] | None, start: int = 0, end: int | None = None,
                block_bytes: int = BLOCK_BYTES) -> Iterator[pa.RecordBatch]:
    """The rows of ``f``'s committed bytes from offset ``start`` as ``schema``.

    ``end`` (a split, splittable files only): the rows that start in ``[start, end)``, where
    ``start`` and ``end`` are any byte offsets. Otherwise ``start`` is a committed offset and
    every row from there to the committed length is read.
    """
    if end is not None:
        stream, stop = _split_stream(storage, f, start, end)
        blocks = row_blocks(stream, layout.format, block_bytes=block_bytes, stop=stop)
    else:
        stream = open_plaintext(storage, f, layout=layout, ring=ring, start=start)
        blocks = row_blocks(stream, layout.format, block_bytes=block_bytes)
    # A file's own header (CSV) goes before every later block: a file written before a
    # schema change names fewer columns than ``schema``.
    header = None if start == 0 else _header(storage, f, layout=layout, ring=ring)
    with stream:
        for block in blocks:
            if header is None:
                header = block[:_header_end(layout.format, block)]
                data = block
            else:
                data = header + block
            table = _decode(f, layout.format, data, schema, start)
            if not table.schema.equals(schema):  # an older schema's file: fill in the rest
                readable = held(schema, table.schema, added=layout.added_columns, what=f.path)
                table = table.select(readable.names)
                yield from (conform(b, schema)
                            for b in table.to_batches(max_chunksize=READ_BATCH_ROWS))
                continue
            yield from table.to_batches(max_chunksize=READ_BATCH_ROWS)


def _header_end(fmt: str, block: bytes) -> int:
    """The length of the header ``block`` (a file's first) starts with (CSV's header line,
    Avro's header); 0 for formats without one, or while ``block`` holds only part of it."""
    if not FORMATS[fmt].header:
        return 0
    return int(FORMATS[fmt].implementation().header_end(block))


def _header(storage: Storage, f: CommittedFile, *, layout: Layout,
            ring: Mapping[str, bytes] | None) -> bytes:
    """The header line of ``f`` (read from its start), or ``b""``."""
    if not FORMATS[layout.format].header:
        return b""
    with open_plaintext(storage, f, layout=layout, ring=ring) as stream:
        first = stream.read(64 << 10)
        while first and not _header_end(layout.format, first):
            more = stream.read(64 << 10)
            if not more:
                break
            first += more
    return first[:_header_end(layout.format, first)]


def splittable(f: CommittedFile, layout: Layout) -> bool:
    """Whether tasks may read byte ranges of ``f``: plain bytes (no codec, no encryption) of a
    format whose rows are lines."""
    return (FORMATS[layout.format].splittable and not layout.encrypted
            and layout.compression == "none" and not f.staged)


def row_blocks(stream: BinaryIO, fmt: str, *, block_bytes: int = BLOCK_BYTES,
               stop: int | None = None) -> Iterator[bytes]:
    """Whole rows of ``stream`` (from its position), about ``block_bytes`` at a time.

    ``stop`` (splittable formats): only the rows that start within the stream's first
    ``stop`` bytes; the last of them is read to its end.
    """
    if stop is not None and stop <= 0:
        return
    last_row_end = FORMATS[fmt].implementation().last_row_end
    pending, consumed = b"", 0  # consumed: stream bytes before pending[0]
    while True:
        chunk = stream.read(block_bytes)
        if not chunk:
            break
        data = pending + chunk if pending else chunk
        if stop is not None and consumed + len(data) >= stop:
            cut = data.find(b"\n", stop - consumed - 1)
            if cut >= 0:
                yield data[:cut + 1]
                return
            pending = data
            continue
        end = last_row_end(data)
        if end:
            yield data[:end]
        pending, consumed = data[end:], consumed + end
    if pending:  # a last row without its line break (a file not written by rotsink)
        yield pending


def _split_stream(storage: Storage, f: CommittedFile, start: int, end: int
                  ) -> tuple[BinaryIO, int]:
    """A stream positioned at the first row that starts at or after ``start``, and how many
    of its bytes reach ``end`` (rows starting there belong to this split)."""
    stream = open_input(storage, f)
    first = 0
    if start > 0:
        stream.seek(start - 1)
        skipped = start - 1
        while True:  # skip the rest of the row the previous split reads to its end
            chunk = stream.read(BLOCK_BYTES)
            if not chunk:
                first = f.length
                break
            found = chunk.find(b"\n")
            if found >= 0:
                first = skipped + found + 1
                break
            skipped += len(chunk)
    stream.seek(first)
    return stream, max(0, min(end, f.length) - first)


def _decode(f: CommittedFile, fmt: str, data: bytes, schema: pa.Schema,
            start: int) -> pa.Table:
    try:
        return decode_rows(fmt, data, schema)
    except (ValueError, pa.ArrowException) as e:
        where = f" from byte {start}" if start else ""
        raise IntegrityError(f"{f.path}: cannot decode {fmt} data{where} "
                             f"({type(e).__name__}: {e})") from e
