"""Pushed filters evaluated by rotsink: exactly on partition values (SQL's three-valued logic,
Spark's comparisons), conservatively on units' statistics."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from commit_protocol.formats.units import ColumnStats
from commit_protocol.reading.predicates import (
    CONTAINS,
    ENDS_WITH,
    EQ,
    GE,
    GT,
    IN,
    IS_NOT_NULL,
    IS_NULL,
    LE,
    LT,
    NULL_SAFE_EQ,
    STARTS_WITH,
    Predicate,
    evaluate,
    may_match,
    passes,
    takes_partition_predicate,
)

NAN = float("nan")

# (predicate, value, expected result in SQL, why)
EVALUATIONS = [
    (Predicate(EQ, "p", 1), 1, True, "equal"),
    (Predicate(EQ, "p", 1), None, None, "null = 1 is null"),
    (Predicate(EQ, "p", NAN), NAN, True, "Spark: NaN = NaN"),
    (Predicate(EQ, "p", 0.0), -0.0, True, "Spark: -0.0 = 0.0"),
    (Predicate(GT, "p", 1e308), NAN, True, "Spark: NaN is larger than every number"),
    (Predicate(LT, "p", NAN), 1.0, True, "every number is below NaN"),
    (Predicate(NULL_SAFE_EQ, "p", None), None, True, "null <=> null"),
    (Predicate(NULL_SAFE_EQ, "p", 1), None, False, "null <=> 1 is false, never null"),
    (Predicate(IN, "p", (1, 2)), 2, True, "in the list"),
    (Predicate(IN, "p", (1, None)), 2, None, "not found, a null in the list: null"),
    (Predicate(IN, "p", (1, 2)), 3, False, "not found"),
    (Predicate(IN, "p", (1, 2), negated=True), 3, True, "NOT IN"),
    (Predicate(IN, "p", (1, None), negated=True), 3, None, "NOT IN with a null: null"),
    (Predicate(IS_NULL, "p"), None, True, "is null"),
    (Predicate(IS_NOT_NULL, "p"), None, False, "is not null"),
    (Predicate(LE, "p", "b"), "ab", True, "strings by code point"),
    (Predicate(GT, "p", "z"), "é", True, "é (U+00E9) after z, as UTF-8 bytes order it"),
    (Predicate(STARTS_WITH, "p", "d-0"), "d-007", True, "LIKE 'd-0%'"),
    (Predicate(ENDS_WITH, "p", "07"), "d-007", True, "LIKE '%07'"),
    (Predicate(CONTAINS, "p", "-00"), "d-007", True, "LIKE '%-00%'"),
    (Predicate(STARTS_WITH, "p", "x"), None, None, "null LIKE: null"),
    (Predicate(EQ, "p", 1, negated=True), None, None, "NOT null is null"),
    (Predicate(GE, "p", decimal.Decimal("1.5")), decimal.Decimal("1.50"), True,
     "decimals by value"),
    (Predicate(LT, "p", dt.date(2024, 3, 1)), dt.date(2024, 2, 29), True, "dates"),
]


@pytest.mark.parametrize("predicate, value, expected, why", EVALUATIONS,
                         ids=[case[3] for case in EVALUATIONS])
def test_evaluate_follows_sql_and_spark(predicate, value, expected, why):
    assert evaluate(predicate, value) is expected, why


def test_a_directory_passes_only_when_every_predicate_is_true():
    predicates = [Predicate(GE, "day", "d-005"), Predicate(IS_NOT_NULL, "kind")]
    assert passes(predicates, {"day": "d-007", "kind": "a"})
    assert not passes(predicates, {"day": "d-007", "kind": None})
    assert not passes([Predicate(EQ, "day", "x")], {"day": None})  # null: not true


# (predicate, column type, taken, why)
TYPES = [
    (Predicate(EQ, "p", 1), pa.int32(), True, "an int for an int column"),
    (Predicate(EQ, "p", True), pa.int32(), False, "a bool is not an int here"),
    (Predicate(EQ, "p", 1.5), pa.float64(), True, "a float for a double column"),
    (Predicate(EQ, "p", dt.datetime(2024, 1, 1)), pa.date32(), False, "a datetime is no date"),
    (Predicate(EQ, "p", dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)),
     pa.timestamp("us", "UTC"), True, "an instant for a zoned timestamp"),
    (Predicate(EQ, "p", dt.datetime(2024, 1, 1)), pa.timestamp("us", "UTC"), False,
     "a wall clock for a zoned timestamp: never compared"),
    (Predicate(EQ, "p", dt.datetime(2024, 1, 1)), pa.timestamp("us"), True, "ntz wall clock"),
    (Predicate(IN, "p", ("a", None)), pa.string(), True, "strings and a null"),
    (Predicate(IN, "p", ("a", 1)), pa.string(), False, "a list of mixed types"),
    (Predicate(STARTS_WITH, "p", "a"), pa.int64(), False, "LIKE on a non-string column"),
    (Predicate(EQ, "p", [1, 2]), pa.int64(), False, "an array value"),
    (Predicate(IS_NULL, "p"), pa.binary(), True, "null tests on any type"),
    (Predicate(EQ, "p", b"x"), pa.binary(), False, "binary partition values: not evaluated"),
]


@pytest.mark.parametrize("predicate, kind, taken, why", TYPES, ids=[c[3] for c in TYPES])
def test_only_values_of_the_column_type_are_evaluated_on_partitions(predicate, kind, taken,
                                                                     why):
    assert takes_partition_predicate(predicate, kind) is taken, why


INTS = ColumnStats(10, 20, 0)
SOME_NULLS = ColumnStats(10, 20, 3)
ALL_NULL = ColumnStats(None, None, 5)
FLOATS = ColumnStats(0.0, 0.5, 0)
STRINGS = ColumnStats("d-003", "d-009", 0)
# (predicate, statistics of a unit of 5 rows, may match, why)
SKIPS = [
    (Predicate(EQ, "x", 15), INTS, True, "inside the bounds"),
    (Predicate(EQ, "x", 21), INTS, False, "above the maximum"),
    (Predicate(LT, "x", 10), INTS, False, "x < 10 with minimum 10"),
    (Predicate(LE, "x", 10), INTS, True, "x <= 10 with minimum 10"),
    (Predicate(GT, "x", 20), INTS, False, "x > 20 with maximum 20"),
    (Predicate(GE, "x", 20), INTS, True, "x >= 20 with maximum 20"),
    (Predicate(IN, "x", (1, 25)), INTS, False, "no listed value inside"),
    (Predicate(IN, "x", (1, None)), INTS, True, "a null in the list: kept (Spark decides)"),
    (Predicate(IS_NULL, "x"), INTS, False, "no null in the unit"),
    (Predicate(IS_NULL, "x"), SOME_NULLS, True, "some nulls"),
    (Predicate(IS_NOT_NULL, "x"), ALL_NULL, False, "only nulls"),
    (Predicate(EQ, "x", 15), ALL_NULL, False, "null = 15 is never true"),
    (Predicate(NULL_SAFE_EQ, "x", None), INTS, False, "x <=> null: no null"),
    (Predicate(EQ, "x", 15, negated=True), INTS, True, "negations are not pruned"),
    (Predicate(GT, "f", 1.0), FLOATS, True, "float bounds leave NaN out: NaN > 1.0"),
    (Predicate(LT, "f", -1.0), FLOATS, False, "NaN is never below a number"),
    (Predicate(EQ, "f", NAN), FLOATS, True, "NaN = NaN, and NaN is not in the bounds"),
    (Predicate(EQ, "f", 1.0), ColumnStats(NAN, NAN, 0), True, "NaN bounds say nothing"),
    (Predicate(STARTS_WITH, "s", "d-00"), STRINGS, True, "a prefix inside the range"),
    (Predicate(STARTS_WITH, "s", "d-01"), STRINGS, False, "every value below the prefix"),
    (Predicate(STARTS_WITH, "s", "d-000"), STRINGS, False, "every value above the prefix"),
    (Predicate(EQ, "x", "15"), INTS, True, "a value of another type: no conclusion"),
    (Predicate(EQ, "x", 15), ColumnStats(None, None, None), True, "no statistics"),
]


@pytest.mark.parametrize("predicate, stats, expected, why", SKIPS, ids=[c[3] for c in SKIPS])
def test_statistics_skip_a_unit_only_when_no_row_can_pass(predicate, stats, expected, why):
    assert may_match(predicate, stats, 5) is expected, why
