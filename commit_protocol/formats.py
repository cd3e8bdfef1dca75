"""Arrow record batches <-> the bytes of part files, in formats Spark's own readers take.

Row formats (``jsonl``, ``csv``, ``text``) encode chunk by chunk: a part file stays open
across micro-batches, and the concatenation of the chunks is one valid file that
:func:`decode_rows` (and ``spark.read.<format>``) reads back row for row. Parquet is a bulk
format: :func:`write_parquet` writes one complete file.

Where Spark's readers need a non-default option or cannot restore a value exactly, the
format modules say so (:mod:`commit_protocol.formats_json`, ``formats_csv``,
``formats_text``); ``tests/spark/test_format_spark_compat.py`` pins each case.

The encoders run on executors and assume a schema the driver checked when the query
started (:mod:`datasource.schema_check`); the decoders run wherever committed files are
read. This module imports no polars (heavy) until a JSON or base64 encode needs it, and no
pyspark at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO

import pyarrow as pa

from commit_protocol.codecs import parquet_codec
from commit_protocol.errors import OptionError, SchemaMismatchError
from commit_protocol.formats_types import UnencodableValueError, is_nested

__all__ = [
    "BULK_FORMATS", "ROW_FORMATS", "UnencodableValueError", "decode_rows",
    "encode_rows", "iter_parquet", "read_parquet", "write_parquet",
]

ROW_FORMATS = ("jsonl", "csv", "text")
BULK_FORMATS = ("parquet",)



def encode_rows(fmt: str, batch: pa.RecordBatch | pa.Table, *, with_header: bool) -> bytes:
    """Encode one chunk of a row-format part file. Runs on executors.

    Parameters
    ----------
    fmt : str
        ``jsonl``, ``csv`` or ``text``; the schema must have passed
        :func:`datasource.schema_check.check_schema`.
    batch : pyarrow.RecordBatch or pyarrow.Table
        The rows of this chunk.
    with_header : bool
        ``csv`` only: start with the header line. Pass True for the first chunk of a
        file and only then; with zero rows the chunk is then just the header, so the
        caller's rule stays "the first chunk has the header".

    Returns
    -------
    bytes
        The chunk; ``b""`` for zero rows (except the csv header). Chunks concatenate.

    Raises
    ------
    UnencodableValueError
        ``text`` only: a value contains a line break.
    """
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    if fmt == "jsonl":
        from commit_protocol.formats_json import encode_jsonl

        return encode_jsonl(table)
    if fmt == "csv":
        from commit_protocol.formats_csv import encode_csv

        return encode_csv(table, with_header=with_header)
    if fmt == "text":
        from commit_protocol.formats_text import encode_text

        return encode_text(table)
    raise OptionError(f"format {fmt!r}: encode_rows handles {', '.join(ROW_FORMATS)}")


def decode_rows(fmt: str, data: bytes, schema: pa.Schema) -> pa.Table:
    """Decode a whole row-format file (concatenated chunks) into exactly ``schema``.

    The result has ``schema``'s types and column order and equals the encoded rows,
    except that ``text`` reads a null back as ``""``.

    Raises
    ------
    SchemaMismatchError
        ``csv`` only: the header names other columns.
    pyarrow.ArrowInvalid
        If ``data`` is not a file this module wrote for ``schema``.
    """
    if fmt == "jsonl":
        from commit_protocol.formats_json import decode_jsonl

        return decode_jsonl(data, schema)
    if fmt == "csv":
        from commit_protocol.formats_csv import decode_csv

        return decode_csv(data, schema)
    if fmt == "text":
        from commit_protocol.formats_text import decode_text

        return decode_text(data, schema)
    raise OptionError(f"format {fmt!r}: decode_rows handles {', '.join(ROW_FORMATS)}")


# Dictionary encoding pays for columns that repeat values. On columns of mostly distinct
# values (ids, free text, measurements) pyarrow's default dictionary fills its 1 MB page and
# falls back to plain mid-chunk: slower to write and, measured on such columns, 2-3x larger
# under zstd. parquet-mr (Spark's writer) drops a dictionary that does not shrink the data;
# this decides the same thing up front, from a sample of the first row group.
DICTIONARY_SAMPLE_ROWS = 10_000


def parquet_dictionary_columns(table: pa.Table) -> list[str]:
    """The Parquet column paths of ``table`` worth dictionary-encoding.

    A flat column qualifies when at most half of the non-null values among its first
    :data:`DICTIONARY_SAMPLE_ROWS` are distinct; every leaf of a nested column keeps
    pyarrow's default (dictionary on). For ``ParquetWriter(use_dictionary=...)``.
    """
    import io

    import pyarrow.parquet as pq

    leaves = io.BytesIO()  # the leaf paths pyarrow will write (``tags.list.element``, ...)
    pq.write_table(table.schema.empty_table(), leaves)
    paths = [c.path for c in pq.ParquetFile(leaves).schema]
    chosen = []
    for path in paths:
        top = path.split(".", 1)[0]
        column = table.column(top)
        if is_nested(column.type) or path != top:
            chosen.append(path)
            continue
        sample = column.slice(0, DICTIONARY_SAMPLE_ROWS)
        values = len(sample) - sample.null_count
        if values == 0 or 2 * _distinct(sample) <= values:
            chosen.append(path)
    return chosen


def _distinct(values: pa.ChunkedArray) -> int:
    import pyarrow.compute as pc

    try:
        return pc.count_distinct(values).as_py()
    except pa.ArrowNotImplementedError:  # no hash kernel for the type: keep the dictionary
        return 0


def write_parquet(sink: str | IO[bytes] | pa.NativeFile,
                  table_or_batches: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], *,
                  schema: pa.Schema, compression: str = "snappy",
                  compression_level: int | None = None) -> None:
    """Write one complete Parquet file (footer included) to ``sink``. Runs on executors.

    Timestamps are stored as INT64 microseconds (never INT96) with their UTC flag, so
    Spark reads zoned ones as ``timestamp`` and zone-less ones as ``timestamp_ntz``.
    ``sink`` is left open when it is a file object: the caller owns it.

    Raises
    ------
    OptionError
        For a codec outside :data:`~commit_protocol.codecs.PARQUET_COMPRESSIONS` or a level
        the codec refuses.
    SchemaMismatchError
        If the data's schema differs from ``schema``.
    """
    import pyarrow.parquet as pq

    codec = parquet_codec(compression, compression_level)
    writer = pq.ParquetWriter(sink, schema, compression=codec,
                              compression_level=compression_level,
                              use_deprecated_int96_timestamps=False)
    with writer:
        for part in _parts(table_or_batches):
            writer.write(_conform(part, schema))


def _conform(part: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table | pa.RecordBatch:
    """``part`` as ``schema``: equal, or differing only where an exact cast bridges it
    (nullability flags, which Spark's batches and schemas do not always agree on)."""
    if part.schema.equals(schema):
        return part
    try:
        if part.schema.names != schema.names:
            raise ValueError("column names differ")
        return part.cast(schema)
    except (pa.ArrowException, ValueError) as e:
        raise SchemaMismatchError(f"parquet: expected data schema {schema}, found "
                                  f"{part.schema}: {e}") from e


def _parts(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]) -> Iterable:
    return [data] if isinstance(data, (pa.Table, pa.RecordBatch)) else data


def read_parquet(data_or_file: bytes | str | IO[bytes] | pa.NativeFile,
                 schema: pa.Schema | None = None, *, decryption_properties=None) -> pa.Table:
    """Read a whole Parquet file into exactly ``schema`` (columns selected by name, cast), or
    as written when ``schema`` is None.

    Raises
    ------
    SchemaMismatchError
        If a column of ``schema`` is missing from the file.
    """
    table = _open_parquet(data_or_file, schema, decryption_properties).read()
    return table if schema is None else table.select(schema.names).cast(schema)


# Rows per batch a reader hands on: small enough that Spark converts one batch while the
# next decodes (measured: 500,000-row batches read 30% slower), large enough that per-batch
# costs vanish (pyarrow's own default for Parquet).
READ_BATCH_ROWS = 65_536


def iter_parquet(data_or_file: bytes | str | IO[bytes] | pa.NativeFile, schema: pa.Schema, *,
                 decryption_properties=None) -> Iterator[pa.RecordBatch]:
    """:func:`read_parquet` as a stream of batches of up to :data:`READ_BATCH_ROWS` rows:
    a reader hands rows on while later ones still decode, and never holds a whole decoded
    file. Raises like :func:`read_parquet`, at the first ``next()``."""
    parquet = _open_parquet(data_or_file, schema, decryption_properties)
    for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS, columns=schema.names):
        yield batch.select(schema.names).cast(schema)


def _open_parquet(data_or_file, schema: pa.Schema | None, decryption_properties):
    import pyarrow.parquet as pq

    source = pa.BufferReader(data_or_file) if isinstance(
        data_or_file, (bytes, bytearray, memoryview)) else data_or_file
    parquet = pq.ParquetFile(source, decryption_properties=decryption_properties)
    if schema is not None:
        held = parquet.schema_arrow.names
        missing = [name for name in schema.names if name not in held]
        if missing:
            raise SchemaMismatchError(f"parquet file has no column {missing}; it holds {held}")
    return parquet
