"""Filter pushdown for ``spark.read.format("rotsink")``: which filters a read takes, and
whether this planning may take any.

Spark hands a Python reader its filters through ``DataSourceReader.pushFilters`` (PySpark
>= 4.1) only when ``spark.sql.python.filterPushdown.enabled`` is true (false by default), and
when it is false a reader *class* that overrides ``pushFilters`` fails every read
(``DATA_SOURCE_PUSHDOWN_DISABLED``, PySpark 4.3's ``plan_data_source_read``). The planning
worker knows which case it is in, but tells the data source nothing, so
:func:`planning_allows_pushdown` asks the call stack: the reader is being created either by
the pushdown worker (``data_source_pushdown_filters``) or by the plain planning worker with
its ``enable_pushdown`` flag. Anything else (another PySpark, a caller of our own) gets the
reader without ``pushFilters``: pruning may be lost, a read never is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

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
    takes_partition_predicate,
)

_PUSHDOWN_WORKER = "data_source_pushdown_filters.py"
_PLANNING_WORKER = "plan_data_source_read.py"
_OPS = {"EqualTo": EQ, "EqualNullSafe": NULL_SAFE_EQ, "LessThan": LT, "LessThanOrEqual": LE,
        "GreaterThan": GT, "GreaterThanOrEqual": GE, "In": IN, "IsNull": IS_NULL,
        "IsNotNull": IS_NOT_NULL, "StringStartsWith": STARTS_WITH,
        "StringEndsWith": ENDS_WITH, "StringContains": CONTAINS}


def planning_allows_pushdown() -> bool:
    """Whether the Spark planning that creates this reader lets it override ``pushFilters``
    (see the module docstring). Runs in the planning worker, on the driver."""
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.basename(frame.f_code.co_filename)
        if name == _PUSHDOWN_WORKER:
            return True
        if name == _PLANNING_WORKER and "enable_pushdown" in frame.f_locals:
            return frame.f_locals["enable_pushdown"] is True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def to_predicate(spark_filter: Any) -> Predicate | None:
    """A ``pyspark.sql.datasource`` filter as a :class:`Predicate`; None for a filter on a
    nested field or of a kind rotsink does not evaluate."""
    negated = type(spark_filter).__name__ == "Not"
    inner = spark_filter.child if negated else spark_filter
    op = _OPS.get(type(inner).__name__)
    attribute: tuple[str, ...] = tuple(getattr(inner, "attribute", ()))
    if op is None or len(attribute) != 1:
        return None
    value = getattr(inner, "value", None)
    if op == IN:
        value = tuple(value) if isinstance(value, (list, tuple)) else None
        if value is None:
            return None
    return Predicate(op, attribute[0], value, negated)


@dataclass(frozen=True)
class Pushed:
    """Predicates a read took: ``planning`` ones prune directories when the read is planned,
    ``in_task`` ones when a task opens a directory (timestamp partition columns: their
    directories are read in the session time zone, which only tasks know), ``data`` ones
    skip Parquet row groups and ORC stripes by their statistics. ``kept`` are the filters
    Spark must still evaluate: all but those evaluated exactly on partition values."""

    planning: tuple[Predicate, ...]
    in_task: tuple[Predicate, ...]
    data: tuple[Predicate, ...]
    kept: tuple[Any, ...]


def push(filters: Iterable[Any], schema: pa.Schema, partition_by: tuple[str, ...]) -> Pushed:
    """Sort Spark's ``filters`` for a read of ``schema`` partitioned by ``partition_by``."""
    planning, in_task, data, kept = [], [], [], []
    for spark_filter in filters:
        predicate = to_predicate(spark_filter)
        if predicate is None or predicate.column not in schema.names:
            kept.append(spark_filter)
            continue
        kind = schema.field(predicate.column).type
        if predicate.column not in partition_by:
            data.append(predicate)
            kept.append(spark_filter)
        elif not takes_partition_predicate(predicate, kind):
            kept.append(spark_filter)
        elif pa.types.is_timestamp(kind) and kind.tz is not None:
            in_task.append(predicate)
        else:
            planning.append(predicate)
    return Pushed(tuple(planning), tuple(in_task), tuple(data), tuple(kept))
