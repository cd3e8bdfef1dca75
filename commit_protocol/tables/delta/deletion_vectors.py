"""Rows another writer deleted in place in a Delta table: its deletion vectors, read by
delta-rs (which decodes Delta's roaring bitmaps, inline or in ``deletion_vector_*.bin``
files) as of one table version, as the row positions each data file loses."""

from __future__ import annotations

from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import Storage
from commit_protocol.tables.delta.storage import delta_location
from commit_protocol.vocabulary.errors import TableError
from commit_protocol.vocabulary.uris import from_uri


def deleted_rows(storage: Storage, config: SinkConfig, version: int) -> dict[str, list[int]]:
    """Path below the output's root -> the ascending positions of the rows its deletion
    vector deletes, for every data file of table ``version`` that has one."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    uri, options = delta_location(storage.root_uri, config)
    try:
        table = DeltaTable(uri, version=version, storage_options=options or None)
        vectors = pa.RecordBatchReader.from_stream(table.deletion_vectors())
        found = {}
        for batch in vectors:
            paths = batch.column("filepath").to_pylist()
            for path, keep in zip(paths, batch.column("selection_vector"), strict=True):
                deleted = pc.indices_nonzero(pc.invert(keep.values)).to_pylist()
                found[from_uri(storage.root_uri, path)] = deleted
    except (DeltaError, OSError) as e:
        raise TableError(f"{uri}: cannot read the deletion vectors of Delta table version "
                         f"{version}, which the output's log follows ({type(e).__name__}: "
                         f"{e}); the query's next commit follows the newest version") from e
    return found
