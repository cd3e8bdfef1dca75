"""Rows another writer deleted in place in an Iceberg table: the position deletes (delete
files, or a v3 table's deletion vectors) that apply to each data file in the snapshot the
output's log followed, planned and read by pyiceberg (which applies Iceberg's sequence-number
rules: a delete applies only to files written before it). Equality deletes are not applied:
a table with them is refused, as pyiceberg refuses them."""

from __future__ import annotations

from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import TableError


def deleted_rows(storage: Storage, config: SinkConfig, version: int) -> dict[str, list[int]]:
    """Path below the output's root -> ascending positions of its deleted rows, for every
    data file of the snapshot with sequence number ``version`` that has position deletes."""
    from pyiceberg.io.pyarrow import _read_deletes

    from commit_protocol.tables import same_uri
    from commit_protocol.tables.iceberg.catalog import below
    from commit_protocol.tables.iceberg.table import IcebergFollowedTable

    followed = IcebergFollowedTable(storage.root_uri, config)
    table = followed.loaded()
    snapshot = None if table is None else next(
        (s for s in table.metadata.snapshots if s.sequence_number == version), None)
    if table is None or snapshot is None:
        raise TableError(f"{followed.identifier}: the snapshot the output's log follows "
                         f"(sequence number {version}) has expired from the Iceberg table, "
                         "so the rows other writers deleted in place as of it are unknown: "
                         "the query's next commit follows the table's newest snapshot")
    try:
        tasks = list(table.scan(snapshot_id=snapshot.snapshot_id).plan_files())
    except ValueError as e:  # pyiceberg 0.12: "does not yet support equality deletes"
        raise TableError(f"{followed.identifier}: {e}; rotsink's reader applies position "
                         "deletes only: rewrite the table's data files (rewrite_data_files "
                         "with delete-file-threshold=1) to read the output") from e
    prefix = same_uri(followed.root) + "/"
    found: dict[str, list[int]] = {}
    for task in tasks:
        if not task.delete_files:
            continue
        path = task.file.file_path
        positions: set[int] = set()
        for delete_file in task.delete_files:  # one file may hold the deletes of many
            for target, deleted in _read_deletes(table.io, delete_file).items():
                if same_uri(target) == same_uri(path):
                    positions.update(deleted.to_pylist())
        if positions:
            found[below(path, prefix)] = sorted(positions)
    return found
