"""Which schemas each format holds, checked on Spark's types before a query writes a row."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VariantType,
)

from commit_protocol.vocabulary.errors import OptionError
from datasource.writing.schema_check import check_schema


def schema(*fields) -> StructType:
    return StructType([StructField(name, t) for name, t in fields])


FLAT = schema(("bool", BooleanType()), ("i8", ByteType()), ("i16", ShortType()),
              ("i32", IntegerType()), ("i64", LongType()), ("f32", FloatType()),
              ("f64", DoubleType()), ("str", StringType()), ("bin", BinaryType()),
              ("date", DateType()), ("ts", TimestampType()), ("ntz", TimestampNTZType()),
              ("dec", DecimalType(38, 18)), ("void", NullType()))
POINT = StructType([StructField("x", DoubleType()), StructField("tag", BinaryType())])
ALL = StructType(FLAT.fields + schema(
    ("tags", ArrayType(StringType())), ("point", POINT), ("m", MapType(StringType(), LongType())),
    ("deep", ArrayType(MapType(DateType(), ArrayType(POINT))))).fields)


@pytest.mark.parametrize("fmt, checked", [
    pytest.param("jsonl", ALL, id="jsonl-every-type"),
    pytest.param("parquet", ALL, id="parquet-every-type"),
    pytest.param("csv", FLAT, id="csv-every-flat-type"),
    pytest.param("text", schema(("value", StringType())), id="text-one-string"),
])
def test_accepted(fmt, checked):
    check_schema(fmt, (), checked)


def test_partition_columns_are_not_data():
    # The partition column lives in the directory name: text's one string column remains.
    check_schema("text", ("day",), schema(("day", DateType()), ("line", StringType())))


@pytest.mark.parametrize("fmt, partition_by, checked, message", [
    pytest.param("csv", (), schema(("tags", ArrayType(StringType()))),
                 r"csv cannot hold column 'tags' of type array<string>: CSV has no nested "
                 r"types .* use format jsonl or parquet", id="csv-array"),
    pytest.param("csv", (), schema(("p", POINT)), r"csv cannot hold column 'p' of type struct",
                 id="csv-struct"),
    pytest.param("csv", (), schema(("m", MapType(StringType(), ByteType()))),
                 r"csv cannot hold column 'm' of type map", id="csv-map"),
    pytest.param("text", (), schema(("n", LongType())),
                 r"text holds exactly one string column; found 'n' bigint", id="text-not-string"),
    pytest.param("text", (), schema(("a", StringType()), ("b", StringType())),
                 r"text holds exactly one string column; found 'a' string, 'b' string",
                 id="text-two-columns"),
    pytest.param("jsonl", (), schema(), r"jsonl: the schema has no columns", id="no-columns"),
    pytest.param("jsonl", (), schema(("a", ByteType()), ("a", ByteType())),
                 r"duplicate column names \['a'\]", id="duplicate-names-clash-as-json-keys"),
    pytest.param("jsonl", (), schema(("t", DayTimeIntervalType())),
                 r"jsonl cannot hold column 't' of type interval day to second: supported are",
                 id="interval"),
    pytest.param("parquet", (), schema(("v", VariantType())),
                 r"parquet cannot hold column 'v' of type variant", id="variant"),
    pytest.param("parquet", (), schema(("l", ArrayType(DayTimeIntervalType()))),
                 r"parquet cannot hold column 'l\[\]' of type interval", id="nested-leaf-named"),
    pytest.param("jsonl", (), schema(("m", MapType(ArrayType(ByteType()), ByteType()))),
                 r"map keys must be primitive", id="json-keys-are-text"),
    pytest.param("jsonl", ("day",), schema(("id", LongType())),
                 r"option partitionBy='day': no column day in the stream's schema "
                 r"struct<id:bigint>", id="partition-column-missing"),
    pytest.param("jsonl", ("day",), schema(("day", DateType())),
                 r"every column is a partition column", id="nothing-but-partition-columns"),
])
def test_refused_naming_format_column_and_type(fmt, partition_by, checked, message):
    with pytest.raises(OptionError, match=message):
        check_schema(fmt, partition_by, checked)


def test_planning_a_batch_imports_no_pyarrow(tmp_path):
    # Spark runs the planning and the commit of each batch in Python processes of their own,
    # fresh on a query's first batch: pyarrow alone costs them about 250 ms to import.
    code = ("import sys; from datasource.source import RotSinkDataSource;"
            "from pyspark.sql.types import StructType, StructField, LongType;"
            f"s = RotSinkDataSource({{'path': {str(tmp_path)!r}, 'format': 'parquet'}});"
            "s.streamWriter(StructType([StructField('id', LongType())]), False);"
            "print(sorted(m for m in ('pyarrow', 'polars', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
