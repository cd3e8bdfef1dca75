"""Partition values as Spark spells them in directory names, and back.

Spark names a partition directory by ``CAST(value AS STRING)`` in the session time zone
(``FileFormatWriter``'s partition path expression), so rotsink must spell every type exactly
as that cast does, or Spark's readers see other values (or other types) than its own sink
writes: Java's ``Double.toString`` (``1.0E10``, ``NaN``, ``-Infinity``), ``Float.toString``
of the 32-bit value (``1.1``, not ``1.100000023841858``), plain decimals (``0.000``, never
``0E-3``), timestamps without trailing zeros of the fraction (``10:00:00.5``).

The writer formats only the distinct values of a batch (a dictionary encoding), so the
Python formatting runs once per directory, not once per row.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The fraction of a formatted timestamp without its trailing zeros (and without the dot
# when nothing is left), as Spark's fraction formatter prints it.
_TRAILING_FRACTION_ZEROS = r"(\.\d*[1-9])0+$|\.0+$"
_TIMESTAMP = re.compile(r"^(\d{4,})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?$")


def spark_strings(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``column`` as Spark casts it to strings for partition directory names.

    Timestamps are formatted in their type's time zone, which Spark sets to the session
    time zone in the Arrow batches it hands a Python sink.

    >>> spark_strings(pa.array([1e10, 0.1, None, float("nan")])).to_pylist()
    ['1.0E10', '0.1', None, 'NaN']
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = column.type
    if pa.types.is_timestamp(kind):
        text = pc.strftime(column, format="%Y-%m-%d %H:%M:%S")
        return pc.replace_substring_regex(text, pattern=_TRAILING_FRACTION_ZEROS,
                                          replacement=r"\1")
    if pa.types.is_floating(kind):
        single = kind == pa.float32()
        return _per_distinct(column, lambda v: java_float_string(v, single=single))
    if pa.types.is_decimal(kind):
        return _per_distinct(column, lambda v: format(v, "f"))
    return pc.cast(column, pa.string())


def _per_distinct(column: pa.Array, spell: Callable[[Any], str]) -> pa.Array:
    encoded = pc.dictionary_encode(column)
    spelled = pa.array([spell(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return pc.take(spelled, encoded.indices)


def java_float_string(value: float, *, single: bool = False) -> str:
    """Java's ``Double.toString`` (``Float.toString`` when ``single``), which Spark's cast
    uses: the shortest decimal that reads back as the same value (of one or two digits,
    the closest), in plain notation from 1e-3 to below 1e7 and ``d.dddE<n>`` outside.

    >>> [java_float_string(v) for v in (1.0, 123456.789, 1e7, 0.001, 1e-5, 5e-324, -0.0)]
    ['1.0', '123456.789', '1.0E7', '0.001', '1.0E-5', '4.9E-324', '-0.0']
    >>> java_float_string(1.100000023841858, single=True)
    '1.1'

    Java 17's ``Double.toString`` is not always the shortest (fixed in Java 19): for the
    rare doubles where it prints a longer decimal, the directory names differ from Spark's.
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    number = np.float32(value) if single else np.float64(value)
    digits, exponent = _scientific(np.format_float_scientific(number, unique=True))
    if len(digits) == 1:  # Java considers two digits too and takes the closer decimal
        digits, exponent = _scientific(np.format_float_scientific(number, precision=1,
                                                                  unique=False))
    sign = "-" if value < 0 else ""
    if not -3 <= exponent < 7:
        return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole = digits[:exponent + 1].ljust(exponent + 1, "0")
    return f"{sign}{whole}.{digits[exponent + 1:] or '0'}"


def _scientific(text: str) -> tuple[str, int]:
    """``("11", 0)`` from numpy's ``"-1.10e+00"``: significant digits without trailing
    zeros, and the decimal exponent of the first."""
    mantissa, _, exponent = text.lstrip("-").partition("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    return digits, int(exponent)


def parse_partition_value(text: str | None, kind: pa.DataType, *,
                          time_zone: str = "UTC") -> pa.Scalar:
    """The typed value of a directory name's ``text`` (None: the default partition), as
    Spark's readers parse it; timestamps are read in ``time_zone`` (the reading session's).

    >>> parse_partition_value("1.0E10", pa.float64()).as_py()
    10000000000.0
    >>> parse_partition_value("2024-01-01 10:00:00.5", pa.timestamp("us", tz="UTC"),
    ...                       time_zone="Europe/Paris").as_py().isoformat()
    '2024-01-01T09:00:00.500000+00:00'
    """
    if text is None:
        return pa.scalar(None, kind)
    if pa.types.is_floating(kind):
        return pa.scalar(float(text), kind)  # also "NaN", "Infinity", "-Infinity"
    if pa.types.is_decimal(kind):
        exact = decimal.Decimal(text).quantize(decimal.Decimal(1).scaleb(-kind.scale))
        return pa.scalar(exact, kind)
    if pa.types.is_timestamp(kind):
        return _timestamp(text, kind, time_zone)
    return pc.cast(pa.scalar(text, pa.string()), kind)


def _timestamp(text: str, kind: pa.TimestampType, time_zone: str) -> pa.Scalar:
    """A wall-clock time of ``time_zone`` (naive for ``TIMESTAMP_NTZ``) as a timestamp.

    In a gap of a daylight-saving change the earlier offset applies (02:30 reads as 03:30
    summer time), and in an overlap the first, as Java's ``ZonedDateTime`` does.
    """
    match = _TIMESTAMP.match(text)
    if match is None:
        raise ValueError(f"partition value {text!r}: expected a timestamp such as "
                         "'2024-01-01 10:00:00.5'")
    year, month, day, hour, minute, second, fraction = match.groups()
    micros = int((fraction or "0").ljust(9, "0")[:6])
    wall = dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                       micros)
    if kind.tz is None:
        return pa.scalar(wall, kind)
    return pa.scalar(wall.replace(tzinfo=zone(time_zone)).astimezone(dt.timezone.utc), kind)


def utc_partition_value(text: str, time_zone: str | None, *, where: str) -> str:
    """A timestamp directory's value, named in ``time_zone`` (the session's, as the tasks
    found it), as the UTC instant Delta records: ISO 8601 with microseconds and ``Z``.

    >>> utc_partition_value("2026-12-01 10:00:00.5", "America/Los_Angeles", where="f")
    '2026-12-01T18:00:00.500000Z'
    """
    if time_zone is None:
        from commit_protocol.vocabulary.errors import TableError

        raise TableError(f"{where}: a timestamp partition value ({text!r}) whose time zone "
                         "no batch recorded")
    instant = _timestamp(text, pa.timestamp("us", "UTC"), time_zone).as_py()
    return instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_OFFSET = re.compile(r"^(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d\d))?$")


def zone(name: str) -> dt.tzinfo:
    """A Spark session time zone: a region (``Europe/Paris``) or an offset (``+08:00``,
    ``GMT-5``).

    >>> zone("UTC+8"), zone("Z")
    (datetime.timezone(datetime.timedelta(seconds=28800)), datetime.timezone.utc)
    """
    if name in ("Z", "UTC", "GMT", "UT"):
        return dt.timezone.utc
    if match := _OFFSET.match(name):
        sign, hours, minutes = match.groups()
        offset = dt.timedelta(hours=int(hours), minutes=int(minutes or 0))
        return dt.timezone(-offset if sign == "-" else offset)
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)
