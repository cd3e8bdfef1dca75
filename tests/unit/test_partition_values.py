"""Partition values spelled as Spark's cast to string spells them, and parsed back."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import struct

import pyarrow as pa
import pytest

from commit_protocol.vocabulary.partition_values import (
    java_float_string,
    parse_partition_value,
    spark_strings,
)

# (value, Java's Double.toString, why)
DOUBLES = [
    (1.0, "1.0", "a fraction digit always"),
    (100.0, "100.0", "plain below 1e7"),
    (9999999.0, "9999999.0", "last plain value"),
    (1e7, "1.0E7", "scientific from 1e7"),
    (0.001, "0.001", "plain from 1e-3"),
    (0.000999, "9.99E-4", "scientific below 1e-3"),
    (-2.5e-10, "-2.5E-10", "negative exponent and sign"),
    (5e-324, "4.9E-324", "one digit is not enough: the closer of two"),
    (1.7976931348623157e308, "1.7976931348623157E308", "largest double"),
    (0.30000000000000004, "0.30000000000000004", "shortest that reads back"),
    (float("nan"), "NaN", ""),
    (float("-inf"), "-Infinity", ""),
    (-0.0, "-0.0", "signed zero"),
]


@pytest.mark.parametrize("value, java, why", DOUBLES, ids=[d[1] for d in DOUBLES])
def test_doubles_as_java_prints_them(value, java, why):
    assert java_float_string(value) == java, why


@pytest.mark.parametrize("value, java", [(1.1, "1.1"), (0.1, "0.1"), (3.4e38, "3.4E38"),
                                         (1e10, "1.0E10"), (16777217.0, "1.6777216E7")])
def test_floats_as_java_prints_the_32_bit_value(value, java):
    assert java_float_string(value, single=True) == java


def test_random_doubles_and_floats_read_back_exactly():
    rng = random.Random(7)
    for _ in range(5000):
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if value == value and abs(value) != float("inf"):
            assert float(java_float_string(value)) == value
        single = struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))[0]
        if single == single and abs(single) != float("inf"):
            text = java_float_string(single, single=True)
            assert struct.unpack("<f", struct.pack("<f", float(text)))[0] == single


def test_only_distinct_values_are_formatted_and_nulls_stay_null():
    column = pa.array([0.5, None, 0.5, 1e300] * 1000)
    assert spark_strings(column).to_pylist()[:4] == ["0.5", None, "0.5", "1.0E300"]


@pytest.mark.parametrize("kind, values, spelled", [
    (pa.timestamp("us", tz="Asia/Kolkata"),
     [dt.datetime(2024, 1, 1, 4, 30, tzinfo=dt.timezone.utc),
      dt.datetime(2024, 1, 1, 4, 30, 0, 120000, tzinfo=dt.timezone.utc)],
     ["2024-01-01 10:00:00", "2024-01-01 10:00:00.12"]),
    (pa.decimal128(38, 18), [decimal.Decimal(0), decimal.Decimal("-1.5")],
     ["0.000000000000000000", "-1.500000000000000000"]),
    (pa.date32(), [dt.date(2024, 2, 29)], ["2024-02-29"]),
    (pa.bool_(), [True, False], ["true", "false"]),
], ids=["timestamp-in-its-zone", "decimal-plain", "date", "boolean"])
def test_other_types_spelled_and_parsed_back(kind, values, spelled):
    assert spark_strings(pa.array(values, kind)).to_pylist() == spelled
    zone = getattr(kind, "tz", None) or "UTC"
    assert [parse_partition_value(s, kind, time_zone=zone).as_py() for s in spelled] == values


@pytest.mark.parametrize("text, zone, utc", [
    ("2024-03-10 02:30:00", "America/Los_Angeles", "2024-03-10 10:30:00"),  # gap: shifted
    ("2024-11-03 01:30:00", "America/Los_Angeles", "2024-11-03 08:30:00"),  # overlap: first
    ("2024-01-01 00:00:00", "+05:30", "2023-12-31 18:30:00"),
    ("2024-01-01 00:00:00", "GMT-8", "2024-01-01 08:00:00"),
], ids=["dst-gap", "dst-overlap", "offset", "gmt-offset"])
def test_timestamps_read_in_the_session_time_zone(text, zone, utc):
    kind = pa.timestamp("us", tz="UTC")
    value = parse_partition_value(text, kind, time_zone=zone).as_py()
    assert value.strftime("%Y-%m-%d %H:%M:%S") == utc
