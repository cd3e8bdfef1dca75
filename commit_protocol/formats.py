"""Arrow record batches <-> the bytes of part files, in formats Spark's own readers take.

Row formats (``jsonl``, ``csv``, ``text``) encode chunk by chunk: a part file stays open
across micro-batches, and the concatenation of the chunks is one valid file that
:func:`decode_rows` (and ``spark.read.<format>``) reads back row for row. Parquet is a bulk
format: :func:`write_parquet` writes one complete file.

Where Spark's readers need a non-default option or cannot restore a value exactly, the
format modules say so (:mod:`commit_protocol.formats_json`, ``formats_csv``,
``formats_text``); ``tests/spark/test_format_spark_compat.py`` pins each case.

``check_schema`` runs on the driver when a query starts; the encoders run on executors and
assume a checked schema; the decoders run wherever committed files are read. This module
imports no polars (heavy) until a JSON or base64 encode needs it, and no pyspark at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO

import pyarrow as pa

from commit_protocol.errors import OptionError, SchemaMismatchError
from commit_protocol.formats_types import UnencodableValueError, is_list, is_nested, is_stringlike

__all__ = [
    "BULK_FORMATS", "ROW_FORMATS", "UnencodableValueError", "check_schema", "decode_rows",
    "encode_rows", "read_parquet", "write_parquet",
]

ROW_FORMATS = ("jsonl", "csv", "text")
BULK_FORMATS = ("parquet",)

# Spark's Parquet reader ships no brotli codec; "lz4" means LZ4_RAW in pyarrow.
PARQUET_COMPRESSIONS = ("none", "snappy", "gzip", "zstd", "lz4", "lz4_raw")


def check_schema(fmt: str, schema: pa.Schema) -> None:
    """Fail unless ``fmt`` can hold ``schema`` exactly. Runs on the driver, once per query.

    Parameters
    ----------
    fmt : str
        One of :data:`ROW_FORMATS` or :data:`BULK_FORMATS`.
    schema : pyarrow.Schema
        The Arrow schema of the rows to write (partition columns excluded).

    Raises
    ------
    OptionError
        Naming the format and the offending column and type: an unknown format, no
        columns, a duplicate column name, a type no format supports, a nested type in
        ``csv``, anything but one string column in ``text``.

    Examples
    --------
    >>> check_schema("csv", pa.schema([("tags", pa.list_(pa.string()))]))
    Traceback (most recent call last):
    ...
    commit_protocol.errors.OptionError: format csv cannot hold column 'tags' of type \
list<item: string>: CSV has no nested types (list, struct, map); use format jsonl or parquet
    """
    _check_format(fmt)
    if len(schema) == 0:
        raise OptionError(f"format {fmt}: the schema has no columns; nothing to write")
    duplicates = sorted({n for n in schema.names if schema.names.count(n) > 1})
    if duplicates:
        raise OptionError(f"format {fmt}: duplicate column names {duplicates}")
    for field in schema:
        _check_type(fmt, field.name, field.type)
    if fmt == "text" and (len(schema) != 1 or not is_stringlike(schema.field(0).type)):
        found = ", ".join(f"{f.name!r} {f.type}" for f in schema)
        raise OptionError(f"format text holds exactly one string column; found {found}: "
                          "select one string column (e.g. to_json(struct(*))) or use jsonl")


def _check_format(fmt: str) -> None:
    if fmt not in ROW_FORMATS + BULK_FORMATS:
        raise OptionError(f"format {fmt!r}: expected one of "
                          f"{', '.join(ROW_FORMATS + BULK_FORMATS)}")


def _check_type(fmt: str, column: str, t: pa.DataType) -> None:
    if fmt == "csv" and is_nested(t):
        raise OptionError(f"format csv cannot hold column {column!r} of type {t}: CSV has no "
                          "nested types (list, struct, map); use format jsonl or parquet")
    if pa.types.is_struct(t):
        for f in t:
            _check_type(fmt, f"{column}.{f.name}", f.type)
    elif is_list(t):
        _check_type(fmt, f"{column}[]", t.value_type)
    elif pa.types.is_map(t):
        if is_nested(t.key_type):
            raise OptionError(f"format {fmt} cannot hold column {column!r} of type {t}: map "
                              "keys must be primitive")
        _check_type(fmt, f"{column}.key", t.key_type)
        _check_type(fmt, f"{column}.value", t.item_type)
    elif not _is_supported_leaf(t):
        raise OptionError(f"format {fmt} cannot hold column {column!r} of type {t}: "
                          "supported are the types Spark sends (boolean, signed integers, "
                          "float32/64, string, binary, date32, timestamp, decimal128, null)")


def _is_supported_leaf(t: pa.DataType) -> bool:
    return (pa.types.is_boolean(t) or pa.types.is_signed_integer(t) or pa.types.is_null(t)
            or pa.types.is_float32(t) or pa.types.is_float64(t) or is_stringlike(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_date32(t)
            or pa.types.is_timestamp(t) or pa.types.is_decimal128(t))


def encode_rows(fmt: str, batch: pa.RecordBatch | pa.Table, *, with_header: bool) -> bytes:
    """Encode one chunk of a row-format part file. Runs on executors.

    Parameters
    ----------
    fmt : str
        ``jsonl``, ``csv`` or ``text``; the schema must have passed :func:`check_schema`.
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
        For a codec outside :data:`PARQUET_COMPRESSIONS` or a level the codec refuses.
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


def parquet_codec(compression: str, level: int | None) -> str:
    """pyarrow's codec name, after checking the pair (pyarrow would fail only on write)."""
    codec = compression.lower()
    if codec not in PARQUET_COMPRESSIONS:
        raise OptionError(f"compression={compression!r} for format parquet: expected one of "
                          f"{', '.join(PARQUET_COMPRESSIONS)}")
    codec = "lz4" if codec == "lz4_raw" else codec
    if level is None:
        return codec
    if codec == "none" or not pa.Codec.supports_compression_level(codec):
        raise OptionError(f"compression={compression!r} compression.level={level!r} for format "
                          "parquet: this codec takes no level")
    low, high = pa.Codec.minimum_compression_level(codec), pa.Codec.maximum_compression_level(codec)
    if not low <= level <= high:
        raise OptionError(f"compression={compression!r} compression.level={level!r} for format "
                          f"parquet: expected {low}..{high}")
    return codec


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
    import pyarrow.parquet as pq

    source = pa.BufferReader(data_or_file) if isinstance(
        data_or_file, (bytes, bytearray, memoryview)) else data_or_file
    table = pq.ParquetFile(source, decryption_properties=decryption_properties).read()
    if schema is None:
        return table
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise SchemaMismatchError(f"parquet file has no column {missing}; it holds "
                                  f"{table.column_names}")
    return table.select(schema.names).cast(schema)
