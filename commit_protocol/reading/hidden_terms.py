"""Directories of Iceberg's hidden partitions skipped by filters on their source columns.

Under ``days(ts)`` a directory ``ts_day=2026-12-01`` holds only rows whose ``ts`` falls on that
day, so a read with ``ts >= '2026-12-02'`` need not open it: the filter is on a data column
(Spark still evaluates it on every row returned), and the directory's value bounds the column.
Each of Iceberg's transforms but ``bucket`` and ``void`` keeps order (a smaller source value
never has a larger transformed value), so a comparison of the source with a value ``v``
prunes by comparing the directory's value with ``transform(v)``; equality and ``IN`` prune by
every transform. ``transform(v)`` is computed by the very code that named the directories
when the files were written (:func:`commit_protocol.tables.iceberg.transforms.directory_values`),
so the two cannot disagree. Where anything is uncertain (a value of another type, a zone-less
value for a zoned column) the directory is read: skipping only ever saves work.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from commit_protocol.reading.predicates import (
    EQ,
    GE,
    GT,
    IN,
    IS_NOT_NULL,
    IS_NULL,
    LE,
    LT,
    NULL_SAFE_EQ,
    Predicate,
)
from commit_protocol.vocabulary.partition_terms import PartitionTerm

_UNORDERED = ("bucket", "void")


def may_hold(predicates: Iterable[Predicate], terms: Iterable[PartitionTerm],
             values: Mapping[str, str | None], schema: pa.Schema) -> bool:
    """False only when no row of a directory with hidden-term ``values`` (directory key ->
    unescaped text, None for a null) can pass every one of ``predicates``."""
    by_source: dict[str, list[PartitionTerm]] = {}
    for term in terms:
        if term.hidden and term.name in values and term.source in schema.names:
            by_source.setdefault(term.source, []).append(term)
    for p in predicates:
        for term in by_source.get(p.column, ()):
            try:
                if not _may_hold(p, term, values[term.name], schema.field(p.column).type):
                    return False
            except Exception:  # noqa: BLE001 - a value this cannot judge: read the directory
                continue
    return True


def _may_hold(p: Predicate, term: PartitionTerm, text: str | None, kind: pa.DataType) -> bool:
    if p.negated:
        return True
    if p.op == IS_NULL or (p.op == NULL_SAFE_EQ and p.value is None):
        return text is None or term.transform == "void"  # only a null source has no value
    if p.op == IS_NOT_NULL:
        return text is not None or term.transform == "void"
    if term.transform == "void":
        return True
    if text is None:
        return False  # every other predicate is null (not true) on a null source
    ordered = term.transform.partition("[")[0] not in _UNORDERED
    if p.op in (EQ, NULL_SAFE_EQ, IN):
        wanted = [v for v in (p.value if p.op == IN else (p.value,)) if v is not None]
        return any(_transformed(term, kind, v) == _ordinal(term, kind, text) for v in wanted)
    if p.op in (LT, LE, GT, GE) and ordered and p.value is not None:
        theirs, bound = _ordinal(term, kind, text), _transformed(term, kind, p.value)
        return theirs >= bound if p.op in (GT, GE) else theirs <= bound
    return True


@functools.lru_cache(maxsize=1024)  # a filter's value, once per read: not once per directory
def _transformed(term: PartitionTerm, kind: pa.DataType, value: Any) -> Any:
    """``value`` of the source column under ``term``, as a directory's ordinal."""
    from commit_protocol.tables.iceberg.transforms import directory_values

    if isinstance(value, dt.datetime) and pa.types.is_timestamp(kind) and \
            (value.tzinfo is None) != (kind.tz is None):
        raise TypeError("a timestamp value and column of different zone-ness")
    text = directory_values(pa.array([value], kind), term)[0].as_py()
    return _ordinal(term, kind, text)


@functools.lru_cache(maxsize=4096)
def _ordinal(term: PartitionTerm, kind: pa.DataType, text: str | None) -> Any:
    from commit_protocol.tables.iceberg.transforms import (
        iceberg_type,
        record_value,
        transform_of,
    )

    source = iceberg_type(kind)
    if source is None:
        raise TypeError(f"no Iceberg type for {kind}")
    return record_value(transform_of(term), source, text, where=term.name)
