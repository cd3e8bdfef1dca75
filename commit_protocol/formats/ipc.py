"""Staged rows of bulk formats: Arrow IPC streams, appended one per task chunk.

A bulk file (Parquet) cannot be appended to, so a slot's in-progress rows are staged in an
appendable form and encoded into the finished file when the slot rolls. Each append is one
complete IPC stream (schema, batches, end marker): independently decodable, like the row
codecs' members, so every committed offset is a clean cut and the concatenation of the
streams decodes back to the rows. Streams are uncompressed: staging and converting then
cost the least CPU (measured: 0.09 s to stage and 0.21 s to convert 2M rows, against 0.19 s
and 0.34 s with zstd buffers); staged files live only until their slot rolls.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa


def encode(table: pa.Table, *, with_header: bool = False) -> bytes:
    """``table`` as one IPC stream (``b""`` for no rows: no empty streams)."""
    if table.num_rows == 0:
        return b""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def stream_size(batch: pa.RecordBatch) -> int:
    """The length of :func:`encode` of ``batch`` (one batch) without encoding it: the
    schema message, the batch's message with its padded buffers, the end marker.

    >>> batch = pa.record_batch({"id": [1, 2, 3], "name": ["a", None, "c"]})
    >>> stream_size(batch) == len(encode(pa.Table.from_batches([batch])))
    True
    """
    if batch.num_rows == 0:
        return 0
    return len(batch.schema.serialize()) + pa.ipc.get_record_batch_size(batch) + _END_MARKER


_END_MARKER = 8  # the continuation token and a zero length: the end of a stream


def iter_batches(data: bytes, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The batches of concatenated streams, as ``schema`` (by name, cast)."""
    source = pa.BufferReader(data)
    while source.tell() < len(data):
        with pa.ipc.open_stream(source) as reader:
            for batch in reader:
                yield batch.select(schema.names).cast(schema)


def decode(data: bytes, schema: pa.Schema) -> pa.Table:
    """The rows of concatenated streams as one table of ``schema``."""
    return pa.Table.from_batches(list(iter_batches(data, schema)), schema=schema)


def last_row_end(data: bytes) -> int:
    """Staged files are read as IPC streams, never cut into blocks of rows."""
    raise NotImplementedError("staged rows are read stream by stream")
