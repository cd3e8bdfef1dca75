"""``table.format=delta``: what the format takes and where its table is; the table itself is
:class:`~commit_protocol.tables.delta.table.DeltaFollowedTable`."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from commit_protocol.records.config import SinkConfig
from commit_protocol.records.schema_evolution import widens_types
from commit_protocol.storage import Storage
from commit_protocol.tables import TableFormat, TableRead, option_values
from commit_protocol.tables.delta.hive_names import HiveNames
from commit_protocol.tables.delta.names import (
    CATALOG_PREFIX,
    IDENTIFIER,
    CatalogNames,
    GlueNames,
    check_name_options,
)
from commit_protocol.tables.delta.storage import STORAGE_PREFIX, delta_location
from commit_protocol.tables.delta.table import DeltaFollowedTable
from commit_protocol.vocabulary.errors import OptionError, TableError
from commit_protocol.vocabulary.partition_terms import PartitionTerm


@dataclass(frozen=True)
class DeltaFormat(TableFormat):
    """``table.format=delta``: the table at the output's root, by delta-rs."""

    def check_options(self, config: SinkConfig) -> None:
        """Also refuse at start a store delta-rs is not set up for here (see
        :func:`delta_location`), before the first log commit finds it."""
        super().check_options(config)
        check_name_options(config.table_options)
        if widens_types(config.schema_evolution):
            raise OptionError(
                f"option schema.evolution={config.schema_evolution!r} with table.format=delta: "
                "delta-rs, which commits rotsink's Delta tables, cannot change a column's type "
                "(Delta's typeWidening feature; deltalake 1.6.6 casts an append to the table's "
                "type), and rotsink writes no Delta log by hand; widen types in a plain output "
                "or an Iceberg table, or keep schema.evolution=addColumns")
        try:
            delta_location(config.path if "://" in config.path else f"file://{config.path}",
                           config)
        except TableError as e:
            raise OptionError(f"option path={config.path!r}: {e}") from e

    def open(self, storage: Storage, config: SinkConfig) -> DeltaFollowedTable:
        uri, options = delta_location(storage.root_uri, config)
        return DeltaFollowedTable(uri, options, storage, names=names_of(config.table_options))

    def planned(self, storage: Storage, config: SinkConfig, schema_json: str) -> SinkConfig:
        table = self.open(storage, config)
        return replace(config, required_columns=table.required_columns(), generated_columns=tuple(
            (g.name, g.expression, g.type_name) for g in table.generated_columns()),
            field_ids=table.mapped_ids(schema_json))

    def widened(self, config: SinkConfig, schema_json: str) -> str:
        """The table's generated columns the stream lacks, appended (nullable, as Delta
        stores a stream's columns): the tasks compute them, the log records them. (The
        table as this process last read it: no request after the first.)"""
        from commit_protocol.storage import open_storage

        schema = json.loads(schema_json)
        have = {f["name"] for f in schema["fields"]}
        table = self.open(open_storage(config.path, config.fs_options), config)
        added = [{"name": g.name, "type": g.type_name, "nullable": True, "metadata": {}}
                 for g in table.generated_columns() if g.name not in have]
        if not added:
            return schema_json
        return json.dumps({**schema, "fields": [*schema["fields"], *added]})

    def joined_terms(self, storage: Storage, config: SinkConfig) -> tuple[PartitionTerm, ...]:
        """Without partitionBy, a table that exists gives its partition columns (each an
        identity term); with it, partitionBy's (the table's check refuses other columns,
        naming both)."""
        if config.partition_by_given:
            return config.all_terms
        columns = self.open(storage, config).partition_columns()
        if columns is None:
            return config.all_terms
        return tuple(PartitionTerm(c, c) for c in columns)

    def read_back(self, out: str) -> TableRead:
        from deltalake import DeltaTable

        delta = DeltaTable(out)
        ids = delta.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
        return TableRead(f"Delta table (delta-rs): version {delta.version()}, "
                         f"{len(delta.file_uris())} files, {len(ids)} rows", ids)


def names_of(table_options: dict[str, str]) -> CatalogNames | None:
    """The catalog that keeps the table's name; None where the table has only its path."""
    kind = option_values(table_options, CATALOG_PREFIX).get("type")
    if kind == "glue":
        return GlueNames(table_options)
    if kind == "hive":
        return HiveNames(table_options)
    return None


FORMAT = DeltaFormat("delta", library="deltalake", extra="delta", option_keys=(IDENTIFIER,),
                     option_prefixes=(STORAGE_PREFIX, CATALOG_PREFIX))
