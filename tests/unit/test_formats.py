"""Arrow batches <-> part-file bytes, without Spark: schemas, representations, round trips."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import subprocess
import sys

import pyarrow as pa
import pytest

import commit_protocol.formats.arrow as formats_arrow
import commit_protocol.formats.jsonl as formats_json
from commit_protocol.formats import FORMATS, decode_rows, encode_rows
from commit_protocol.formats.codecs import bulk_codec
from commit_protocol.formats.parquet import read_parquet
from commit_protocol.vocabulary.errors import (
    OptionError,
    SchemaMismatchError,
    UnencodableValueError,
)
from tests.support.parquet import parquet_bytes

NAN, INF = float("nan"), float("inf")
UTC = dt.timezone.utc
LA_ZONE = "America/Los_Angeles"
STRINGS = ["plain", 'q"uo""te', "com,ma", "new\nline", "cr\rlf\r\n", "back\\slash", "tail\\",
           '\\"', "", None, "ü€😀\u2028", " pad ", "\x00\x01", "NaN", "null", '{"a":1}']

# One list of values per column; row r of the base table takes value r % len(values).
# Non-finite floats sit in rows 3..5 only, so some chunks take the plain float path.
FLAT_COLUMNS: dict[str, tuple[pa.DataType, list]] = {
    "bool": (pa.bool_(), [True, False, None]),
    "i8": (pa.int8(), [-128, 127, None, 0]),
    "i16": (pa.int16(), [-32768, 32767, None]),
    "i32": (pa.int32(), [-(2**31), 2**31 - 1, None]),
    "i64": (pa.int64(), [-(2**63), 2**63 - 1, None, 0]),
    "f32": (pa.float32(), [1.1, -0.0, 3.4028235e38, NAN, INF, -INF, None, 1e-45] + [0.5] * 8),
    "f64": (pa.float64(), [0.1, 1e300, 5e-324, -INF, NAN, INF, None, 1 / 3] + [2.0] * 8),
    "str": (pa.string(), STRINGS),
    "lstr": (pa.large_string(), list(reversed(STRINGS))),
    "bin": (pa.binary(), [b"\x00\xff\n\"", b"", None, b"\\"]),
    "date": (pa.date32(), [dt.date(1, 1, 1), dt.date(9999, 12, 31), None, dt.date(1970, 1, 1)]),
    "ts_utc": (pa.timestamp("us", tz="UTC"),
               [dt.datetime(2020, 1, 1, 1, 2, 3, 456789, tzinfo=UTC),
                dt.datetime(1, 1, 1, tzinfo=UTC), None,
                dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]),
    "ts_session": (pa.timestamp("us", tz=LA_ZONE),
                   [dt.datetime(2021, 3, 14, 10, 0, 0, 1, tzinfo=UTC), None,
                    dt.datetime(1900, 1, 1, tzinfo=UTC)]),
    "ts_ntz": (pa.timestamp("us"), [dt.datetime(2020, 1, 1, 1, 2, 3), None,
                                    dt.datetime(2020, 1, 1, 0, 0, 0, 1), dt.datetime(1, 1, 1)]),
    "dec": (pa.decimal128(38, 6), [decimal.Decimal("-12345678901234567890123456789012.123456"),
                                   decimal.Decimal("0.000000"), None, decimal.Decimal("1.5")]),
    "dec_small": (pa.decimal128(38, 30), [decimal.Decimal("1E-30"), None,
                                          decimal.Decimal("-0.000001000000000000000000000001")]),
    "dec_int": (pa.decimal128(10, 0), [decimal.Decimal(-9999999999), None, decimal.Decimal(0)]),
    "void": (pa.null(), [None]),
}
POINT = pa.struct([("x", pa.float64()), ("tag", pa.binary()), ("at", pa.timestamp("us", tz="UTC"))])
NESTED_COLUMNS: dict[str, tuple[pa.DataType, list]] = {
    "ints": (pa.list_(pa.int64()), [[1, None, 3], None, [], [None]]),
    "points": (pa.list_(POINT),
               [[{"x": 1.5, "tag": b"\x01", "at": dt.datetime(2020, 1, 1, tzinfo=UTC)}],
                [None, {"x": None, "tag": None, "at": None}], None,
                [{"x": NAN, "tag": b"", "at": None}]]),
    "point": (POINT, [{"x": -INF, "tag": b"t", "at": None}, None,
                      {"x": 2.0, "tag": None, "at": None}]),
    "attrs": (pa.map_(pa.string(), pa.float64()), [[("k", 1.0), ("k2", None)], None, [],
                                                   [("nan", NAN), ("quote\"key", 2.5)]]),
    "by_id": (pa.map_(pa.int32(), pa.string()), [[(1, "a"), (-2, None)], [], None]),
    "nested_maps": (pa.list_(pa.map_(pa.string(), pa.list_(pa.date32()))),
                    [[[("a", [dt.date(2020, 1, 2), None])]], [None], None, [[]]]),
    "deep": (pa.struct([("inner", pa.struct([("s", pa.string()), ("n", pa.null())]))]),
             [{"inner": {"s": 'a"\n', "n": None}}, {"inner": None}, None]),
}
BASE_ROWS = 16
CHUNKS = [(0, 3), (3, 0), (3, 4), (7, 1), (8, 5), (13, 2), (15, 1)]  # 7 chunks, one empty


def column_values(values: list, rows: int = BASE_ROWS) -> list:
    return [values[r % len(values)] for r in range(rows)]


def base_batch(columns: dict[str, tuple[pa.DataType, list]]) -> pa.RecordBatch:
    schema = pa.schema([(name, t) for name, (t, _) in columns.items()])
    arrays = [pa.array(column_values(values), t) for t, values in columns.values()]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


FLAT = base_batch(FLAT_COLUMNS)
ALL = base_batch({**FLAT_COLUMNS, **NESTED_COLUMNS})
# text: no line breaks (refused) and no null (reads back as "", like Spark; tested apart)
TEXT = base_batch({"value": (pa.string(), [s for s in STRINGS
                                          if s is not None and "\n" not in s and "\r" not in s])})


def normalized(value):
    """Python values with NaN made comparable (NaN != NaN otherwise)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalized(v) for v in value]
    return value


def assert_same_rows(actual: pa.Table, expected: pa.Table) -> None:
    assert actual.schema.equals(expected.schema), f"{actual.schema}\n!=\n{expected.schema}"
    assert normalized(actual.to_pylist()) == normalized(expected.to_pylist())


def encode_chunks(fmt: str, batch: pa.RecordBatch) -> tuple[bytes, pa.Table]:
    """Sliced chunks (non-zero Arrow offsets, as Spark's batches may have) of ``batch``."""
    chunks = [batch.slice(start, length) for start, length in CHUNKS]
    data = b"".join(encode_rows(fmt, c, with_header=i == 0) for i, c in enumerate(chunks))
    return data, pa.Table.from_batches(chunks, schema=batch.schema)


# --- round trips: many chunks, concatenated, decode to the concatenated rows --------------

@pytest.mark.parametrize("fmt, batch", [
    pytest.param("jsonl", ALL, id="jsonl-every-type-maps-via-python"),
    pytest.param("jsonl", FLAT, id="jsonl-flat-all-arrow-path"),
    pytest.param("csv", FLAT, id="csv-every-flat-type"),
    pytest.param("text", TEXT, id="text-one-string-column"),
])
def test_chunks_concatenate_to_a_file_that_decodes_to_the_rows(fmt, batch):
    data, expected = encode_chunks(fmt, batch)
    assert_same_rows(decode_rows(fmt, data, batch.schema), expected)


def test_parquet_round_trip_is_exact_for_every_type():
    data = parquet_bytes(ALL)
    assert_same_rows(read_parquet(data, ALL.schema), pa.Table.from_batches([ALL]))


# --- representations (what the bytes look like, and why) -----------------------------------

def one_column(t: pa.DataType, values: list, name: str = "c") -> pa.Table:
    return pa.table({name: pa.array(values, t)})


@pytest.mark.parametrize("fmt, table, expected", [
    pytest.param("jsonl", one_column(pa.float64(), [NAN, INF, -INF, 1.5, None]),
                 b'{"c":NaN}\n{"c":Infinity}\n{"c":-Infinity}\n{"c":1.5}\n{"c":null}\n',
                 id="json-non-finite-bare-as-spark-writes"),
    pytest.param("jsonl", one_column(pa.list_(pa.float32()), [[NAN, 1.1]]),
                 b'{"c":[NaN,1.1]}\n', id="json-non-finite-nested-float32-shortest"),
    pytest.param("jsonl", one_column(pa.binary(), [b"\x00\xff", None]),
                 b'{"c":"AP8="}\n{"c":null}\n', id="json-binary-base64-as-spark"),
    pytest.param("jsonl", one_column(pa.timestamp("us", tz=LA_ZONE),
                                     [dt.datetime(2020, 1, 1, tzinfo=UTC)]),
                 b'{"c":"2020-01-01T00:00:00+00:00"}\n', id="json-timestamp-in-utc"),
    pytest.param("jsonl", one_column(pa.decimal128(5, 2), [decimal.Decimal("-1.50")]),
                 b'{"c":"-1.50"}\n', id="json-decimal-as-exact-string"),
    pytest.param("jsonl", one_column(pa.map_(pa.int32(), pa.int8()), [[(7, 1)]]),
                 b'{"c":{"7":1}}\n', id="json-map-keys-as-text"),
    pytest.param("csv", one_column(pa.string(), ['a"b\\', "", None]),
                 b'"c"\n"a\\"b\\\\"\n""\n\n', id="csv-backslash-escapes-spark-default"),
    pytest.param("csv", one_column(pa.float64(), [NAN, INF, -INF, 0.1]),
                 b'"c"\nNaN\nInf\n-Inf\n0.1\n', id="csv-non-finite-as-spark-defaults"),
    pytest.param("csv", one_column(pa.timestamp("us", tz=LA_ZONE),
                                   [dt.datetime(2020, 1, 1, tzinfo=UTC)]),
                 b'"c"\n2020-01-01 00:00:00.000000Z\n', id="csv-timestamp-in-utc"),
    pytest.param("csv", one_column(pa.binary(), [b"\x00\xff"]), b'"c"\n"AP8="\n',
                 id="csv-binary-base64"),
    pytest.param("csv", one_column(pa.int8(), [], name='we"ird'), b'"we\\"ird"\n',
                 id="csv-header-alone-for-a-first-empty-chunk"),
    pytest.param("text", one_column(pa.string(), ["a", None, ""]), b"a\n\n\n",
                 id="text-null-as-empty-line-as-spark"),
])
def test_representation(fmt, table, expected):
    assert encode_rows(fmt, table, with_header=True) == expected


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "text"])
def test_no_rows_without_header_is_no_bytes(fmt):
    empty = pa.table({"value": pa.array([], pa.string())})
    assert encode_rows(fmt, empty, with_header=False) == b""
    assert decode_rows(fmt, b"", empty.schema).equals(empty)


def test_csv_string_columns_are_bare_unless_a_value_needs_quotes():
    bare = one_column(pa.string(), ["a b", None, "x"])
    assert encode_rows("csv", bare, with_header=False) == b"a b\n\nx\n"


@pytest.mark.parametrize("special", ["", "a,b", 'a"b', "a\\b", "a\nb", "a\rb"],
                         ids=["empty", "comma", "quote", "backslash", "newline", "return"])
def test_csv_one_value_needing_quotes_quotes_its_column(special):
    table = pa.table({"s": ["plain", special, None], "t": ["bare", "bare", "bare"]})
    data = encode_rows("csv", table, with_header=True)
    assert data.startswith(b'"s","t"\n"plain",bare\n') and data.endswith(b"\n,bare\n")
    assert_same_rows(decode_rows("csv", data, table.schema), table)


@pytest.mark.parametrize("t", [pa.string(), pa.int64()], ids=["string", "long"])
def test_csv_one_column_nulls_are_empty_lines_and_read_back(t):
    """A one-column row holding null is an empty line: a row, not a line to skip."""
    table = one_column(t, [None, pa.scalar(7).cast(t).as_py(), None])
    data = encode_rows("csv", table, with_header=True) + encode_rows("csv", table,
                                                                     with_header=False)
    assert data.count(b"\n\n") >= 2
    assert_same_rows(decode_rows("csv", data, table.schema), pa.concat_tables([table, table]))


def test_csv_header_only_on_request():
    table = one_column(pa.int8(), [1])
    assert encode_rows("csv", table, with_header=False) == b"1\n"


@pytest.mark.parametrize("value", [
    pytest.param("a\nb", id="newline-would-split-the-row"),
    pytest.param("a\rb", id="carriage-return-too-for-spark-reader"),
])
def test_text_refuses_line_breaks(value):
    with pytest.raises(UnencodableValueError,
                       match=r"column 'value' has 1 value\(s\) with a line") as refused:
        encode_rows("text", pa.table({"value": ["ok", value]}), with_header=False)
    assert (refused.value.column, refused.value.reason) == ("value", "line_break")


def test_text_decodes_null_as_empty_string_like_spark():
    table = one_column(pa.string(), ["a", None], name="value")
    data = encode_rows("text", table, with_header=False)
    assert decode_rows("text", data, table.schema).column(0).to_pylist() == ["a", ""]


def test_csv_header_must_match_the_schema():
    data = encode_rows("csv", one_column(pa.int8(), [1], name="a"), with_header=True)
    with pytest.raises(SchemaMismatchError, match=r"names columns \['a'\]; expected \['b'\]"):
        decode_rows("csv", data, pa.schema([("b", pa.int8())]))


# --- robustness -----------------------------------------------------------------------------

def test_json_float_marker_found_in_user_data_is_replaced(monkeypatch):
    tokens = iter(["collide", "fresh"])
    monkeypatch.setattr(formats_json.secrets, "token_hex", lambda _: next(tokens))
    table = pa.table({"s": ["xrsFcollide", "rsFcollide"], "f": [NAN, 1.0]})
    data = encode_rows("jsonl", table, with_header=False)
    assert b"rsFfresh" not in data
    assert_same_rows(decode_rows("jsonl", data, table.schema), table)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_rows_longer_than_a_reader_block_decode(monkeypatch, fmt):
    monkeypatch.setattr(formats_arrow, "_MIN_BLOCK", 64)
    table = pa.table({"s": ["x" * 1000, "y", "z\n" * 700], "i": [1, 2, 3]})
    data = encode_rows(fmt, table, with_header=True)
    assert_same_rows(decode_rows(fmt, data, table.schema), table)


def test_bulk_or_unknown_formats_are_no_row_formats():
    with pytest.raises(OptionError, match=r"format 'parquet' is a bulk format: .* \(jsonl, csv, "
                                          r"text, avro are\)"):
        encode_rows("parquet", FLAT, with_header=False)
    with pytest.raises(OptionError, match=r"option format='xml': expected one of jsonl, csv, "
                                          r"text, avro, parquet, orc"):
        decode_rows("xml", b"", FLAT.schema)


# --- parquet --------------------------------------------------------------------------------

@pytest.mark.parametrize("compression, level", [
    pytest.param("snappy", None, id="default"),
    pytest.param("zstd", 9, id="zstd-with-level"),
    pytest.param("gzip", None, id="gzip"),
    pytest.param("lz4_raw", None, id="lz4-raw-spelling"),
    pytest.param("none", None, id="uncompressed"),
])
def test_parquet_codecs(compression, level):
    data = parquet_bytes(FLAT, compression=compression, level=level)
    assert_same_rows(read_parquet(data, FLAT.schema), pa.Table.from_batches([FLAT]))


@pytest.mark.parametrize("compression, level, message", [
    pytest.param("brotli", None, r"compression='brotli' for format parquet: expected one of",
                 id="brotli-spark-cannot-read"),
    pytest.param("snappy", 3, r"compression='snappy' compression.level=3 .* takes no level",
                 id="snappy-has-no-level"),
    pytest.param("gzip", 30, r"compression.level=30 for format parquet: expected 1..9",
                 id="level-out-of-range-fails-before-writing"),
])
def test_parquet_bad_codec_options(compression, level, message):
    with pytest.raises(OptionError, match=message):
        bulk_codec(FORMATS["parquet"], compression, level)


def test_parquet_batches_and_column_selection():
    data = parquet_bytes(pa.Table.from_batches([FLAT.slice(0, 5), FLAT.slice(5)]))
    wanted = pa.schema([FLAT.schema.field("str"), FLAT.schema.field("i8")])
    table = read_parquet(data, wanted)
    assert table.schema.equals(wanted) and table.num_rows == BASE_ROWS
    with pytest.raises(SchemaMismatchError, match=r"no column \['gone'\]"):
        read_parquet(data, pa.schema([("gone", pa.int8())]))


def test_import_loads_neither_polars_nor_pyarrow_compute():
    code = ("import sys, pyarrow as pa, commit_protocol.formats as f;"
            "print(sorted(m for m in ('polars', 'pyarrow.compute') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
