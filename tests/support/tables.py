"""Reading a table that follows an output the way outside readers do, for the tests."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from commit_protocol.storage import Storage


def finalized_ids(storage: Storage, schema: pa.Schema) -> Counter:
    """Every id in the output's finalized files (what the table must hold), counted."""
    from commit_protocol.reading import committed_files, open_committed, read_batches

    committed = open_committed(storage)
    if committed is None:
        return Counter()
    log, latest, state = committed
    return Counter(i for f in committed_files(log, latest, state, include_in_progress=False)
                   for batch in read_batches(storage, f, state=state, schema=schema)
                   for i in batch.column("id").to_pylist())


def delta_table(url: str, options: dict[str, str], version: int | None = None):
    """delta-rs's table at output ``url`` (written with sink ``options``)."""
    from deltalake import DeltaTable

    from commit_protocol.storage import open_storage
    from commit_protocol.tables.delta import delta_location
    from datasource.options import parse_sink_options

    config = parse_sink_options({**options, "path": url})
    uri, storage_options = delta_location(open_storage(url, config.fs_options).root_uri, config)
    return DeltaTable(uri, version=version, storage_options=storage_options or None)


def iceberg_table(url: str, options: dict[str, str]):
    """pyiceberg's table of output ``url`` (written with sink ``options``); None before the
    table exists."""
    from commit_protocol.storage import open_storage
    from commit_protocol.tables.iceberg import IcebergFollowedTable
    from datasource.options import parse_sink_options

    config = parse_sink_options({**options, "path": url})
    return IcebergFollowedTable(open_storage(url, config.fs_options).root_uri, config).loaded()


def table_ids(url: str, options: dict[str, str]) -> Counter:
    """Every id the table's own reader (delta-rs, pyiceberg) reads from the table at ``url``
    (none before the table exists)."""
    if options.get("table.format") == "iceberg":
        table = iceberg_table(url, options)
        if table is None or table.current_snapshot() is None:
            return Counter()
        return Counter(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = delta_table(url, options)
    except TableNotFoundError:
        return Counter()
    return Counter(delta.to_pyarrow_table(columns=["id"]).column("id").to_pylist())
