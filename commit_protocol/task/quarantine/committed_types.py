"""A query's wider integer and decimal columns written as the path committed them
(``errors.mode=quarantine``; :func:`~commit_protocol.records.schema_evolution.into_committed`):
a value the committed type holds is cast back, one it does not is refused (reason
``committed_type``), so an upstream that widened a type keeps the stream up and loses no row.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.records.schema_evolution import decimal_digits
from commit_protocol.vocabulary.errors import RowRefusedError

_INTEGERS = {"byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64()}


def as_committed(batch: pa.RecordBatch, columns: tuple[tuple[str, str], ...]) -> pa.RecordBatch:
    """``batch`` with each of ``columns`` (name, committed Spark type) cast to the committed
    type; a :class:`RowRefusedError` naming the rows that do not fit.

    >>> as_committed(pa.record_batch({"n": pa.array([1, 2], pa.int64())}),
    ...              (("n", "integer"),)).schema.field("n").type
    DataType(int32)
    """
    for name, kind in columns:
        index = batch.schema.get_field_index(name)
        target = _arrow(kind)
        values = batch.column(index)
        try:
            cast = values.cast(target, safe=True)
        except pa.ArrowInvalid as e:
            raise RowRefusedError(
                f"column {name!r} holds values its committed type {kind} cannot hold ({e})",
                column=name, reason="committed_type", rows=_outside(values, target),
                detail=f"column {name!r} holds a value its committed type {kind} cannot "
                       "hold") from e
        batch = batch.set_column(index, pa.field(name, target), cast)
    return batch


def _arrow(kind: str) -> pa.DataType:
    if kind in _INTEGERS:
        return _INTEGERS[kind]
    digits = decimal_digits(kind)
    assert digits is not None, f"into_committed passes integers and decimals only, not {kind}"
    return pa.decimal128(*digits)


def _outside(values: pa.Array, target: pa.DataType) -> pa.Array | None:
    """The integers outside ``target``'s range (decimals: None, found by halving)."""
    if not pa.types.is_integer(target):
        return None
    high = (1 << (target.bit_width - 1)) - 1
    return pc.fill_null(pc.or_(pc.less(values, -high - 1), pc.greater(values, high)), False)
