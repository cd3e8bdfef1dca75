"""Delta's generated columns that rotsink computes: the expressions teams partition by.

A Delta table declares a generated column by the SQL expression in its field's metadata
(``delta.generationExpression``); every writer must compute it for a row that lacks it and
refuse a row whose value differs (Delta's own writers add it as a CHECK). Tables are almost
always partitioned by day or hour of an event time this way
(``day DATE GENERATED ALWAYS AS (CAST(ts AS DATE))``), since Delta has no hidden partitioning.
rotsink's tasks compute the expressions below on Arrow arrays, as Spark evaluates them: a
timestamp's date, year, month, day and hour in the session time zone (the zone Spark gives the
Arrow batches it hands a Python sink), ``date_format`` with the common patterns. Any other
expression is refused at start, naming it (:mod:`commit_protocol.tables.delta.features`).

No module here imports delta-rs, and pyarrow only where it computes: the tasks import this
one, and so does every query's planning (through the table's check).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# function -> Spark's name(s) for it, lower-cased
_CALLS = {"date": ("to_date", "date"), "year": ("year",), "month": ("month",),
          "day": ("day", "dayofmonth"), "hour": ("hour",)}
_NAME = r"`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*)"
_CAST = re.compile(rf"^cast\s*\(\s*(?:{_NAME})\s+as\s+date\s*\)$", re.IGNORECASE)
_CALL = re.compile(rf"^([a-z_]+)\s*\(\s*(?:{_NAME})\s*\)$", re.IGNORECASE)
_FORMAT = re.compile(rf"^date_format\s*\(\s*(?:{_NAME})\s*,\s*'([^']*)'\s*\)$", re.IGNORECASE)
# Java DateTimeFormatter letters rotsink spells (others refused): strftime's
_PATTERN = re.compile(r"yyyy|MM|dd|HH|mm|ss|[-/ :_.T]")
_STRFTIME = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
# Delta's primitive type names -> Arrow's, for the results
_TYPES = {"date": "date32", "integer": "int32", "long": "int64", "short": "int16",
          "byte": "int8", "string": "string"}
SPELLED = ("CAST(ts AS DATE)", "to_date(ts)", "year(ts)", "month(ts)", "day(ts)", "hour(ts)",
           "date_format(ts, 'yyyy-MM-dd')")


@dataclass(frozen=True)
class Generated:
    """A generated column rotsink computes: ``function`` of column ``source``."""

    name: str
    expression: str
    source: str
    function: str  # date, year, month, day, hour, format
    type_name: str  # the column's Delta type
    strftime: str = ""

    def compute(self, column: pa.Array) -> pa.Array:
        """The column's values for ``column`` (the source's), typed as the table declares.

        >>> import datetime as dt
        >>> import pyarrow as pa
        >>> ts = pa.array([dt.datetime(2026, 12, 1, 23, 30, tzinfo=dt.timezone.utc), None],
        ...               pa.timestamp("us", "Asia/Tokyo"))
        >>> Generated("day", "", "ts", "date", "date").compute(ts).to_pylist()
        [datetime.date(2026, 12, 2), None]
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        local = pc.local_timestamp(column) if pa.types.is_timestamp(column.type) and \
            column.type.tz else column
        if self.function == "date":
            values = pc.cast(local, pa.date32()) if pa.types.is_timestamp(local.type) else local
        elif self.function == "format":
            values = pc.strftime(local, format=self.strftime)
        else:
            values = getattr(pc, self.function)(local)
        return pc.cast(values, pa.type_for_alias(_TYPES[self.type_name]))


@functools.lru_cache(maxsize=256)  # the tasks parse the planned columns once, not per chunk
def parse_generated(name: str, expression: str, type_name: str) -> Generated | None:
    """``expression`` as one rotsink computes; None where it is not one.

    >>> parse_generated("day", "CAST(`ts` AS DATE)", "date").source
    'ts'
    >>> parse_generated("h", "date_format(ts, 'yyyy-MM-dd-HH')", "string").strftime
    '%Y-%m-%d-%H'
    >>> parse_generated("x", "id % 16", "integer") is None
    True
    """
    text = expression.strip()
    if type_name not in _TYPES:
        return None
    if found := _CAST.match(text):
        return Generated(name, expression, found[1] or found[2], "date", type_name)
    if found := _FORMAT.match(text):
        pattern = found[3]
        pieces = _PATTERN.findall(pattern)
        if "".join(pieces) != pattern:
            return None
        return Generated(name, expression, found[1] or found[2], "format", type_name,
                         "".join(_STRFTIME.get(p, p) for p in pieces))
    if found := _CALL.match(text):
        function = next((f for f, calls in _CALLS.items() if found[1].lower() in calls), None)
        if function is not None:
            return Generated(name, expression, found[2] or found[3], function, type_name)
    return None


def with_generated(batch: pa.RecordBatch, columns: tuple[Generated, ...]) -> pa.RecordBatch:
    """``batch`` with each generated column computed where it lacks it, and checked where
    it has it (a row whose value differs is refused, as Delta's writers refuse it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from commit_protocol.vocabulary.errors import ConstraintError

    for g in columns:
        values = g.compute(batch.column(g.source))
        index = batch.schema.get_field_index(g.name)
        if index < 0:
            batch = batch.append_column(pa.field(g.name, values.type), values)
            continue
        given = pc.cast(batch.column(index), values.type)
        rows = pc.and_not(pc.invert(pc.fill_null(pc.equal(given, values), False)),
                          pc.and_(pc.is_null(given), pc.is_null(values)))
        differs = pc.sum(pc.cast(rows, pa.int64())).as_py() or 0
        if differs:
            raise ConstraintError(f"column {g.name!r} is generated as {g.expression} in the "
                                  f"delta table, and {differs} row(s) give it another value: "
                                  "nothing of the batch is committed; leave the column out "
                                  "(rotsink computes it) or compute it as the table does",
                                  column=g.name, reason="generated_column", rows=rows,
                                  detail=f"column {g.name!r} given a value other than "
                                         f"{g.expression}, as the delta table generates it")
    return batch
