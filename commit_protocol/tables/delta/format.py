"""``table.format=delta``: what the format takes and where its table is; the table itself is
:class:`~commit_protocol.tables.delta.table.DeltaFollowedTable`."""

from __future__ import annotations

from dataclasses import dataclass

from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import Storage
from commit_protocol.tables import TableFormat, TableRead
from commit_protocol.tables.delta.storage import STORAGE_PREFIX, delta_location
from commit_protocol.tables.delta.table import DeltaFollowedTable


@dataclass(frozen=True)
class DeltaFormat(TableFormat):
    """``table.format=delta``: the table at the output's root, by delta-rs."""

    def open(self, storage: Storage, config: SinkConfig) -> DeltaFollowedTable:
        uri, options = delta_location(storage.root_uri, config)
        return DeltaFollowedTable(uri, options, storage)

    def read_back(self, out: str) -> TableRead:
        from deltalake import DeltaTable

        delta = DeltaTable(out)
        ids = delta.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
        return TableRead(f"Delta table (delta-rs): version {delta.version()}, "
                         f"{len(delta.file_uris())} files, {len(ids)} rows", ids)


FORMAT = DeltaFormat("delta", library="deltalake", extra="delta",
                     option_prefixes=(STORAGE_PREFIX,))
