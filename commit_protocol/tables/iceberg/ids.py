"""Parquet field ids for an Iceberg table's data files: the columns of every file rotsink
writes for the table carry the ids of the table's schema, as Iceberg's own writers' files do.

Iceberg resolves a data file's columns by field id, so that renames and drops keep reading
the right column. A file without ids (rotsink's before this module, files added by
``add_files``) is read through the table's name mapping (``schema.name-mapping.default``),
the spec's fallback for migrated files, which not every engine applies (Daft does not). So
the ids are decided on the driver when a micro-batch is planned, from the table as it is then,
and travel to the tasks in the sink's config (:attr:`SinkConfig.field_ids`), for the Parquet
encoder (:func:`commit_protocol.formats.parquet.with_field_ids`) to put in each file's schema:

* a table that does not exist yet: the ids rotsink's commit will create it with (the fresh
  ids of :func:`~commit_protocol.tables.iceberg.schema.iceberg_schema`, assigned in order);
* a table that lacks some of the batch's columns (``schema.evolution=addColumns``): they are
  added first, in a schema-only commit of their own (as Kafka Connect's Iceberg sink evolves
  a table before writing), so that Iceberg, not rotsink, assigns their ids; adding an
  optional column that no file holds yet changes no row, and a crash after it leaves a
  column the batch's replay finds there;
* every column then takes the id the table's current schema gives its name.

Paths name nested fields as Parquet does: ``a.b`` (struct field), ``a.element`` (list),
``a.key`` and ``a.value`` (map).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commit_protocol.vocabulary import failpoints

if TYPE_CHECKING:
    import pyarrow.parquet as pq
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table as IcebergTable

FieldIds = tuple[tuple[str, int], ...]


def ids_of(schema: Schema) -> FieldIds:
    """Every field's id by its path.

    >>> from commit_protocol.tables.iceberg.schema import iceberg_schema
    >>> ids_of(iceberg_schema('{"type":"struct","fields":[{"name":"id","type":"long",'
    ...     '"nullable":true,"metadata":{}},{"name":"tags","type":{"type":"array",'
    ...     '"elementType":"string","containsNull":true},"nullable":true,"metadata":{}}]}'))
    (('id', 1), ('tags', 2), ('tags.element', 3))
    """
    from pyiceberg.types import ListType, MapType, NestedField, StructType

    found: list[tuple[str, int]] = []

    def walk(prefix: str, kind: Any) -> None:
        if isinstance(kind, StructType):
            for child in kind.fields:
                visit(f"{prefix}{child.name}", child)
        elif isinstance(kind, ListType):
            visit(f"{prefix}element", kind.element_field)
        elif isinstance(kind, MapType):
            visit(f"{prefix}key", kind.key_field)
            visit(f"{prefix}value", kind.value_field)

    def visit(path: str, child: NestedField) -> None:
        found.append((path, child.field_id))
        walk(f"{path}.", child.field_type)

    walk("", schema.as_struct())
    return tuple(found)


def planned_ids(table: IcebergTable | None, schema_json: str) -> FieldIds:
    """The ids the batch's files carry (see the module's docstring); adds the columns the
    table lacks, and widens the types the stream widened, first. Runs on the driver, at
    planning."""
    from commit_protocol.tables.iceberg.evolution import differs, evolve
    from commit_protocol.tables.iceberg.schema import iceberg_schema

    wanted = iceberg_schema(schema_json)
    if table is None:
        return ids_of(wanted)
    name = ".".join(table.name())
    if differs(table.schema(), wanted, identifier=name):  # columns added, types widened
        with table.update_schema() as update:
            evolve(update, table.schema(), wanted, identifier=name)
        failpoints.hit("table.after_schema")
    return ids_of(table.schema())


def file_ids(footer: pq.FileMetaData) -> dict[str, int]:
    """The ids a finished file's top-level columns carry, from its footer (none: empty)."""
    from commit_protocol.formats.parquet import PARQUET_FIELD_ID  # pyarrow: not at planning

    schema = footer.schema.to_arrow_schema()
    return {f.name: int(f.metadata[PARQUET_FIELD_ID]) for f in schema
            if f.metadata and PARQUET_FIELD_ID in f.metadata}
