"""``table.format=iceberg``: what the format takes (checked at start), the field ids a batch
plans and the directories its table owns; the table itself is
:class:`~commit_protocol.tables.iceberg.table.IcebergFollowedTable`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import Storage
from commit_protocol.tables import TableFormat, TableRead
from commit_protocol.tables.iceberg.catalog import (
    CATALOG_NAME,
    CATALOG_PREFIX,
    IDENTIFIER,
    LOCATION,
    check_location,
)
from commit_protocol.tables.iceberg.maintenance import RETENTION, retention_option
from commit_protocol.tables.iceberg.table import METADATA_DIR, IcebergFollowedTable
from commit_protocol.vocabulary.errors import OptionError
from commit_protocol.vocabulary.partition_terms import PartitionTerm


@dataclass(frozen=True)
class IcebergFormat(TableFormat):
    """``table.format=iceberg``: a table in a catalog, by pyiceberg."""

    def check_options(self, config: SinkConfig) -> None:
        super().check_options(config)
        identifier = config.table_options.get(IDENTIFIER)
        if identifier is not None and (identifier.count(".") < 1
                                       or "" in identifier.split(".")):
            raise OptionError(f"option table.identifier={identifier!r}: expected "
                              "namespace.table, for table.format=iceberg")
        retention_option(config.table_options)  # a bad one fails at start, naming it
        check_location(config.table_options)
        check_file_io(config.path)

    def check_partitioning(self, config: SinkConfig) -> None:
        """Any Iceberg transform; those but identity run in pyiceberg-core."""
        if config.partition_terms:
            from commit_protocol.tables.iceberg.transforms import check_installed

            check_installed()

    def open(self, storage: Storage, config: SinkConfig) -> IcebergFollowedTable:
        return IcebergFollowedTable(storage.root_uri, config)

    def planned(self, storage: Storage, config: SinkConfig, schema_json: str) -> SinkConfig:
        from commit_protocol.tables.iceberg.ids import planned_ids

        table = self.open(storage, config).loaded()
        required = () if table is None else tuple(f.name for f in table.schema().fields
                                                  if f.required)
        return replace(config, field_ids=planned_ids(table, schema_json),
                       required_columns=required, **sort_order_of(table))

    def with_credentials(self, config: SinkConfig, schema_json: str) -> SinkConfig:
        from commit_protocol.tables.iceberg.vended import with_vended_credentials

        return with_vended_credentials(config, schema_json)

    def joined_terms(self, storage: Storage, config: SinkConfig) -> tuple[PartitionTerm, ...]:
        """A table that exists names the hidden directories where it has the same transforms
        of the same columns (pyiceberg names ``bucket(16, id)`` ``id_bucket_16``, Spark
        ``id_bucket``), and gives its whole spec where partitionBy was not given; identity
        directories keep the column's name, which path readers read back."""
        from commit_protocol.tables.iceberg.specs import output_spec
        from commit_protocol.tables.iceberg.transforms import terms_of

        table = self.open(storage, config).loaded() \
            if config.partition_terms or not config.partition_by_given else None
        if table is None:
            return config.all_terms
        if not config.partition_by_given:
            found = terms_of(table.spec(), table.schema())
            return tuple(t if t.hidden else PartitionTerm(t.source, t.source) for t in found)
        spec = output_spec(table.metadata, config.all_terms)  # an earlier spec may be it
        if spec is None:
            return config.all_terms  # refused by the table's check, naming both
        found = terms_of(spec, table.schema())
        return tuple(theirs if theirs.hidden else ours
                     for theirs, ours in zip(found, config.all_terms, strict=True))

    def owned_directories(self, config: SinkConfig) -> tuple[str, ...]:
        """A table at the output's root (every table rotsink creates, by default) keeps its
        metadata in ``metadata/`` there, where path-based readers look for it."""
        return (METADATA_DIR,)

    def read_back(self, out: str) -> TableRead:
        from commit_protocol.records.config import SinkConfig
        from commit_protocol.storage import open_storage

        storage = open_storage(out)
        followed = IcebergFollowedTable(storage.root_uri,
                                        SinkConfig(path=out, format="parquet",
                                                   table_format=self.name))
        table = followed.loaded()
        assert table is not None, f"no Iceberg table follows {out}"
        ids = table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
        return TableRead(f"Iceberg table {followed.identifier} (pyiceberg, embedded catalog "
                         f"{out}/_iceberg/catalog.db): {len(table.snapshots())} snapshots, "
                         f"{len(table.inspect.files())} files, {len(ids)} rows", ids)


def sort_order_of(table: Any) -> dict[str, Any]:
    """The table's sort order as the tasks apply it (:mod:`commit_protocol.task.sorting`):
    its keys by column name and its id; none for an unsorted table."""
    from pyiceberg.table.sorting import NullOrder, SortDirection

    order = None if table is None else table.sort_order()
    if order is None or order.is_unsorted:
        return {}
    schema = table.schema()
    keys = tuple((schema.find_column_name(f.source_id) or "", str(f.transform),
                  f.direction == SortDirection.ASC, f.null_order == NullOrder.NULLS_FIRST)
                 for f in order.fields)
    return {"sort_order": keys, "sort_order_id": order.order_id}


def check_file_io(path: str) -> None:
    """Refuse at start an output whose URL pyiceberg's file IO cannot open (its fsspec
    file IO's schemes, which rotsink's Iceberg tables use on every store but S3): found only
    after the first log commit, the table step would fail on every batch. pyiceberg is asked,
    so a release that opens more schemes is taken as it is."""
    try:
        from pyiceberg.io.fsspec import SCHEME_TO_FS
    except ImportError:
        return  # the library is missing: check_installed says so
    scheme = path.partition("://")[0].lower() if "://" in path else "file"
    if scheme in SCHEME_TO_FS:
        return
    azure = " (the same container: abfss://container@account.dfs.core.windows.net/...)" \
        if scheme in ("wasb", "wasbs", "az") else ""
    raise OptionError(f"option path={path!r} with table.format=iceberg: pyiceberg opens no "
                      f"{scheme}:// URL (it opens {', '.join(sorted(filter(None, SCHEME_TO_FS)))}"
                      f"); write the output to one of those{azure}")


FORMAT = IcebergFormat("iceberg", library="pyiceberg", extra="iceberg",
                       option_keys=(IDENTIFIER, CATALOG_PREFIX + CATALOG_NAME, LOCATION, RETENTION),
                       option_prefixes=(CATALOG_PREFIX,))
