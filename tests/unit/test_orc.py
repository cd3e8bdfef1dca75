"""ORC files as Spark writes them: every type round-trips through rotsink's writer and reader,
the hybrid calendar's dates, Spark's timestamp_ntz attribute, and the values refused before
they are staged (``tests/spark/test_orc_spark.py`` checks Spark's own reader)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.orc as orc
import pytest

from commit_protocol.formats import FORMATS
from commit_protocol.formats.codecs import bulk_codec
from commit_protocol.formats.hybrid_calendar import gregorian_to_hybrid, hybrid_to_gregorian
from commit_protocol.formats.orc import NTZ_ATTRIBUTE, check_rows, read_file
from commit_protocol.vocabulary.errors import OptionError, UnencodableValueError
from datasource.options.sink import parse_sink_options
from tests.support.parquet import orc_bytes

EPOCH = dt.date(1970, 1, 1)


def days(d: dt.date) -> int:
    return (d - EPOCH).days


EVERY_TYPE = pa.table({
    "b": pa.array([True, None, False], pa.bool_()),
    "i8": pa.array([1, None, -128], pa.int8()),
    "i16": pa.array([2, 3, None], pa.int16()),
    "i32": pa.array([3, None, 2**31 - 1], pa.int32()),
    "i64": pa.array([2**62, None, -1], pa.int64()),
    "f": pa.array([1.5, float("inf"), None], pa.float32()),
    "d": pa.array([2.5, None, -0.0], pa.float64()),
    "s": pa.array(["héllo", None, ""]),
    "bin": pa.array([b"\x00\x01", None, b""], pa.binary()),
    "date": pa.array([dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(1500, 3, 1)], pa.date32()),
    "ts": pa.array([dt.datetime(2024, 6, 1, 12, 0, 0, 1), None, dt.datetime(1700, 1, 1)],
                   pa.timestamp("us", tz="UTC")),
    "ntz": pa.array([dt.datetime(1900, 1, 1, 0, 0, 0, 123456), dt.datetime(1, 1, 1), None],
                    pa.timestamp("us")),
    "dec": pa.array([decimal.Decimal("1.23"), None, decimal.Decimal("-0.01")],
                    pa.decimal128(10, 2)),
    "dec38": pa.array([decimal.Decimal("12345678901234567890.123456789012345678"), None,
                       decimal.Decimal("0")], pa.decimal128(38, 18)),
    "arr": pa.array([[1, 2], None, []], pa.list_(pa.int64())),
    "dates": pa.array([[dt.date(1000, 1, 1), None], None, [dt.date(2000, 1, 1)]],
                      pa.list_(pa.date32())),
    "st": pa.array([{"x": dt.datetime(2000, 1, 1), "y": "a"}, None, {"x": None, "y": None}],
                   pa.struct([("x", pa.timestamp("us")), ("y", pa.string())])),
    "m": pa.array([[("k", dt.date(1200, 5, 5))], None, []], pa.map_(pa.string(), pa.date32())),
})


@pytest.mark.parametrize("compression", ["zstd", "snappy", "lz4", "zlib", "none"])
def test_every_type_round_trips(compression):
    data = orc_bytes(EVERY_TYPE, compression=compression)
    assert read_file(data, EVERY_TYPE.schema).equals(EVERY_TYPE)


def test_sliced_and_chunked_input_round_trips():
    table = pa.concat_tables([EVERY_TYPE.slice(1), EVERY_TYPE, EVERY_TYPE.slice(0, 1)])
    data = orc_bytes(table)
    assert read_file(data, table.schema).equals(table.combine_chunks())


def test_stored_as_spark_stores_it():
    """timestamp_ntz as bigint microseconds with Spark's attribute; old dates in the hybrid
    calendar (as in a file Spark 4.3 wrote: 1500-01-01 is stored as the day number of the
    proleptic 1500-01-10; 0001-01-01 two days before its proleptic number)."""
    table = pa.table({
        "ntz": pa.array([dt.datetime(2024, 6, 1, 12)], pa.timestamp("us")),
        "d": pa.array([dt.date(1500, 1, 1)], pa.date32()),
        "d1": pa.array([dt.date(1, 1, 1)], pa.date32()),
        "modern": pa.array([dt.date(1582, 10, 15)], pa.date32()),
    })
    stored = orc.ORCFile(pa.BufferReader(orc_bytes(table))).read()
    assert stored.schema.field("ntz").type == pa.int64()
    assert stored.schema.field("ntz").metadata == NTZ_ATTRIBUTE
    assert stored.column("ntz").to_pylist() == [1717243200000000]
    assert stored.column("d").to_pylist() == [dt.date(1500, 1, 10)]
    assert stored.column("d1").cast(pa.int32()).to_pylist() == [days(dt.date(1, 1, 1)) - 2]
    assert stored.column("modern").to_pylist() == [dt.date(1582, 10, 15)]


def test_calendar_conversion_is_its_own_inverse_before_the_gregorian_start():
    start = days(dt.date(1, 1, 1))
    for day in range(start, days(dt.date(1582, 10, 5)), 997):
        assert hybrid_to_gregorian(gregorian_to_hybrid(day)) == day


@pytest.mark.parametrize("value, message", [
    pytest.param(pa.array([dt.date(2000, 1, 1), dt.date(1582, 10, 10)], pa.date32()),
                 r"column 'v' holds the date 1582-10-10, which does not exist in the hybrid",
                 id="date-in-the-calendar-gap"),
    pytest.param(pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, 500000)],
                          pa.timestamp("us", tz="UTC")),
                 r"holds 1969-12-31 23:59:59.500000\+00:00: pyarrow's ORC writer stores "
                 r"timestamps before 1970 with a fraction", id="pre-1970-fraction"),
    pytest.param(pa.array([dt.datetime(1600, 1, 1)], pa.timestamp("us", tz="UTC")),
                 r"holds 1600-01-01 00:00:00\+00:00, outside 1677-09-21..2262-04-11",
                 id="before-nanosecond-range"),
    pytest.param(pa.array([[dt.datetime(3000, 1, 1)]], pa.list_(pa.timestamp("us", tz="UTC"))),
                 r"column 'v\[\]' holds 3000-01-01", id="nested-after-nanosecond-range"),
])
def test_values_orc_cannot_hold_are_refused_naming_column_and_value(value, message):
    with pytest.raises(UnencodableValueError, match=message):
        check_rows(pa.record_batch({"v": value}))


def test_values_orc_holds_pass_the_check():
    check_rows(pa.RecordBatch.from_pydict(EVERY_TYPE.to_pydict(), schema=EVERY_TYPE.schema))


def test_a_refused_row_is_never_staged(tmp_path):
    """The check runs before the append: nothing of the batch reaches the staged file."""
    from tests.unit.test_task_writer import config, run_task

    cfg = config(tmp_path, format="orc", compression="zstd", file_suffix=".orc")
    bad = pa.record_batch({"id": pa.array([1], pa.int64()),
                           "t": pa.array([-1], pa.timestamp("us", tz="UTC"))})
    with pytest.raises(UnencodableValueError):
        run_task(tmp_path, cfg, 0, [bad])
    assert not any(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize("options, message", [
    pytest.param({"compression": "gzip"}, r"compression='gzip' for format orc: expected one of "
                 r"zstd, snappy, lz4, zlib, none", id="unknown-codec"),
    pytest.param({"compression": "zstd", "compression.level": "3"},
                 r"compression.level=3 for format orc: pyarrow's orc writer takes no "
                 r"compression level", id="no-level"),
    pytest.param({"parquet.rowGroupBytes": "8m"}, r"option parquet.rowGroupBytes='8m' is for "
                 r"format parquet; this path is format orc \(its option is orc.stripeBytes\)",
                 id="parquet-option-on-orc"),
    pytest.param({"encryption.key": "env:ROTSINK_TEST_KEY"},
                 r"option encryption.key with format orc: pyarrow has no ORC encryption",
                 id="encryption-refused"),
])
def test_bad_orc_options_name_option_and_value(monkeypatch, options, message):
    monkeypatch.setenv("ROTSINK_TEST_KEY", "A" * 43 + "=")
    with pytest.raises(OptionError, match=message):
        parse_sink_options({"path": "/tmp/out", "format": "orc", **options})


def test_orc_defaults_and_stripe_option():
    config = parse_sink_options({"path": "/tmp/out", "format": "orc", "orc.stripeBytes": "8m"})
    assert (config.compression, config.row_group_bytes, config.file_suffix) == (
        "zstd", 8 << 20, ".orc")
    assert parse_sink_options({"path": "/tmp/out", "format": "orc"}).row_group_bytes == 64 << 20
    assert bulk_codec(FORMATS["orc"], "SNAPPY", None) == "snappy"
    with pytest.raises(OptionError, match=r"orc.stripeBytes='1m' is for format orc; this path "
                                          r"is format parquet \(its option is parquet.rowGroup"):
        parse_sink_options({"path": "/tmp/out", "format": "parquet", "orc.stripeBytes": "1m"})


def test_void_columns_are_refused_for_orc():
    from pyspark.sql.types import NullType, StructField, StructType

    from datasource.writing.schema_check import check_schema

    with pytest.raises(OptionError, match=r"format orc cannot hold column 'n' of type void"):
        check_schema("orc", (), StructType([StructField("n", NullType())]))
