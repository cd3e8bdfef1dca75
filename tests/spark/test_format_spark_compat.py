"""Spark's own readers on files our encoders write: values compared row for row.

Each file is several encoded chunks concatenated, as a part file that spans micro-batches.
Where Spark cannot restore a value exactly, the test pins what Spark does instead, with the
reason beside it; the README lists these limits.
"""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from commit_protocol.formats import encode_rows
from tests.support.parquet import parquet_bytes
from tests.unit.test_formats import normalized

NAN, INF = float("nan"), float("inf")
UTC = dt.timezone.utc
STRINGS = ["plain", 'q"uo""te', "com,ma", "new\nline", "cr\rlf\r\n", "back\\slash", "tail\\",
           '\\"', "", None, "ü€😀\u2028", " pad ", "NaN", '{"a":1}']
POINT = pa.struct([("x", pa.float64()), ("tag", pa.binary()), ("at", pa.timestamp("us", tz="UTC"))])
FLAT = {
    "bool": (pa.bool_(), [True, False, None]),
    "i8": (pa.int8(), [-128, 127, None]),
    "i16": (pa.int16(), [-32768, 32767, None]),
    "i32": (pa.int32(), [-(2**31), 2**31 - 1, None]),
    "i64": (pa.int64(), [-(2**63), 2**63 - 1, None]),
    "f32": (pa.float32(), [1.1, -0.0, 3.4028235e38, NAN, INF, -INF, None]),
    "f64": (pa.float64(), [0.1, 1e300, 5e-324, -INF, NAN, INF, None]),
    "str": (pa.string(), STRINGS),
    "lstr": (pa.large_string(), [s for s in STRINGS if s != ""]),
    "bin": (pa.binary(), [b"\x00\xff\n\"", b"x", None]),
    "date": (pa.date32(), [dt.date(1, 1, 1), dt.date(9999, 12, 31), None]),
    "ts_utc": (pa.timestamp("us", tz="UTC"), [dt.datetime(2020, 1, 1, 1, 2, 3, 456789, tzinfo=UTC),
                                              dt.datetime(1, 1, 1, tzinfo=UTC), None]),
    "ts_session": (pa.timestamp("us", tz="America/Los_Angeles"),
                   [dt.datetime(2021, 3, 14, 10, 0, 0, 1, tzinfo=UTC), None]),
    "ts_ntz": (pa.timestamp("us"), [dt.datetime(2020, 1, 1, 1, 2, 3), None,
                                    dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]),
    "dec": (pa.decimal128(38, 6), [decimal.Decimal("-12345678901234567890123456789012.123456"),
                                   decimal.Decimal("0.000000"), None]),
    "dec_small": (pa.decimal128(38, 30), [decimal.Decimal("1E-30"), None]),
}
NESTED = {
    "ints": (pa.list_(pa.int64()), [[1, None, 3], None, [], [None]]),
    "points": (pa.list_(POINT),
               [[{"x": 1.5, "tag": b"\x01", "at": dt.datetime(1, 1, 1, tzinfo=UTC)}],
                [None, {"x": None, "tag": None, "at": None}], None,
                [{"x": NAN, "tag": b"", "at": None}]]),
    "point": (POINT, [{"x": -INF, "tag": b"t", "at": None}, None]),
    "attrs": (pa.map_(pa.string(), pa.float64()), [[("k", 1.0), ("k2", None)], None, [],
                                                   [("nan", NAN)]]),
    "nested_maps": (pa.list_(pa.map_(pa.string(), pa.list_(pa.date32()))),
                    [[[("a", [dt.date(2020, 1, 2), None])]], [None], None]),
}
ROWS = 14
CHUNKS = [(0, 3), (3, 0), (3, 4), (7, 1), (8, 6)]


def batch_of(columns: dict) -> pa.RecordBatch:
    schema = pa.schema([(name, t) for name, (t, _) in columns.items()])
    arrays = [pa.array([values[r % len(values)] for r in range(ROWS)], t)
              for t, values in columns.values()]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def write_chunks(directory: Path, fmt: str, batch: pa.RecordBatch) -> str:
    chunks = [batch.slice(start, length) for start, length in CHUNKS]
    data = b"".join(encode_rows(fmt, c, with_header=i == 0) for i, c in enumerate(chunks))
    directory.mkdir()
    (directory / f"part-00000.{fmt}").write_bytes(data)
    return str(directory)


def spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def rows(table: pa.Table) -> list:
    # to_pylist: zoned datetimes compare by instant, so Spark's UTC session zone and our
    # America/Los_Angeles column compare equal where the instants are equal.
    return normalized(table.to_pylist())


def spark_rows(df) -> list:
    return rows(df.toArrow())


def test_jsonl_every_type(spark, tmp_path):
    batch = batch_of({**FLAT, **NESTED})
    path = write_chunks(tmp_path / "json", "jsonl", batch)
    df = spark.read.schema(spark_schema(batch.schema)).json(path)
    assert spark_rows(df) == rows(pa.Table.from_batches([batch]))


def test_jsonl_non_finite_floats_are_inferred_as_double(spark, tmp_path):
    path = write_chunks(tmp_path / "json", "jsonl", batch_of({"f64": FLAT["f64"]}))
    assert spark.read.json(path).schema.simpleString() == "struct<f64:double>"


def test_jsonl_void_column(spark, tmp_path):
    batch = batch_of({"i8": FLAT["i8"], "void": (pa.null(), [None])})
    path = write_chunks(tmp_path / "json", "jsonl", batch)
    df = spark.read.schema("i8 tinyint, void void").json(path)
    assert [r.void for r in df.collect()] == [None] * ROWS


def test_jsonl_map_with_non_string_keys(spark, tmp_path):
    from pyspark.errors import AnalysisException

    batch = batch_of({"by_id": (pa.map_(pa.int32(), pa.string()), [[(1, "a"), (-2, None)], []])})
    path = write_chunks(tmp_path / "json", "jsonl", batch)
    # Limit: Spark's JSON reader takes only string map keys; our keys are their text.
    with pytest.raises(AnalysisException, match="INVALID_JSON_SCHEMA_MAP_TYPE"):
        spark.read.schema("by_id map<int,string>").json(path).collect()
    df = spark.read.schema("by_id map<string,string>").json(path)
    assert [r.by_id for r in df.collect()] == [{"1": "a", "-2": None}, {}] * (ROWS // 2)


def csv_expected(batch: pa.RecordBatch) -> list:
    import base64

    expected = []
    for row in pa.Table.from_batches([batch]).to_pylist():
        for name in ("str", "lstr"):
            # Limit: Spark's CSV reader reads "" as null (nullValue and emptyValue are both "").
            row[name] = row[name] or None
        # Limit: Spark's CSV has no binary type; we write base64, Spark reads it as string.
        row["bin"] = None if row["bin"] is None else base64.b64encode(row["bin"]).decode()
        expected.append(row)
    return normalized(expected)


def test_csv_every_flat_type_with_multiline(spark, tmp_path):
    batch = batch_of(FLAT)
    path = write_chunks(tmp_path / "csv", "csv", batch)
    schema = spark_schema(pa.schema([f if f.name != "bin" else pa.field("bin", pa.string())
                                     for f in batch.schema]))
    df = spark.read.schema(schema).option("header", True).option("multiLine", True).csv(path)
    assert spark_rows(df) == csv_expected(batch)


def test_why_not_pyarrow_csv_writer(spark, tmp_path):
    import pyarrow.csv as pcsv

    values = ['a"b', "tail\\", "next"]
    tmp_path.joinpath("csv").mkdir()
    pcsv.write_csv(pa.table({"s": values}), str(tmp_path / "csv" / "part-00000.csv"))
    df = spark.read.schema("s string").option("header", True).option("multiLine", True)
    # pyarrow doubles quotes ("a""b"); Spark's default escape is \, so it keeps the raw
    # quotes, and "tail\" escapes its closing quote and swallows the next row.
    back = [r.s for r in df.csv(str(tmp_path / "csv")).collect()]
    assert back == ['"a""b"', '"tail"\n"next"']


def test_csv_bare_and_quoted_chunks_of_one_file(spark, tmp_path):
    """A chunk whose strings need no quotes is written bare (as Spark writes them), the next
    one quoted; Spark's reader takes both back, leading spaces and nulls included."""
    bare, quoted = [" a b", None, "x"], ['q"', "c,d", "back\\", None]
    data = (encode_rows("csv", pa.table({"i": [0, 1, 2], "s": bare}), with_header=True)
            + encode_rows("csv", pa.table({"i": [3, 4, 5, 6], "s": quoted}), with_header=False))
    assert data.startswith(b'"i","s"\n0, a b\n1,\n2,x\n3,"q\\""\n')
    tmp_path.joinpath("csv").mkdir()
    (tmp_path / "csv" / "part-00000.csv").write_bytes(data)
    df = spark.read.schema("i int, s string").option("header", True).csv(str(tmp_path / "csv"))
    assert [r.s for r in df.orderBy("i").collect()] == bare + quoted


def test_csv_line_breaks_need_multiline(spark, tmp_path):
    batch = batch_of({"i8": FLAT["i8"], "str": FLAT["str"]})
    path = write_chunks(tmp_path / "csv", "csv", batch)
    df = spark.read.schema("i8 tinyint, str string").option("header", True).csv(path)
    # Limit: without multiLine Spark splits rows at line breaks inside quoted values.
    assert df.count() > ROWS


def test_csv_void_column_is_refused_by_spark(spark, tmp_path):
    from pyspark.errors import AnalysisException

    batch = batch_of({"i8": FLAT["i8"], "void": (pa.null(), [None])})
    path = write_chunks(tmp_path / "csv", "csv", batch)
    # Limit: Spark's CSV source has no void type; read the column as string (all null).
    with pytest.raises(AnalysisException, match="UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE"):
        spark.read.schema("i8 tinyint, void void").option("header", True).csv(path).collect()
    df = spark.read.schema("i8 tinyint, void string").option("header", True).csv(path)
    assert [r.void for r in df.collect()] == [None] * ROWS


def test_text_lines(spark, tmp_path):
    values = [s for s in STRINGS if s is None or ("\n" not in s and "\r" not in s)]
    batch = batch_of({"value": (pa.string(), values)})
    path = write_chunks(tmp_path / "text", "text", batch)
    # Limit (Spark's too): a null is an empty line and reads back as "".
    expected = [{"value": row["value"] or ""} for row in rows(pa.Table.from_batches([batch]))]
    assert spark_rows(spark.read.text(path)) == expected


@pytest.mark.parametrize("compression", ["snappy", "zstd", "gzip", "lz4_raw", "none"])
def test_parquet_every_type(spark, tmp_path, compression):
    batch = batch_of({**FLAT, **NESTED})
    directory = tmp_path / "parquet"
    directory.mkdir()
    (directory / "part-00000.parquet").write_bytes(parquet_bytes(batch, compression=compression))
    df = spark.read.parquet(str(directory))
    assert df.schema == spark_schema(batch.schema)
    assert spark_rows(df) == rows(pa.Table.from_batches([batch]))


def test_parquet_void_column(spark, tmp_path):
    batch = batch_of({"i8": FLAT["i8"], "void": (pa.null(), [None])})
    (tmp_path / "part-00000.parquet").write_bytes(parquet_bytes(batch))
    df = spark.read.parquet(str(tmp_path))
    assert [r.void for r in df.collect()] == [None] * ROWS


def write_avro_chunks(directory: Path, batch: pa.RecordBatch, compression: str) -> str:
    chunks = [batch.slice(start, length) for start, length in CHUNKS]
    data = b"".join(encode_rows("avro", c, with_header=i == 0, file_name="part-00000.avro",
                                compression=compression) for i, c in enumerate(chunks))
    directory.mkdir()
    (directory / "part-00000.avro").write_bytes(data)
    return str(directory)


@pytest.mark.parametrize("compression", ["snappy", "deflate", "zstd", "none"])
def test_avro_every_type(spark, tmp_path, compression):
    """spark-avro reads every type back exactly, from a file of five blocks."""
    batch = batch_of({**{k: v for k, v in FLAT.items() if k != "lstr"}, **NESTED})
    path = write_avro_chunks(tmp_path / "avro", batch, compression)
    df = spark.read.format("avro").load(path)
    expected = spark_schema(batch.schema)
    # Avro has no byte or short: Spark reads them as int, as from its own Avro files
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == \
        [(f.name, "int" if f.dataType.simpleString() in ("tinyint", "smallint")
          else f.dataType.simpleString()) for f in expected]
    # Avro maps have no order (spark-avro reads them into a hash map): entries compared sorted
    assert unordered_maps(spark_rows(df.select(*[df[f.name].cast(f.dataType)
                                                  for f in expected]))) == \
        unordered_maps(rows(pa.Table.from_batches([batch])))


def unordered_maps(table_rows: list) -> list:
    def entries(m):
        return None if m is None else sorted(m, key=repr)

    return [{**row, "attrs": entries(row["attrs"]),
             "nested_maps": None if row["nested_maps"] is None else
             [entries(m) for m in row["nested_maps"]]} for row in table_rows]


def test_avro_schema_is_the_one_spark_writes(spark, tmp_path):
    """The schema in our header equals the one Spark's own Avro writer puts in its files
    (as an Avro reader resolves either: full names of records and fixeds)."""
    import io

    import fastavro

    batch = batch_of({**{k: v for k, v in FLAT.items() if k not in ("lstr", "ts_session")},
                      **NESTED})
    expected = spark_schema(batch.schema)
    df = spark.createDataFrame(pa.Table.from_batches([batch]), expected)
    df.coalesce(1).write.format("avro").save(str(tmp_path / "spark"))
    (written,) = (tmp_path / "spark").glob("*.avro")
    with written.open("rb") as f:
        theirs = fastavro.reader(f).writer_schema
    ours = fastavro.reader(io.BytesIO(encode_rows("avro", batch, with_header=True))).writer_schema
    assert ours == theirs


def test_avro_void_column(spark, tmp_path):
    batch = batch_of({"i8": FLAT["i8"], "void": (pa.null(), [None])})
    path = write_avro_chunks(tmp_path / "avro", batch, "snappy")
    assert [r.void for r in spark.read.format("avro").load(path).collect()] == [None] * ROWS
