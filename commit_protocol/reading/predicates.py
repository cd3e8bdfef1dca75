"""Filters a read was given, evaluated where rotsink can: against partition values (exactly)
and against a unit's statistics (conservatively).

A :class:`Predicate` is one of Spark's pushed filters in plain terms (the datasource layer
translates ``pyspark.sql.datasource`` filters). Two uses, with two standards:

* **Partition pruning is exact.** A directory's typed partition values decide, in SQL's
  three-valued logic, whether every row of the directory passes a predicate; a directory
  whose result is not true is never read, and Spark does not evaluate those predicates again.
  So only predicates whose value has the column's own type are taken (see
  :func:`takes_partition_predicate`); comparisons follow Spark's: NaN equals NaN and is larger
  than every number, ``-0.0`` equals ``0.0``, strings compare by code point (UTF-8 bytes).
* **Statistics only skip.** :func:`may_match` says False only when no row of a unit can pass;
  Spark still evaluates every data filter on the rows returned.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from commit_protocol.formats.units import ColumnStats

EQ, NULL_SAFE_EQ, LT, LE, GT, GE = "=", "<=>", "<", "<=", ">", ">="
IN, IS_NULL, IS_NOT_NULL = "in", "is null", "is not null"
STARTS_WITH, ENDS_WITH, CONTAINS = "startsWith", "endsWith", "contains"
OPS = (EQ, NULL_SAFE_EQ, LT, LE, GT, GE, IN, IS_NULL, IS_NOT_NULL, STARTS_WITH, ENDS_WITH,
       CONTAINS)
_STRING_OPS = (STARTS_WITH, ENDS_WITH, CONTAINS)
_COMPARISONS = {LT: lambda c: c < 0, LE: lambda c: c <= 0, GT: lambda c: c > 0,
                GE: lambda c: c >= 0}


@dataclass(frozen=True)
class Predicate:
    """``column op value`` (``value``: a tuple for ``in``, None for the null tests), negated
    when ``negated`` (SQL ``NOT``)."""

    op: str
    column: str
    value: Any = None
    negated: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown predicate {self.op!r}: expected one of {OPS}")

    def __str__(self) -> str:
        text = f"{self.column} {self.op}" + ("" if self.value is None else f" {self.value!r}")
        return f"NOT ({text})" if self.negated else text


# -- partition values: exact, three-valued --------------------------------------------------
def compare(a: Any, b: Any) -> int:
    """Spark's order of two non-null values of one type: -1, 0 or 1.

    >>> compare(float("nan"), 1e308), compare(float("nan"), float("nan")), compare(-0.0, 0.0)
    (1, 0, 0)
    """
    if isinstance(a, float) or isinstance(b, float):
        a_nan, b_nan = a != a, b != b
        if a_nan or b_nan:
            return int(a_nan) - int(b_nan)
    return int(a > b) - int(a < b)


def evaluate(predicate: Predicate, value: Any) -> bool | None:
    """The predicate on one value in SQL's three-valued logic (None: unknown, i.e. null).

    >>> evaluate(Predicate(IN, "p", (1, None)), 2) is None, evaluate(Predicate(EQ, "p", 1), None)
    (True, None)
    >>> evaluate(Predicate(NULL_SAFE_EQ, "p", None), None), evaluate(Predicate(IS_NULL, "p"), 3)
    (True, False)
    """
    result = _evaluate(predicate, value)
    if predicate.negated and result is not None:
        return not result
    return result


def _evaluate(p: Predicate, value: Any) -> bool | None:
    if p.op == IS_NULL:
        return value is None
    if p.op == IS_NOT_NULL:
        return value is not None
    if p.op == NULL_SAFE_EQ:
        if value is None or p.value is None:
            return value is None and p.value is None
        return compare(value, p.value) == 0
    if value is None:
        return None
    if p.op == IN:
        if any(v is not None and compare(value, v) == 0 for v in p.value):
            return True
        return None if any(v is None for v in p.value) else False
    if p.value is None:
        return None
    if p.op == EQ:
        return compare(value, p.value) == 0
    if p.op in _COMPARISONS:
        return _COMPARISONS[p.op](compare(value, p.value))
    if p.op == STARTS_WITH:
        return value.startswith(p.value)
    if p.op == ENDS_WITH:
        return value.endswith(p.value)
    return p.value in value  # CONTAINS


def passes(predicates: Iterable[Predicate], values: Mapping[str, Any]) -> bool:
    """Whether every predicate is true for a directory's partition ``values``."""
    return all(evaluate(p, values[p.column]) is True for p in predicates)


def takes_partition_predicate(predicate: Predicate, kind: Any) -> bool:
    """Whether ``predicate`` can be evaluated exactly on partition values of Arrow type
    ``kind``: a supported type, and a value (every value of an ``in``) of that type."""
    import pyarrow as pa

    if predicate.op in (IS_NULL, IS_NOT_NULL):
        return True
    if predicate.op in _STRING_OPS:
        return (pa.types.is_string(kind) or pa.types.is_large_string(kind)) and isinstance(
            predicate.value, str)
    values = predicate.value if predicate.op == IN else (predicate.value,)
    if predicate.op == IN and not isinstance(values, tuple):
        return False
    return all(v is None or _of_type(v, kind) for v in values)


def _of_type(value: Any, kind: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_boolean(kind):
        return isinstance(value, bool)
    if pa.types.is_integer(kind):
        return isinstance(value, int) and not isinstance(value, bool)
    if pa.types.is_floating(kind):
        return isinstance(value, float)
    if pa.types.is_decimal(kind):
        return isinstance(value, decimal.Decimal)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return isinstance(value, str)
    if pa.types.is_date32(kind):
        return isinstance(value, dt.date) and not isinstance(value, dt.datetime)
    if pa.types.is_timestamp(kind):
        # zoned columns compare instants, zone-less ones wall clocks: never mix the two
        return isinstance(value, dt.datetime) and (value.tzinfo is None) == (kind.tz is None)
    return False


# -- statistics: conservative ---------------------------------------------------------------
def may_match(predicate: Predicate, stats: ColumnStats | None, rows: int) -> bool:
    """False only when no row of a unit of ``rows`` rows with these statistics can pass.

    >>> s = ColumnStats(low=10, high=20, null_count=0)
    >>> may_match(Predicate(GT, "x", 20), s, 5), may_match(Predicate(IN, "x", (1, 15)), s, 5)
    (False, True)
    >>> may_match(Predicate(GT, "f", 1.0), ColumnStats(0.0, 0.5, 0), 5)  # NaN > 1.0 in Spark
    True
    """
    if stats is None or predicate.negated:
        return True
    try:
        return _may_match(predicate, stats, rows)
    except TypeError:  # a statistic of another type than the value: no conclusion
        return True


def _may_match(p: Predicate, s: ColumnStats, rows: int) -> bool:
    all_null = s.null_count is not None and s.null_count >= rows
    if p.op == IS_NULL or (p.op == NULL_SAFE_EQ and p.value is None):
        return s.null_count is None or s.null_count > 0
    if p.op == IS_NOT_NULL:
        return not all_null
    if all_null:
        return False  # every other predicate is null (not true) on a null value
    low, high = s.low, s.high
    if low is None or high is None or low != low or high != high:
        return True  # no bounds, or a NaN among them
    if p.op in (EQ, NULL_SAFE_EQ):
        return p.value is None or _within(p.value, low, high)
    if p.op == IN:
        return any(v is None or _within(v, low, high) for v in p.value)
    floating = isinstance(high, float)
    if p.op in (LT, LE) and p.value is not None:
        return compare(low, p.value) < 0 if p.op == LT else compare(low, p.value) <= 0
    if p.op in (GT, GE) and p.value is not None and not floating:
        return compare(high, p.value) > 0 if p.op == GT else compare(high, p.value) >= 0
    if p.op == STARTS_WITH and isinstance(low, str) and isinstance(high, str):
        prefix = p.value
        return not (high < prefix or low[:len(prefix)] > prefix)
    return True


def _within(value: Any, low: Any, high: Any) -> bool:
    if isinstance(value, float) and value != value:
        return True  # NaN: left out of the bounds, so possibly there
    return compare(low, value) <= 0 <= compare(high, value)
