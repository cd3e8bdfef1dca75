"""A Delta ``add`` action's statistics, from the finished file's Parquet footer.

Delta readers (Spark's, delta-rs, polars) skip files by ``minValues``/``maxValues``/
``nullCount`` per column and count rows by ``numRecords``. The values are spelled as delta-rs
spells them (the Python writers' Delta): numbers, booleans, strings, dates ``2024-01-01``,
timestamps ``2024-01-01T10:00:00.123Z`` (without time zone: ``2024-01-01 10:00:00.123``),
struct fields nested. Timestamps keep milliseconds, so a minimum is cut down and a maximum
rounded up to the next millisecond: a bound is never tighter than the data, and no reader
skips a file it needed. What cannot be spelled exactly is left out, which readers take as
"unknown": strings over 32 characters (a cut maximum would be too small), floats (Parquet's
bounds leave NaN out, which Spark orders above every number: a query for large values would
skip a file holding NaN), decimals of more than 15 digits (JSON numbers are doubles to most
readers), binary, and anything inside arrays and maps.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

MAX_STRING_CHARS = 32
_EPOCH = dt.datetime(1970, 1, 1)


def delta_stats(footer: pq.FileMetaData) -> str:
    """The ``stats`` JSON of the file with this footer.

    >>> import io
    >>> buffer = io.BytesIO()
    >>> pq.write_table(pa.table({"id": [3, 1, None], "name": ["b", "a", "c"]}), buffer)
    >>> stats = json.loads(delta_stats(pq.read_metadata(io.BytesIO(buffer.getvalue()))))
    >>> stats["numRecords"], stats["minValues"], stats["maxValues"], stats["nullCount"]
    (3, {'id': 1, 'name': 'a'}, {'id': 3, 'name': 'c'}, {'id': 1, 'name': 0})
    """
    arrow = footer.schema.to_arrow_schema()
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for index in range(footer.num_columns):
        path = footer.schema.column(index).path.split(".")
        kind = _leaf_type(arrow, path)
        if kind is None:  # inside an array or a map
            continue
        low, high, null_count = _column_bounds(footer, index)
        _put(nulls, path, null_count)
        if low is not None and high is not None:
            spelled = _spelled(kind, low, high)
            if spelled is not None:
                _put(mins, path, spelled[0])
                _put(maxs, path, spelled[1])
    return json.dumps({"numRecords": footer.num_rows, "minValues": mins, "maxValues": maxs,
                       "nullCount": nulls})


def _leaf_type(schema: pa.Schema, path: list[str]) -> pa.DataType | None:
    """The Arrow type of the leaf at ``path``, through structs only."""
    kind: pa.DataType = schema.field(path[0]).type
    for name in path[1:]:
        if not pa.types.is_struct(kind):
            return None
        kind = kind.field(name).type
    return None if pa.types.is_nested(kind) else kind


def _column_bounds(footer: pq.FileMetaData, index: int) -> tuple[Any, Any, int]:
    """The column's minimum and maximum over every row group (raw physical values; None
    when a row group has none) and its null count."""
    low = high = None
    nulls = 0
    for group in range(footer.num_row_groups):
        stats = footer.row_group(group).column(index).statistics
        if stats is None or not stats.has_null_count:
            return None, None, 0
        nulls += stats.null_count
        if not stats.has_min_max:
            if stats.num_values:  # values without bounds: the column's bounds are unknown
                return None, None, nulls
            continue
        low = stats.min_raw if low is None else min(low, stats.min_raw)
        high = stats.max_raw if high is None else max(high, stats.max_raw)
    return low, high, nulls


def _spelled(kind: pa.DataType, low: Any, high: Any) -> tuple[Any, Any] | None:
    """``(min, max)`` as Delta's stats spell them, or None when they cannot be exact."""
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return low, high
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in (low, high)]
        return (text[0], text[1]) if max(map(len, text)) <= MAX_STRING_CHARS else None
    if pa.types.is_date32(kind):
        return (str(dt.date(1970, 1, 1) + dt.timedelta(days=low)),
                str(dt.date(1970, 1, 1) + dt.timedelta(days=high)))
    if pa.types.is_timestamp(kind):
        return _timestamp(low, kind, up=False), _timestamp(high, kind, up=True)
    if pa.types.is_decimal(kind):
        return (_decimal(low, kind), _decimal(high, kind)) if kind.precision <= 15 else None
    return None


def _timestamp(value: int, kind: pa.TimestampType, *, up: bool) -> str:
    """An epoch value of ``kind``'s unit as milliseconds, cut down or rounded ``up``."""
    per_ms = {"s": 0, "ms": 1, "us": 1_000, "ns": 1_000_000}[kind.unit]
    millis = value * 1000 if per_ms == 0 else -(-value // per_ms) if up else value // per_ms
    moment = _EPOCH + dt.timedelta(milliseconds=millis)
    if kind.tz is None:
        return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _decimal(value: Any, kind: pa.Decimal128Type) -> float:
    unscaled = value if isinstance(value, int) else int.from_bytes(value, "big", signed=True)
    return float(decimal.Decimal(unscaled).scaleb(-kind.scale))


def _put(into: dict[str, Any], path: list[str], value: Any) -> None:
    for name in path[:-1]:
        into = into.setdefault(name, {})
    into[path[-1]] = value
