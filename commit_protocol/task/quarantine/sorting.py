"""Which rows of a chunk the output refuses, found by the checks that refuse them.

The checks (a format's ``check_rows``, a table's row rules) are vectorized: one call over a
chunk of 100,000 rows. :func:`sort_out` makes that call once: a clean chunk costs what
``errors.mode=fail`` costs. When the call raises a
:class:`~commit_protocol.vocabulary.errors.RowRefusedError` that names the rows it refuses (a
mask: a line break, a null), those rows are set aside and the rest checked again; one that
does not (ORC's rarer values, found leaf by leaf in nested columns) makes it split the chunk
in halves and check each, down to single rows: ``k`` bad rows among ``n`` cost ``O(k log n)``
calls. Either way every check a row fails is found by the check itself, not by a second,
row-by-row version of it that could drift from the first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from commit_protocol.vocabulary.errors import RowRefusedError


@dataclass(frozen=True)
class Refused:
    """One refused row, as it came, and the refusal that names its column and reason."""

    row: pa.RecordBatch
    error: RowRefusedError


def sort_out(batch: pa.RecordBatch, step: Callable[[pa.RecordBatch], pa.RecordBatch]
             ) -> tuple[list[pa.RecordBatch], list[Refused]]:
    """``step`` applied to ``batch`` where it can be: the results of ``step`` over the runs
    of rows it takes, in order, and the rows it refuses (each alone, as it came).

    >>> def no_odd(b):
    ...     if any(v % 2 for v in b.column(0).to_pylist()):
    ...         raise RowRefusedError("odd", column="n", reason="odd")
    ...     return b
    >>> kept, refused = sort_out(pa.record_batch({"n": [2, 3, 4, 6, 7]}), no_odd)
    >>> [b.column(0).to_pylist() for b in kept], [r.row.column(0)[0].as_py() for r in refused]
    ([[2], [4], [6]], [3, 7])
    """
    try:
        return [step(batch)], []
    except RowRefusedError as refusal:
        if refusal.rows is not None and len(refusal.rows) == batch.num_rows > 1:
            return _split_by_mask(batch, step, refusal)
        if batch.num_rows <= 1:
            return [], [Refused(batch, refusal)] if batch.num_rows else []
    half = batch.num_rows // 2
    first, first_refused = sort_out(batch.slice(0, half), step)
    second, second_refused = sort_out(batch.slice(half), step)
    return first + second, first_refused + second_refused


def _split_by_mask(batch: pa.RecordBatch, step: Callable[[pa.RecordBatch], pa.RecordBatch],
                   refusal: RowRefusedError) -> tuple[list[pa.RecordBatch], list[Refused]]:
    """The rows ``refusal`` names refused; the others checked again (for other reasons)."""
    import pyarrow.compute as pc

    mask = pc.fill_null(refusal.rows, False)
    refused = batch.filter(mask)
    kept, others = sort_out(batch.filter(pc.invert(mask)), step)
    return kept, [Refused(refused.slice(i, 1), refusal)
                  for i in range(refused.num_rows)] + others
