"""What an Iceberg table lists: the manifest entries of rotsink's finalized files (their
partition tuples read from their directories), the spec of a table rotsink creates, and
the files of the current snapshot as read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commit_protocol.tables import TableCommit, TableFile
from commit_protocol.tables.iceberg.ids import file_ids, ids_of
from commit_protocol.tables.iceberg.schema import partition_value
from commit_protocol.tables.iceberg.transforms import record_value
from commit_protocol.vocabulary.errors import TableError
from commit_protocol.vocabulary.naming import parse_partition_dir
from commit_protocol.vocabulary.partition_terms import PartitionTerm
from commit_protocol.vocabulary.sort_orders import claimed_order

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

DATA_CONTENT = 0  # a manifest entry's content: data; 1 and 2 are position and equality deletes


def data_file(root: str, metadata: Any, f: TableFile, spec: Any,
              time_zone: str | None = None) -> Any:
    """The manifest entry of finalized file ``f`` (below ``root``): its metrics from its
    Parquet footer, its partition tuple under ``spec`` (one of the table's) from its
    directory's typed values (a timestamp's named in ``time_zone``)."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    schema = metadata.schema()
    check_ids(f, schema)
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=f.footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema))
    partition = partition_tuple(f, spec, schema, time_zone)
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=f"{root}/{f.path}",
        file_format=FileFormat.PARQUET, partition=partition,
        file_size_in_bytes=f.size, sort_order_id=sort_order_id(f, metadata),
        spec_id=spec.spec_id,
        equality_ids=None, key_metadata=None, **stats.to_serialized_dict())


def sort_order_id(f: TableFile, metadata: Any) -> int | None:
    """The table's sort order file ``f`` was written in, as its footer says
    (:mod:`commit_protocol.task.sorting`); None for a file written unsorted, or in an order
    the table no longer has (a table replaced under the name)."""
    claimed = claimed_order(f.footer.metadata)
    known = {order.order_id for order in metadata.sort_orders}
    return claimed if claimed in known else None


def partition_tuple(f: TableFile, spec: Any, schema: Any, time_zone: str | None = None) -> Any:
    """File ``f``'s partition tuple under ``spec``, read from its directory: an identity
    field's value typed as its column (named by the field, or by the column as rotsink's
    directories name it), a transform's read back from Iceberg's spelling
    (:func:`~commit_protocol.tables.iceberg.transforms.record_value`)."""
    from pyiceberg.partitioning import partition_record_value
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.typedef import Record

    values = parse_partition_dir(f.directory)
    tuple_values = []
    for field in spec.fields:
        source = schema.find_field(field.source_id)
        key = field.name if field.name in values else source.name
        if key not in values:
            raise TableError(f"{f.path}: its directory names no value of the Iceberg table's "
                             f"partition field {field.name!r} ({field.transform} of "
                             f"{source.name!r})")
        if isinstance(field.transform, IdentityTransform):
            tuple_values.append(partition_record_value(
                field, partition_value(values[key], source.field_type, time_zone), schema))
        else:
            tuple_values.append(record_value(field.transform, source.field_type, values[key],
                                             where=f.path))
    return Record(*tuple_values)


def check_ids(f: TableFile, schema: Any) -> None:
    """Refuse to list a file whose columns carry field ids the table's schema does not have
    (another writer dropped a column and added one of the same name between the batch's
    planning and its commit): readers would find its values under no column. A file without
    ids (an earlier rotsink's) is read by the table's name mapping."""
    known = {field_id for _, field_id in ids_of(schema)}
    stray = {name: i for name, i in file_ids(f.footer).items() if i not in known}
    if stray:
        raise TableError(f"{f.path}: its column(s) {sorted(stray)} carry field ids "
                         f"{sorted(stray.values())} that the Iceberg table's schema no longer "
                         "has (a column dropped and added again by another writer since the "
                         "batch was planned); restart the query: its next batch is written "
                         "with the table's ids")


def listed(table: IcebergTable | None) -> Any:
    """The data and delete files of the table's current snapshot (pyiceberg's
    ``inspect.files``); None when it has none (pyiceberg fails on a snapshot without
    manifests, as the first of a batch without files)."""
    current = None if table is None else table.current_snapshot()
    if table is None or current is None or not current.manifests(table.io):
        return None
    return table.inspect.files()


def new_spec(schema: Any, commit: TableCommit) -> Any:
    """The spec of a table rotsink creates: ``partitionBy``'s terms (identity on columns,
    Iceberg's transforms), named as Iceberg's Spark DDL names them."""
    from commit_protocol.tables.iceberg.transforms import spec_of

    terms = commit.partition_terms or tuple(PartitionTerm(c, c) for c in commit.partition_by)
    return spec_of(terms, schema)
