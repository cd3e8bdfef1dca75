"""What the table asks of each chunk of a task's rows before any is written: its generated
columns computed (or checked), then its NOT NULL columns checked.

A Delta table's generated columns (``day DATE GENERATED ALWAYS AS (CAST(ts AS DATE))``) are
computed where the stream lacks them and checked where it gives them
(:mod:`commit_protocol.tables.delta.generated`), before the rows are split into partition
directories: a generated column is usually the one the table is partitioned by.

A Delta table another writer made may declare columns NOT NULL, an Iceberg table required
fields; their writers must never commit a null into one (Delta's invariants, Iceberg's
schema), and their readers may rely on it. rotsink writes the files
itself, so its tasks check: a chunk with a null there fails the task (and, Spark's retries
spent, the batch) before the chunk reaches a file; nothing of the batch is committed, and the
error names the column, the table and how many nulls. A null count is kept by every Arrow
array, so the check costs nothing where there is none.
"""

from __future__ import annotations

import pyarrow as pa

from commit_protocol.records.config import SinkConfig
from commit_protocol.vocabulary.errors import ConstraintError


def ruled(batch: pa.RecordBatch, config: SinkConfig, *, batch_id: int) -> pa.RecordBatch:
    """``batch`` as the table takes it (see the module's docstring); as it is without a
    table rule."""
    if config.generated_columns:
        from commit_protocol.tables.delta.generated import parse_generated, with_generated

        generated = tuple(parse_generated(*g) for g in config.generated_columns)
        batch = with_generated(batch, tuple(g for g in generated if g is not None))
    if config.required_columns:
        check_required(batch, config.required_columns, batch_id=batch_id,
                       table=config.table_format)
    return batch


def partition_zone(batch: pa.RecordBatch, partition_by: tuple[str, ...]) -> str | None:
    """The zone of the batch's timestamp partition columns (Spark's session zone, in which
    their directories are named), for a table that records instants: None without one.

    >>> partition_zone(pa.record_batch({"ts": pa.array([0], pa.timestamp("us", "Asia/Tokyo"))}),
    ...                ("ts",))
    'Asia/Tokyo'
    """
    for name in partition_by:
        index = batch.schema.get_field_index(name)
        kind = batch.schema.field(index).type if index >= 0 else None
        if kind is not None and pa.types.is_timestamp(kind) and kind.tz:
            return str(kind.tz)
    return None


def check_required(batch: pa.RecordBatch, columns: tuple[str, ...], *, batch_id: int,
                   table: str | None) -> None:
    """Refuse ``batch`` when one of ``columns`` holds a null.

    >>> rows = pa.record_batch({"id": [1, None]})
    >>> check_required(rows, ("id",), batch_id=3, table="delta")
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.ConstraintError: column 'id' is NOT NULL in the delta \
table, and batch 3 has 1 null value(s) in it: nothing of the batch is committed; fill or \
filter them in the query (coalesce, or where id IS NOT NULL)
    """
    import pyarrow.compute as pc

    for name in columns:
        index = batch.schema.get_field_index(name)
        nulls = batch.column(index).null_count if index >= 0 else batch.num_rows
        if nulls:
            raise ConstraintError(
                f"column {name!r} is NOT NULL in the {table or 'output'} table, and batch "
                f"{batch_id} has {nulls} null value(s) in it: nothing of the batch is "
                f"committed; fill or filter them in the query (coalesce, or where {name} IS "
                "NOT NULL)", column=name, reason="not_null",
                rows=pc.is_null(batch.column(index)) if index >= 0 else None,
                detail=f"a null in column {name!r}, NOT NULL in the {table or 'output'} table")
