"""Which filters a read takes, and whether the planning that creates the reader lets it take
any (``datasource.reading.pushdown``): decided from the calling PySpark planning worker."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

# PySpark 4.1's filter classes, looked up when a test runs: this module is collected on 4.0
# too (``pytest -m compat``), which has none
from pyspark.sql import datasource as spark_filters

from commit_protocol.reading.predicates import GT, IN, Predicate
from datasource.reading.pushdown import planning_allows_pushdown, push, to_predicate


def call_from(filename: str, **local_values) -> bool:
    """``planning_allows_pushdown()`` as called by a function of module file ``filename``
    with ``local_values`` among its locals (as PySpark's planning workers call
    ``DataSource.reader``)."""
    source = "def planner(check):\n" + "".join(
        f"    {name} = {value!r}\n" for name, value in local_values.items()
    ) + "    return check()\n"
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["planner"](planning_allows_pushdown)


def test_the_pushdown_worker_allows_filters():
    assert call_from("/spark/python/pyspark/sql/worker/data_source_pushdown_filters.py")


def test_the_plain_planning_worker_allows_them_only_with_the_conf():
    worker = "/spark/python/pyspark/sql/worker/plan_data_source_read.py"
    assert call_from(worker, enable_pushdown=True)
    assert not call_from(worker, enable_pushdown=False)


def test_any_other_caller_gets_the_reader_without_filters():
    """Safe by default: a reader without pushFilters never fails a read."""
    assert not planning_allows_pushdown()
    assert not call_from("/somewhere/else.py")


def test_spark_filters_become_predicates():
    assert to_predicate(spark_filters.GreaterThan(("x",), 3)) == Predicate(GT, "x", 3)
    spark_in = spark_filters.In(("p",), [1, None])  # type: ignore[arg-type]  # what Spark passes: a list
    assert to_predicate(spark_filters.Not(spark_in)) == Predicate(IN, "p", (1, None), True)
    assert to_predicate(spark_filters.EqualTo(("a", "b"), 1)) is None  # a nested field


def test_partition_filters_are_taken_data_filters_stay_with_spark():
    schema = pa.schema([("x", pa.int64()), ("day", pa.string()),
                        ("at", pa.timestamp("us", "UTC"))])
    on_day, on_x = spark_filters.EqualTo(("day",), "d-1"), spark_filters.GreaterThan(("x",), 1)
    wrong_type, on_at = spark_filters.EqualTo(("day",), 7), spark_filters.IsNull(("at",))
    unknown = spark_filters.StringContains(("nope",), "a")
    pushed = push([on_day, on_x, wrong_type, on_at, unknown], schema, ("day", "at"))
    assert [p.column for p in pushed.planning] == ["day"]
    assert [p.column for p in pushed.in_task] == ["at"]  # read in the session time zone
    assert [p.column for p in pushed.data] == ["x"]
    assert pushed.kept == (on_x, wrong_type, unknown)  # by reference, as Spark requires
    at_value = spark_filters.EqualTo(("at",), dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    assert push([at_value], schema, ("day", "at")).kept == ()
