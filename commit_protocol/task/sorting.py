"""A table's sort order (Iceberg's ``WRITE ORDERED BY``), applied where a finished file is
written whole: at its roll (:mod:`commit_protocol.task.conversion`).

A file spans micro-batches, so no batch's task sees all its rows before the roll; there the
staged rows are decoded anyway, and are sorted before they are encoded, the whole file at
once, as Iceberg's Spark writer sorts a task's rows before it writes them. The task then
holds the file's rows as Arrow data (a file of ``rotation.maxBytes``, 128 MB by default,
decoded; without a sort order it holds one row group of ``parquet.rowGroupBytes``).

Each key is a column (or Iceberg's transform of one: ``bucket(16, id)`` sorts by the
bucket's number, ``days(ts)`` by the day) ascending or descending, with its nulls first or
last. A key on an identity partition column is one value per file and is skipped. A file
sorted whole names the order's id in its Parquet footer (:mod:`~commit_protocol.vocabulary.
sort_orders`): the table
commit gives that id to the file's manifest entry, and to no file that was not sorted (one
written before the table had the order, or rolled on the driver by a config that did not
carry it), so readers that trust a file's ``sort_order_id`` are never misled.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.vocabulary.sort_orders import SORT_ORDER_KEY

SortKey = tuple[str, str, bool, bool]  # column, transform, ascending, nulls first


def sorted_rows(table: pa.Table, keys: Sequence[SortKey], order_id: int, *,
                partition_columns: Sequence[str] = ()) -> pa.Table:
    """``table`` in the order of ``keys``, its schema naming ``order_id``; as it is when a
    key cannot be computed here (a nested field: the file then claims no order)."""
    arrays: list[pa.Array] = []
    sort_keys: list[tuple[str, str]] = []
    for column, transform, ascending, nulls_first in keys:
        if column in partition_columns or transform == "void":
            continue  # one value per file
        values = _key_values(table, column, transform)
        if values is None:
            return table
        # a key's nulls by a flag of their own: pyarrow places the nulls of all keys alike
        key = len(arrays) // 2
        arrays += [pc.is_valid(values), values]
        sort_keys += [(f"valid{key}", "ascending" if nulls_first else "descending"),
                      (f"key{key}", "ascending" if ascending else "descending")]
    if sort_keys:
        names = [name for name, _ in sort_keys]
        order = pc.sort_indices(pa.table(arrays, names=names), sort_keys=sort_keys)
        table = table.take(order)
    metadata = {**(table.schema.metadata or {}), SORT_ORDER_KEY: str(order_id).encode()}
    return table.replace_schema_metadata(metadata)


def _key_values(table: pa.Table, column: str, transform: str) -> pa.Array | None:
    """The key's value of each row; None where it cannot be computed here (a nested field,
    a type no transform takes)."""
    if column not in table.column_names:
        return None
    values = table.column(column).combine_chunks()
    if transform == "identity":
        return values
    from pyiceberg.transforms import parse_transform

    from commit_protocol.tables.iceberg.transforms import iceberg_type, transformed_values

    source = iceberg_type(values.type)
    if source is None:
        return None
    return transformed_values(values, parse_transform(transform), source)
