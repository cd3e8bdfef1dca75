"""ORC, the second bulk format: written whole at a roll through pyarrow's ORC writer, in the
form Spark's own ORC writer gives each type, so ``spark.read.orc`` reads exactly the rows.

What pyarrow would write differently from Spark, and what this module does about it
(``tests/spark/test_orc_spark.py`` pins each case against Spark's reader):

* **timestamp_ntz.** Spark writes it as an ORC ``bigint`` of microseconds with the type
  attribute ``spark.sql.catalyst.type=timestamp_ntz``, and reads a plain ORC ``timestamp`` as a
  zoned ``timestamp``. pyarrow writes an Arrow field's metadata as ORC type attributes, so
  zone-less timestamps are written exactly as Spark does (nested ones too).
* **Dates before 1582-10-15.** ORC files, Spark's and Hive's, count days in the hybrid
  Julian/Gregorian calendar, and Spark's reader converts them to the proleptic Gregorian
  calendar it uses: such dates are converted to the hybrid count when written (Spark's
  ``rebaseGregorianToJulianDays``) and back when rotsink reads them. The ten proleptic dates
  1582-10-05..14 do not exist in the hybrid calendar: refused.
* **Zoned timestamps** are ORC ``timestamp with local time zone`` (an instant) as pyarrow
  writes them. Two ranges cannot be written faithfully and are refused when staged, naming the
  column and value: before 1970 with a fraction of a second (pyarrow stores a negative
  nanosecond part, which Spark's reader rejects; ORC-763), and outside 1677-09-21..2262-04-11
  (pyarrow reads ORC timestamps as nanoseconds). Parquet holds both.
* **void** columns: pyarrow's ORC writer has no null type (refused when the query starts).

Encryption: pyarrow has no ORC column encryption, so an encrypted ORC path is refused when
the query starts.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import pyarrow as pa

from commit_protocol.formats import READ_BATCH_ROWS
from commit_protocol.formats.hybrid_calendar import (
    GAP_DAYS,
    gregorian_to_hybrid,
    hybrid_to_gregorian,
    rebase,
)
from commit_protocol.formats.types import require_columns
from commit_protocol.formats.units import Unit
from commit_protocol.vocabulary.errors import (
    OptionError,
    SchemaMismatchError,
    UnencodableValueError,
)

NTZ_ATTRIBUTE = {b"spark.sql.catalyst.type": b"timestamp_ntz"}
# ORC's Java writer keeps a string column's dictionary while distinct keys stay under this
# share of its values (orc.dictionary.key.threshold): Spark's ORC files are written so.
DICTIONARY_THRESHOLD = 0.8

# Microseconds whose nanosecond count fits an int64, the unit pyarrow reads ORC timestamps in.
_MAX_MICROS = (2**63 - 1) // 1000


def check_rows(batch: pa.RecordBatch) -> None:
    """Refuse the values an ORC file cannot hold faithfully (see the module docstring), before
    they are staged: a row staged and committed must be encodable when its slot rolls."""
    for field, column in zip(batch.schema, batch.columns, strict=True):
        _visit_leaves(column, field.name, _check_leaf)


def _check_leaf(values: pa.Array, column: str) -> None:
    import pyarrow.compute as pc

    if pa.types.is_date32(values.type):
        low = pc.min(values).as_py()
        if low is not None and low < datetime.date(1582, 10, 15):
            gap = pc.is_in(values.cast(pa.int32()), pa.array(list(GAP_DAYS), pa.int32()))
            if pc.any(gap).as_py():
                bad = values.filter(gap)[0].as_py()
                raise UnencodableValueError(
                    f"format orc: column {column!r} holds the date {bad}, which does not exist "
                    "in the hybrid Julian/Gregorian calendar ORC files count in (1582-10-05 to "
                    "1582-10-14 were skipped); use format parquet to keep it",
                    column=column, reason="calendar_gap")
    elif pa.types.is_timestamp(values.type) and values.type.tz is not None:
        micros = values.cast(pa.timestamp("us", values.type.tz)).cast(pa.int64())
        low, high = (v.as_py() for v in pc.min_max(micros).values())
        if low is None:
            return
        if low < -_MAX_MICROS or high > _MAX_MICROS:
            bad = low if low < -_MAX_MICROS else high
            raise UnencodableValueError(
                f"format orc: column {column!r} holds {_instant(bad)}, outside "
                "1677-09-21..2262-04-11 (pyarrow reads ORC timestamps as nanoseconds); use "
                "format parquet to keep it", column=column, reason="timestamp_range")
        if low < 0:
            # a fraction of a second: not a whole multiple (pyarrow has no remainder kernel
            # before 26; an integer division rounds either way, a multiple comes back whole)
            whole = pc.multiply(pc.divide(micros, 1_000_000), 1_000_000)
            fraction = pc.and_(pc.less(micros, 0), pc.not_equal(whole, micros))
            if pc.any(fraction).as_py():
                bad = micros.filter(fraction)[0].as_py()
                raise UnencodableValueError(
                    f"format orc: column {column!r} holds {_instant(bad)}: pyarrow's ORC writer "
                    "stores timestamps before 1970 with a fraction of a second in a form "
                    "Spark's ORC reader rejects (ORC-763); use format parquet to keep it",
                    column=column, reason="timestamp_fraction")


def _instant(micros: int) -> str:
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    try:
        return str(epoch + datetime.timedelta(microseconds=micros))
    except OverflowError:
        return f"{micros} microseconds since 1970-01-01 UTC"


# -- writing -------------------------------------------------------------------------------
def orc_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as written to ORC: zone-less timestamps as int64 with Spark's attribute."""
    return pa.schema([_orc_field(f) for f in schema])


def _orc_field(field: pa.Field) -> pa.Field:
    t = field.type
    if pa.types.is_timestamp(t) and t.tz is None:
        return pa.field(field.name, pa.int64(), field.nullable, metadata=NTZ_ATTRIBUTE)
    if pa.types.is_struct(t):
        return field.with_type(pa.struct([_orc_field(t.field(i)) for i in range(t.num_fields)]))
    if pa.types.is_map(t):
        return field.with_type(pa.map_(_orc_field(t.key_field), _orc_field(t.item_field)))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return field.with_type(pa.list_(_orc_field(t.value_field)))
    return field


def to_orc(table: pa.Table) -> pa.Table:
    """``table`` as Spark's ORC writer stores it (the module docstring)."""
    schema = orc_schema(table.schema)
    if schema.equals(table.schema, check_metadata=True) and not _has_dates(table.schema):
        return table
    arrays = [_convert(table.column(i).combine_chunks(), schema.field(i).type, _to_orc_leaf)
              for i in range(table.num_columns)]
    return pa.Table.from_arrays(arrays, schema=schema)


def _to_orc_leaf(values: pa.Array, target: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(values.type) and values.type.tz is None:
        return values.cast(pa.timestamp("us")).cast(pa.int64())
    if pa.types.is_date32(values.type):
        return rebase(values, gregorian_to_hybrid)
    return values


def _has_dates(schema: pa.Schema) -> bool:
    found = []
    for field in schema:
        _visit_types(field.type, lambda t: found.append(pa.types.is_date32(t)))
    return any(found)


class OrcWriter:
    """Writes tables into one ORC file on an open handle (the finished file of a roll)."""

    def __init__(self, handle: IO[bytes], schema: pa.Schema, config: Any) -> None:
        import pyarrow.orc as orc

        self._writer = orc.ORCWriter(
            handle, compression="uncompressed" if config.compression == "none"
            else config.compression, stripe_size=config.row_group_bytes,
            dictionary_key_size_threshold=DICTIONARY_THRESHOLD,
            # measured on the throughput benchmark's rows with zstd: 3.4 MB (Spark's own ORC
            # file: 3.4 MB) against 5.0 MB with "speed", in about the same time
            compression_strategy="compression")

    def write(self, table: pa.Table, *, rows_per_group: int) -> None:
        """Stripes are cut by ``stripe_size`` inside the writer; ``rows_per_group`` is
        Parquet's concern."""
        self._writer.write(to_orc(table))

    def close(self) -> None:
        self._writer.close()


def open_writer(handle: IO[bytes], table: pa.Table, config: Any, *,
                encrypt: bool = True) -> OrcWriter:
    """The writer of one finished file; ``table`` is its first rows (for its schema)."""
    if encrypt and config.encrypted:
        raise OptionError("format orc cannot be encrypted: pyarrow has no ORC encryption")
    return OrcWriter(handle, table.schema, config)


# -- reading -------------------------------------------------------------------------------
def read_file(source: bytes | str | IO[bytes] | pa.NativeFile, schema: pa.Schema | None = None,
              *, decryption_properties: Any = None) -> pa.Table:
    """A whole ORC file as ``schema`` (columns by name, Spark's encodings undone), or as
    stored when ``schema`` is None."""
    units = OrcUnits(source, decryption_properties=decryption_properties)
    if schema is None:
        return units.file.read()
    return pa.Table.from_batches(list(units.batches(range(len(units.units)), schema)),
                                 schema=schema)


def iter_file(source: Any, schema: pa.Schema, *,
              decryption_properties: Any = None) -> Iterator[pa.RecordBatch]:
    """:func:`read_file` stripe by stripe, in batches of up to ``READ_BATCH_ROWS`` rows."""
    units = OrcUnits(source, decryption_properties=decryption_properties)
    yield from units.batches(range(len(units.units)), schema)


class OrcUnits:
    """An open ORC file: its units (stripes, from the file's tail, see
    :mod:`commit_protocol.formats.orc_tail`) and their batches. A tail that cannot be read
    leaves the file one whole without statistics, never a failed read.

    All stripes are read through Arrow's ORC scanner, batch by batch; a subset (stripes
    skipped by their statistics) through pyarrow's stripe reader, which decodes a stripe
    whole. Measured on a 122 MB file of 64 MiB stripes (2.6M rows each): the scanner in 0.22 s
    and +12 MB of peak RSS, the stripe reader in 0.83 s and +376 MB. pyarrow offers no
    scanner over chosen stripes, so ORC files are not split over tasks (``Format.splittable``).
    """

    def __init__(self, source: Any, *, decryption_properties: Any = None) -> None:
        import pyarrow.orc as orc

        from commit_protocol.formats.orc_tail import OrcTailError, read_units

        if decryption_properties is not None:
            raise SchemaMismatchError("an ORC file cannot be encrypted: the log says this "
                                      "path is")
        if isinstance(source, (bytes, bytearray, memoryview)):
            source = pa.BufferReader(source)
        self._source = source
        self.file = orc.ORCFile(source)
        self.schema = self.file.schema
        try:
            units = read_units(_seekable(source), self.file.file_length)
        except (OrcTailError, IndexError, ValueError):
            units = []
        if len(units) != self.file.nstripes:  # all in the split that starts the file
            units = [Unit(i, 0, 0, 0) for i in range(self.file.nstripes)]
        self.units = units

    def batches(self, indices: Iterable[int], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The rows of stripes ``indices`` as ``schema``, in batches of up to
        ``READ_BATCH_ROWS`` rows (see the class docstring for how)."""
        require_columns("orc", self.file.schema.names, schema)
        indices = list(indices)
        if indices == list(range(self.file.nstripes)):
            yield from self._scan(schema)
            return
        for index in indices:
            rows = from_orc(self.file.read_stripe(index, columns=schema.names), schema)
            for start in range(0, rows.num_rows, READ_BATCH_ROWS):
                yield rows.slice(start, READ_BATCH_ROWS)


    def _scan(self, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        import pyarrow.dataset as ds
        import pyarrow.fs as pafs

        source = self._source
        options = {"filesystem": pafs.LocalFileSystem()} if isinstance(source, str) else {}
        fragment = ds.OrcFileFormat().make_fragment(source, **options)
        # one thread: a read task's memory stays one batch, and tasks run in parallel anyway
        for batch in fragment.to_batches(batch_size=READ_BATCH_ROWS, columns=schema.names,
                                         use_threads=False):
            yield from_orc(batch, schema)


open_units = OrcUnits


def _seekable(source: Any) -> Any:
    """``source`` as something :func:`read_units` can seek and read (a path is opened)."""
    if isinstance(source, str):
        return pa.OSFile(source)
    return source


def from_orc(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Rows read from an ORC file as ``schema``: the inverse of :func:`to_orc`."""
    arrays = [_convert(batch.column(field.name), field.type, _from_orc_leaf)
              for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _from_orc_leaf(values: pa.Array, target: pa.DataType) -> pa.Array:
    if pa.types.is_date32(target):
        return rebase(values.cast(target), hybrid_to_gregorian)
    if pa.types.is_timestamp(target) and target.tz is None and pa.types.is_int64(values.type):
        return values.view(target)
    return values.cast(target)


# -- nested values -------------------------------------------------------------------------
def _convert(values: pa.Array, target: pa.DataType,
             leaf: Callable[[pa.Array, pa.DataType], pa.Array]) -> pa.Array:
    """``values`` rebuilt as type ``target``, ``leaf`` applied to every non-nested child."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    t = values.type
    if values.offset and pa.types.is_nested(t):
        values = pa.concat_arrays([values])  # children and offsets from zero
    mask = values.is_null() if values.null_count else None
    if pa.types.is_struct(t):
        children = [_convert(child, target.field(i).type, leaf)
                    for i, child in enumerate(values.flatten())]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_map(t):
        keys = _convert(values.keys, target.key_type, leaf)
        items = _convert(values.items, target.item_type, leaf)
        return pa.MapArray.from_arrays(values.offsets, keys, items, type=target, mask=mask)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        children = _convert(values.values, target.value_type, leaf)
        return type(values).from_arrays(values.offsets, children, type=target, mask=mask)
    return leaf(values, target)


def _visit_leaves(values: pa.Array, column: str, visit: Callable[[pa.Array, str], None]) -> None:
    t = values.type
    if pa.types.is_struct(t):
        for i, child in enumerate(values.flatten()):
            _visit_leaves(child, f"{column}.{t.field(i).name}", visit)
    elif pa.types.is_map(t):
        _visit_leaves(values.keys, f"{column}.key", visit)
        _visit_leaves(values.items, f"{column}.value", visit)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        _visit_leaves(values.flatten(), f"{column}[]", visit)
    else:
        visit(values, column)


def _visit_types(t: pa.DataType, visit: Callable[[pa.DataType], None]) -> None:
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            _visit_types(t.field(i).type, visit)
    elif pa.types.is_map(t):
        _visit_types(t.key_type, visit)
        _visit_types(t.item_type, visit)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        _visit_types(t.value_type, visit)
    else:
        visit(t)
