"""What a reader may read: finalized files plus committed prefixes, and decoding them."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.errors import TruncatedFileError
from commit_protocol.log import MetadataLog
from commit_protocol.naming import from_uri, parse_partition_dir
from commit_protocol.state import SinkState
from commit_protocol.storage import Storage


def open_committed(storage: Storage) -> tuple[MetadataLog, int, SinkState] | None:
    """The log of ``storage`` with its latest committed batch and state, or None if empty.

    The log's compaction interval comes from the committed state, never from a default:
    readers must use the interval the path was written with (Spark derives it from the
    ``.compact`` names on disk), or they read the wrong files after a compaction.
    """
    log = MetadataLog(storage, compact_interval=1)
    latest = log.latest_batch_id()
    if latest is None:
        return None
    state = log.read_state(latest)  # found by its listed name, whatever the interval
    log.interval = state.compact_interval
    return log, latest, state


@dataclass(frozen=True)
class CommittedFile:
    """``length`` committed bytes of ``path``, in partition directory ``directory``."""

    path: str
    length: int
    directory: str
    in_progress: bool


def committed_files(log: MetadataLog, latest: int, state: SinkState, *,
                    include_in_progress: bool) -> list[CommittedFile]:
    """Every file (and committed prefix) visible as of batch ``latest``."""
    files = []
    for entry in log.finalized_entries(latest):
        path = from_uri(log.storage.root_uri, entry["path"])
        files.append(CommittedFile(path, int(entry["size"]), _directory(path), False))
    if include_in_progress:
        files += [CommittedFile(f.temp, f.size, f.directory, True)
                  for f in state.in_progress if f.size]
    return files


def _directory(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def read_file(storage: Storage, f: CommittedFile, *, fmt: str, schema: pa.Schema,
              partition_by: tuple[str, ...]) -> pa.Table:
    """Decode exactly the committed bytes of ``f`` into ``schema`` (partition columns added)."""
    from commit_protocol.formats import decode_rows, read_parquet

    data = storage.read(f.path, 0, f.length)
    if len(data) < f.length:
        raise TruncatedFileError(f"{f.path} holds {len(data)} bytes; the log commits {f.length}")
    data_schema = pa.schema([field for field in schema if field.name not in partition_by])
    table = (read_parquet(pa.BufferReader(data), data_schema) if fmt == "parquet"
             else decode_rows(fmt, data, data_schema))
    return _with_partition_columns(table, f.directory, schema, partition_by)


def _with_partition_columns(table: pa.Table, directory: str, schema: pa.Schema,
                            partition_by: tuple[str, ...]) -> pa.Table:
    if not partition_by:
        return table
    values = parse_partition_dir(directory)
    columns = []
    for field in schema:
        if field.name in partition_by:
            value = pa.array([values.get(field.name)] * table.num_rows, pa.string())
            columns.append(pc.cast(value, field.type) if field.type != pa.string() else value)
        else:
            columns.append(table.column(field.name))
    return pa.table(columns, schema=schema)
