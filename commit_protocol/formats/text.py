"""Text: one string column, one ``\\n``-terminated line per row, as Spark's text source.

A null is written as an empty line and reads back as ``""`` (Spark's text writer and
reader do the same). A value holding ``\\n`` or ``\\r`` is refused rather than written:
Spark's reader splits lines at both, so the row would come back as several rows.
Runs on executors (encode) and wherever committed files are read (decode).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.formats.arrow import concat_bytes, contiguous, join
from commit_protocol.vocabulary.errors import UnencodableValueError


def encode(table: pa.Table, *, with_header: bool = False) -> bytes:
    """The lines of ``table``'s single string column, which :func:`check_rows` passed
    (``encode_rows`` checks first)."""
    if table.num_rows == 0:
        return b""
    return concat_bytes(join(contiguous(table.column(0)).cast(pa.large_string()), "\n"))


def check_rows(batch: pa.RecordBatch | pa.Table) -> None:
    """Refuse a value holding a line break (the message names the column and how many)."""
    if batch.num_rows:
        column = batch.column(0)
        values = contiguous(column) if isinstance(column, pa.ChunkedArray) else column
        _check_lines(values.cast(pa.large_string()), batch.schema.names[0])


def _check_lines(values: pa.Array, column: str) -> None:
    breaks = pc.match_substring_regex(values, r"[\r\n]")
    if pc.any(breaks).as_py():
        count = pc.sum(breaks.cast(pa.int64())).as_py()
        raise UnencodableValueError(
            f"format text: column {column!r} has {count} value(s) with a line break, "
            "which Spark's text reader would split into several rows; use format jsonl or csv",
            column=column, reason="line_break", rows=breaks,
            detail=f"format text: a line break in column {column!r}, which Spark's text "
                   "reader would split into several rows; format jsonl or csv keep it")


def decode(data: bytes, schema: pa.Schema) -> pa.Table:
    """Split :func:`encode` output into rows of ``schema``'s single string column.

    A last line without ``\\n`` still counts as a row, as in Spark's reader.
    """
    if not data:
        return schema.empty_table()
    body = data[:-1] if data.endswith(b"\n") else data
    # cast validates UTF-8, split_pattern splits in C++: no Python loop over lines
    whole = pa.array([body], pa.large_binary()).cast(pa.large_string())
    lines = pc.split_pattern(whole, "\n").flatten()
    return pa.Table.from_arrays([lines.cast(schema.field(0).type)], schema=schema)


def last_row_end(data: bytes) -> int:
    """Where the last whole row of ``data`` (rows from its start) ends: after its line break
    (0: none ends in ``data``). Every row is one line."""
    return data.rfind(b"\n") + 1
