"""Whether the chosen format can hold the stream's schema, checked on Spark's own types.

Runs on the driver in the planning and commit processes Spark starts for a query (each a
fresh Python on the first batch): checking Spark's types keeps pyarrow, about 250 ms to
import, out of both. Executors then encode Arrow batches of a schema known to fit.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    UserDefinedType,
)

from commit_protocol.vocabulary.errors import OptionError

# The types whose Arrow form every format round-trips (commit_protocol.formats encodes them).
LEAVES = (BooleanType, ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType,
          StringType, BinaryType, DateType, TimestampType, TimestampNTZType, DecimalType,
          NullType)
NESTED = (ArrayType, StructType, MapType)
_SUPPORTED = ("boolean, tinyint, smallint, int, bigint, float, double, string, binary, date, "
              "timestamp, timestamp_ntz, decimal, void, and arrays, structs and maps of them")


def check_schema(fmt: str, partition_by: tuple[str, ...], schema: StructType) -> None:
    """Fail unless format ``fmt`` can hold ``schema`` exactly, partition columns aside.

    Raises
    ------
    OptionError
        Naming the format, the column and its type: a partition column missing from the
        schema, no data columns, duplicate names, a type no format holds (intervals,
        variant, time), a nested type in ``csv``, a map with nested keys, anything but one
        string column in ``text``.

    Examples
    --------
    >>> from pyspark.sql.types import ArrayType, StringType, StructField
    >>> check_schema("csv", (), StructType([StructField("tags", ArrayType(StringType()))]))
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.OptionError: format csv cannot hold column 'tags' of type \
array<string>: CSV has no nested types (array, struct, map); use format jsonl or parquet
    """
    missing = [c for c in partition_by if c not in schema.fieldNames()]
    if missing:
        raise OptionError(f"option partitionBy={','.join(partition_by)!r}: no column "
                          f"{', '.join(missing)} in the stream's schema {schema.simpleString()}")
    fields = [f for f in schema.fields if f.name not in partition_by]
    if not fields:
        if partition_by:
            raise OptionError(f"option partitionBy={','.join(partition_by)!r}: every column is "
                              "a partition column; no data would be written")
        raise OptionError(f"format {fmt}: the schema has no columns; nothing to write")
    names = [f.name for f in fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise OptionError(f"format {fmt}: duplicate column names {duplicates}")
    for f in fields:
        _check_type(fmt, f.name, f.dataType)
    if fmt == "text" and (len(fields) != 1 or not isinstance(fields[0].dataType, StringType)):
        found = ", ".join(f"{f.name!r} {f.dataType.simpleString()}" for f in fields)
        raise OptionError(f"format text holds exactly one string column; found {found}: "
                          "select one string column (e.g. to_json(struct(*))) or use jsonl")


def check_table_schema(table_format: str | None, schema: StructType) -> None:
    """Fail unless a ``table_format`` table can list files of ``schema`` (``table.format``).

    A timestamp partition column is taken: its directories name the value in the session's
    time zone, which the tasks report and each batch's log file records, and the table
    records the instant (``TableCommit.time_zone``).

    Raises
    ------
    OptionError
        For a void column (no table format has a null type).
    """
    if table_format is None:
        return
    for f in schema.fields:
        if _has_void(f.dataType):
            raise OptionError(f"option table.format={table_format!r}: column {f.name!r} of type "
                              f"{f.dataType.simpleString()} holds void, which {table_format} "
                              "tables have no type for; cast it (e.g. cast(null as string))")


def _has_void(t: DataType) -> bool:
    if isinstance(t, NullType):
        return True
    if isinstance(t, StructType):
        return any(_has_void(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _has_void(t.elementType)
    if isinstance(t, MapType):
        return _has_void(t.keyType) or _has_void(t.valueType)
    return False


def _check_type(fmt: str, column: str, t: DataType) -> None:
    if isinstance(t, UserDefinedType):  # travels as its SQL type
        t = t.sqlType()
    if fmt == "csv" and isinstance(t, NESTED):
        raise OptionError(f"format csv cannot hold column {column!r} of type {t.simpleString()}: "
                          "CSV has no nested types (array, struct, map); use format jsonl or "
                          "parquet")
    if fmt == "avro" and isinstance(t, MapType) and not isinstance(t.keyType, StringType):
        raise OptionError(f"format avro cannot hold column {column!r} of type "
                          f"{t.simpleString()}: Avro maps have string keys (as spark-avro "
                          "requires); use format parquet, or cast the keys to string")
    if isinstance(t, StructType):
        for f in t.fields:
            _check_type(fmt, f"{column}.{f.name}", f.dataType)
    elif isinstance(t, ArrayType):
        _check_type(fmt, f"{column}[]", t.elementType)
    elif isinstance(t, MapType):
        if isinstance(t.keyType, NESTED):
            raise OptionError(f"format {fmt} cannot hold column {column!r} of type "
                              f"{t.simpleString()}: map keys must be primitive")
        _check_type(fmt, f"{column}.key", t.keyType)
        _check_type(fmt, f"{column}.value", t.valueType)
    elif fmt == "orc" and isinstance(t, NullType):
        raise OptionError(f"format orc cannot hold column {column!r} of type void: pyarrow's "
                          "ORC writer has no null type; cast it (e.g. cast(null as string)) or "
                          "use format parquet")
    elif not isinstance(t, LEAVES):
        raise OptionError(f"format {fmt} cannot hold column {column!r} of type "
                          f"{t.simpleString()}: supported are {_SUPPORTED}")
