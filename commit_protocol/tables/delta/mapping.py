"""Delta's column mapping (``delta.columnMapping.mode`` ``name`` or ``id``) on a table rotsink
joins: what its writers must do, and the one case rotsink's files cannot follow.

Under column mapping every column has a physical name and a 32-bit id in the table's schema
(``delta.columnMapping.physicalName``, ``delta.columnMapping.id``); Delta's protocol asks a
writer to write data files by the physical names, with each id as the Parquet ``field_id``,
and to key partition values and statistics by physical name. A table that turns column
mapping on after it was created (Spark's ``ALTER TABLE ... SET TBLPROPERTIES
('delta.columnMapping.mode' = 'name')``, the way to allow ``RENAME COLUMN`` and ``DROP
COLUMN`` on a table that exists) keeps each column's name as its physical name, as the
protocol requires of that step: there rotsink's files, which name columns as the output
does, are the files the protocol asks for once they carry the ids, which the tasks write
(:attr:`SinkConfig.field_ids`, read when each micro-batch is planned).

A column whose physical name differs from its name (every column of a table created with
column mapping on, ``col-<uuid>``; a column renamed since) would need files whose columns
are named otherwise than the output's: the output's path readers (``spark.read.parquet``,
rotsink's reader, ``verify``) read them by the output's names and would find nothing. Such a
table is refused at start, naming the columns. Columns the output would add to a mapped
table are refused when the batch is planned: a new column needs a physical name and an id
assigned with it, which delta-rs (1.6) does not do ("Column mapping is not supported for
write operation 'ADD COLUMN'").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

MODE = "delta.columnMapping.mode"
ID = "delta.columnMapping.id"
PHYSICAL_NAME = "delta.columnMapping.physicalName"


def planned_ids(uri: str, table: Any, schema_json: str) -> tuple[tuple[str, int], ...]:
    """When a micro-batch is planned: the Parquet field ids of its files' columns under the
    ``table``'s (a ``DeltaTable``) column mapping, none without one; a batch that would add
    columns to a mapped table is refused, before anything of it is written."""
    import json

    from commit_protocol.vocabulary.errors import TableError

    if table is None or mapping_mode(table.metadata().configuration or {}) == "none":
        return ()
    schema = json.loads(table.schema().to_json())
    refused = new_columns_refusal(uri, schema, json.loads(schema_json))
    if refused is not None:
        raise TableError(refused)
    return field_ids(schema)


def mapping_mode(configuration: Mapping[str, str]) -> str:
    return configuration.get(MODE, "none")


def renamed_fields(schema: dict[str, Any]) -> list[str]:
    """Paths of the fields whose physical name is not their name."""
    return [path for path, f in _struct_fields(schema)
            if (f.get("metadata") or {}).get(PHYSICAL_NAME, f["name"]) != f["name"]]


def field_ids(schema: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """Every mapped field's id by its Parquet path (``a.b``, ``a.element.b``, ``a.value.b``).

    >>> field_ids({"type": "struct", "fields": [{"name": "a", "type": "long",
    ...            "metadata": {ID: 1}}, {"name": "s", "metadata": {ID: 2}, "type": {
    ...            "type": "struct", "fields": [{"name": "b", "type": "long",
    ...                                           "metadata": {ID: 3}}]}}]})
    (('a', 1), ('s', 2), ('s.b', 3))
    """
    return tuple((path, int(f["metadata"][ID])) for path, f in _struct_fields(schema)
                 if ID in (f.get("metadata") or {}))


def refusal_reason(schema: dict[str, Any]) -> str | None:
    """Why rotsink's files cannot follow the table's column mapping; None when they can."""
    renamed = renamed_fields(schema)
    if not renamed:
        return None
    return (f"its column(s) {', '.join(renamed)} have physical names other than their names "
            "(a table created with column mapping on, or a column renamed since), and "
            "rotsink's files name columns as the output does, which its path readers read")


def new_columns_refusal(uri: str, table: dict[str, Any], output: dict[str, Any]) -> str | None:
    """Why a batch cannot add its columns the table lacks to a mapped table; None without."""
    have = {f["name"] for f in table["fields"]}
    added = [f["name"] for f in output["fields"] if f["name"] not in have]
    if not added:
        return None
    return (f"{uri}: the output adds column(s) {added} to a Delta table with column mapping, "
            "which needs a physical name and an id for each, assigned by the writer that adds "
            "it and not by delta-rs (the library rotsink commits with). Nothing of the batch "
            "was written; add them to the table first (Spark: ALTER TABLE ... ADD COLUMNS), "
            "then restart the query")


def _struct_fields(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict]]:
    """(Parquet path, field) of every struct field below ``node``, nested ones included."""
    for f in node.get("fields", ()):
        here = f"{path}{f['name']}"
        yield here, f
        yield from _below(f["type"], here)


def _below(kind: Any, path: str) -> Iterator[tuple[str, dict]]:
    if not isinstance(kind, dict):
        return
    if kind.get("type") == "struct":
        yield from _struct_fields(kind, f"{path}.")
    elif kind.get("type") == "array":
        yield from _below(kind["elementType"], f"{path}.element")
    elif kind.get("type") == "map":
        yield from _below(kind["keyType"], f"{path}.key")
        yield from _below(kind["valueType"], f"{path}.value")
