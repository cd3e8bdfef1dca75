"""Parquet, the first bulk format: files written whole at a roll (:class:`ParquetWriter`, with
the dictionary columns chosen here and Parquet Modular Encryption), read back batch by batch
wherever committed files are read.

pyarrow's writer stores timestamps as INT64 microseconds with their UTC flag (never INT96),
so Spark reads zoned ones as ``timestamp`` and zone-less ones as ``timestamp_ntz``
(``tests/spark/test_format_spark_compat.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

import pyarrow as pa

from commit_protocol.formats import READ_BATCH_ROWS
from commit_protocol.formats.types import is_nested, require_columns
from commit_protocol.formats.units import ColumnStats, Unit

# Dictionary encoding pays for columns that repeat values. On columns of mostly distinct
# values (ids, free text, measurements) pyarrow's default dictionary fills its 1 MB page and
# falls back to plain mid-chunk: slower to write and, measured on such columns, 2-3x larger
# under zstd. parquet-mr (Spark's writer) drops a dictionary that does not shrink the data;
# this decides the same thing up front, from a sample of the first row group.
DICTIONARY_SAMPLE_ROWS = 10_000
PARQUET_FIELD_ID = b"PARQUET:field_id"  # the Arrow field metadata pyarrow writes as the id


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


def check_rows(batch: pa.RecordBatch) -> None:
    """Parquet holds every value Spark sends: nothing to refuse."""


class ParquetWriter:
    """Writes tables into one Parquet file on an open handle (the finished file of a roll)."""

    def __init__(self, handle: IO[bytes], table: pa.Table, config: Any, *,
                 encrypt: bool) -> None:
        import pyarrow.parquet as pq

        # A table's readers (pyiceberg's scan) refuse a file whose stored Arrow schema holds
        # a zone other than UTC, as Spark's session zone is: the same instants, said in UTC
        self._utc = utc_schema(table.schema) if config.table_format is not None else None
        schema = table.schema if self._utc is None else self._utc
        if config.field_ids:  # an Iceberg table's (commit_protocol.tables.iceberg.ids)
            schema = with_field_ids(schema, dict(config.field_ids))
        self._writer = pq.ParquetWriter(handle, schema, compression=config.compression,
                                        compression_level=config.compression_level,
                                        use_dictionary=parquet_dictionary_columns(table),
                                        **(_encryption(config) if encrypt else {}))

    def write(self, table: pa.Table, *, rows_per_group: int) -> None:
        if self._utc is not None:
            table = table.cast(self._utc)  # a zone's change: metadata only
        self._writer.write_table(table, row_group_size=rows_per_group)

    def close(self) -> None:
        self._writer.close()

    def footer(self) -> bytes:
        """The closed file's footer, as a Parquet metadata file (``pq.read_metadata`` reads
        it): a table that lists the file takes its statistics from it, not from storage."""
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        self._writer.writer.metadata.write_metadata_file(sink)
        return sink.getvalue().to_pybytes()


def with_field_ids(schema: pa.Schema, ids: Mapping[str, int]) -> pa.Schema:
    """``schema`` with each field's id (by path) in its metadata, where pyarrow's Parquet
    writer takes it; fields without one keep none.

    >>> print(with_field_ids(pa.schema([("id", pa.int64())]), {"id": 7}).field("id").metadata)
    {b'PARQUET:field_id': b'7'}
    """
    def field(f: pa.Field, path: str) -> pa.Field:
        metadata = dict(f.metadata or {})
        if path in ids:
            metadata[PARQUET_FIELD_ID] = str(ids[path]).encode()
        return pa.field(f.name, kind(f.type, f"{path}."), f.nullable, metadata or None)

    def kind(t: pa.DataType, prefix: str) -> pa.DataType:
        if pa.types.is_struct(t):
            return pa.struct([field(c, f"{prefix}{c.name}") for c in t])
        if pa.types.is_large_list(t):
            return pa.large_list(field(t.value_field, f"{prefix}element"))
        if pa.types.is_list(t):
            return pa.list_(field(t.value_field, f"{prefix}element"))
        if pa.types.is_map(t):
            return pa.map_(field(t.key_field, f"{prefix}key"),
                           field(t.item_field, f"{prefix}value"))
        return t

    return pa.schema([field(f, f.name) for f in schema], metadata=schema.metadata)


def utc_schema(schema: pa.Schema) -> pa.Schema | None:
    """``schema`` with every zoned timestamp in UTC (nested ones too); None when it has no
    zone other than UTC.

    >>> utc_schema(pa.schema([("t", pa.timestamp("us", "Europe/Paris"))]))
    t: timestamp[us, tz=UTC]
    """
    def utc(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(kind) and kind.tz not in (None, "UTC"):
            return pa.timestamp(kind.unit, "UTC")
        if pa.types.is_struct(kind):
            return pa.struct([f.with_type(utc(f.type)) for f in kind])
        if pa.types.is_large_list(kind):
            return pa.large_list(kind.value_field.with_type(utc(kind.value_type)))
        if pa.types.is_list(kind):
            return pa.list_(kind.value_field.with_type(utc(kind.value_type)))
        if pa.types.is_map(kind):
            return pa.map_(kind.key_field.with_type(utc(kind.key_type)),
                           kind.item_field.with_type(utc(kind.item_type)))
        return kind

    converted = pa.schema([f.with_type(utc(f.type)) for f in schema], metadata=schema.metadata)
    return None if converted.equals(schema) else converted


def open_writer(handle: IO[bytes], table: pa.Table, config: Any, *,
                encrypt: bool = True) -> ParquetWriter:
    """The writer of one finished file; ``table`` is its first rows (the dictionary columns
    are chosen on them). ``encrypt=False`` writes plaintext on an encrypted path (a size
    estimate)."""
    return ParquetWriter(handle, table, config, encrypt=encrypt and config.encrypted)


def _encryption(config: Any) -> dict:
    """Parquet Modular Encryption with the writing key as footer key."""
    from commit_protocol.crypto.parquet import encryption_properties

    keys = config.keys
    key_id, _ = keys.write_key()
    return {"encryption_properties": encryption_properties(keys.ring(), key_id)}


def read_parquet(data_or_file: bytes | str | IO[bytes] | pa.NativeFile,
                 schema: pa.Schema | None = None, *, decryption_properties=None) -> pa.Table:
    """Read a whole Parquet file into exactly ``schema`` (columns selected by name, cast), or
    as written when ``schema`` is None.

    Raises
    ------
    SchemaMismatchError
        If a column of ``schema`` is missing from the file.
    """
    units = ParquetUnits(data_or_file, decryption_properties=decryption_properties)
    if schema is None:
        return units.file.read()
    return pa.Table.from_batches(list(units.batches(range(len(units.units)), schema)),
                                 schema=schema)


def iter_parquet(data_or_file: bytes | str | IO[bytes] | pa.NativeFile, schema: pa.Schema, *,
                 decryption_properties=None) -> Iterator[pa.RecordBatch]:
    """:func:`read_parquet` as a stream of batches of up to :data:`READ_BATCH_ROWS` rows:
    a reader hands rows on while later ones still decode, and never holds a whole decoded
    file. Raises like :func:`read_parquet`, at the first ``next()``."""
    units = ParquetUnits(data_or_file, decryption_properties=decryption_properties)
    yield from units.batches(range(len(units.units)), schema)


read_file = read_parquet  # the bulk-format interface (commit_protocol.reading)
iter_file = iter_parquet

class ParquetUnits:
    """An open Parquet file read row group by row group: its units (offsets, rows, statistics
    of its top-level flat columns) and their batches (see :mod:`commit_protocol.formats.units`).
    """

    def __init__(self, source: bytes | str | IO[bytes] | pa.NativeFile, *,
                 decryption_properties: Any = None) -> None:
        import pyarrow.parquet as pq

        if isinstance(source, (bytes, bytearray, memoryview)):
            source = pa.BufferReader(source)
        # Column chunks are read whole: one ranged GET each on an object store. Reading them
        # through a 1 MB buffer instead (pyarrow's buffer_size) cost a GET per megabyte and
        # saved no memory (measured: +125-136 MB for a 2.3M-row row group either way).
        self.file = pq.ParquetFile(source, decryption_properties=decryption_properties)
        self.schema = self.file.schema_arrow
        metadata = self.file.metadata
        flat = _flat_leaves(self.file)
        self.units = [_row_group(metadata.row_group(i), i, flat)
                      for i in range(metadata.num_row_groups)]

    def batches(self, indices: Iterable[int], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The rows of row groups ``indices`` as ``schema``, in batches of up to
        :data:`READ_BATCH_ROWS` rows; ``SchemaMismatchError`` for a missing column."""
        require_columns("parquet", self.file.schema_arrow.names, schema)
        groups = list(indices)
        if not groups:
            return
        for batch in self.file.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=groups,
                                            columns=schema.names):
            yield batch.select(schema.names).cast(schema)


open_units = ParquetUnits


def _flat_leaves(parquet) -> dict[int, str]:
    """Leaf column index -> name, for top-level columns that are one flat leaf (the only ones
    whose statistics a filter on a column can use); names shared with a nested leaf's path
    are left out."""
    arrow = parquet.schema_arrow
    flat = {f.name for f in arrow if not is_nested(f.type)}
    paths = [parquet.schema.column(i).path for i in range(len(parquet.schema))]
    return {i: path for i, path in enumerate(paths) if path in flat and paths.count(path) == 1}


def _row_group(group, index: int, flat: dict[int, str]) -> Unit:
    starts, length, stats = [], 0, {}
    for i in range(group.num_columns):
        column = group.column(i)
        start = column.data_page_offset
        if column.has_dictionary_page and 0 < column.dictionary_page_offset < start:
            start = column.dictionary_page_offset
        starts.append(start)
        length += column.total_compressed_size
        if i in flat and column.is_stats_set:
            stats[flat[i]] = _column_stats(column.statistics)
    return Unit(index, min(starts, default=0), length, group.num_rows, stats)


def _column_stats(statistics) -> ColumnStats:
    null_count = statistics.null_count if statistics.has_null_count else None
    if not statistics.has_min_max:
        return ColumnStats(null_count=null_count)
    try:
        return ColumnStats(statistics.min, statistics.max, null_count)
    except (ValueError, UnicodeDecodeError, pa.ArrowException):  # a value Python cannot hold
        return ColumnStats(null_count=null_count)
