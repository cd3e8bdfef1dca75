"""What a bulk file is made of, for reads: its *units* (Parquet row groups, ORC stripes), where
each lies in the file, how many rows it holds and what its statistics say of each column.

A read task opens a finished bulk file and reads only some of its units: those whose middle
byte falls in the task's split of the file (as Spark splits Parquet and ORC files), and of
those only the ones whose statistics leave a pushed filter a chance to match. A unit is also
the bound on a read task's memory: a reader decodes one unit at a time, never a whole file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class ColumnStats:
    """What a unit's statistics say of one top-level column.

    ``low``/``high`` bound every non-null value (None: no bound known); ``null_count`` is None
    when unknown. Bounds of float columns ignore NaN (Parquet's and ORC's writers leave NaN
    out of min and max), so a reader never prunes a float column by its upper bound.
    """

    low: Any = None
    high: Any = None
    null_count: int | None = None


@dataclass(frozen=True)
class Unit:
    """One row group or stripe: bytes ``[offset, offset + length)`` of its file."""

    index: int
    offset: int
    length: int
    rows: int
    stats: Mapping[str, ColumnStats] = field(default_factory=dict)

    @property
    def middle(self) -> int:
        """The byte that decides which split reads the unit (Spark's rule for Parquet)."""
        return self.offset + self.length // 2


class BulkFile(Protocol):
    """An open finished bulk file (``Format.implementation().open_units(...)``)."""

    units: Sequence[Unit]
    schema: pa.Schema  # the columns as stored

    def batches(self, indices: Sequence[int], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The rows of the units ``indices`` (ascending) as ``schema``, in batches."""
        ...


def units_in(units: Sequence[Unit], start: int, end: int | None) -> list[Unit]:
    """The units whose middle byte lies in ``[start, end)`` (``end`` None: to the file's end),
    so that splits of one file never share a unit and together read all of them.

    >>> u = [Unit(0, 4, 10, 1), Unit(1, 14, 10, 1), Unit(2, 24, 100, 1)]
    >>> [x.index for x in units_in(u, 0, 20)], [x.index for x in units_in(u, 20, None)]
    ([0, 1], [2])
    """
    return [u for u in units if u.middle >= start and (end is None or u.middle < end)]
