"""The hybrid Julian/Gregorian calendar ORC files count days in, and the conversions Spark
makes to and from its proleptic Gregorian days (its ``rebaseGregorianToJulianDays``).

Both conversions keep the order of days, so a date statistic converted is still a bound.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

import pyarrow as pa

# 1582-10-15, the first Gregorian day of the hybrid calendar, as days since 1970-01-01; before
# it the hybrid calendar is Julian. The ten days before it exist only in the proleptic calendar.
GREGORIAN_START_DAY = -141_427
GAP_DAYS = range(GREGORIAN_START_DAY - 10, GREGORIAN_START_DAY)
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_EPOCH_JULIAN_DAY_NUMBER = 2_440_588


def rebase(days: pa.Array, convert: Callable[[int], int]) -> pa.Array:
    """``days`` with every value before the Gregorian start converted (few rows, if any)."""
    import pyarrow.compute as pc

    as_int = days.cast(pa.int32())
    early = pc.less(as_int, GREGORIAN_START_DAY)
    if not pc.any(early).as_py():
        return days
    values = [v if v is None or v >= GREGORIAN_START_DAY else convert(v)
              for v in as_int.to_pylist()]
    return pa.array(values, pa.int32()).cast(pa.date32())


def gregorian_to_hybrid(days: int) -> int:
    """Spark's ``rebaseGregorianToJulianDays``: the day number of the same y-m-d in the
    Julian calendar."""
    date = datetime.date.fromordinal(days + _EPOCH_ORDINAL)
    y, m, d = date.year, date.month, date.day
    a = (14 - m) // 12
    y2, m2 = y + 4800 - a, m + 12 * a - 3
    julian_day_number = d + (153 * m2 + 2) // 5 + 365 * y2 + y2 // 4 - 32083
    return julian_day_number - _EPOCH_JULIAN_DAY_NUMBER


def hybrid_to_gregorian(days: int) -> int:
    """The inverse: the proleptic Gregorian day of the Julian y-m-d with day number ``days``."""
    c = days + _EPOCH_JULIAN_DAY_NUMBER + 32082
    d = (4 * c + 3) // 1461
    e = c - 1461 * d // 4
    m = (5 * e + 2) // 153
    day = e - (153 * m + 2) // 5 + 1
    month = m + 3 - 12 * (m // 10)
    year = d - 4800 + m // 10
    return datetime.date(year, month, day).toordinal() - _EPOCH_ORDINAL
