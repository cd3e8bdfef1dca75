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
    from commit_protocol.tables.delta.storage import delta_location
    from datasource.options.sink import parse_sink_options

    config = parse_sink_options({**options, "path": url})
    uri, storage_options = delta_location(open_storage(url, config.fs_options).root_uri, config)
    return DeltaTable(uri, version=version, storage_options=storage_options or None)


def iceberg_table(url: str, options: dict[str, str]):
    """pyiceberg's table of output ``url`` (written with sink ``options``); None before the
    table exists."""
    from commit_protocol.storage import open_storage
    from commit_protocol.tables.iceberg.table import IcebergFollowedTable
    from datasource.options.sink import parse_sink_options

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


def rewrite_as_another_writer(url: str, options: dict[str, str]) -> int:
    """What a maintenance job does to a shared table: rewrite files, keeping their rows
    (Delta's OPTIMIZE through delta-rs; through pyiceberg, the partition of most files
    overwritten with its own rows). Returns the files it removed (0: nothing to rewrite)."""
    if options.get("table.format") == "iceberg":
        return _rewrite_an_iceberg_partition(url, options)
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = delta_table(url, options)
    except TableNotFoundError:
        return 0
    return int(delta.optimize.compact()["numFilesRemoved"])


def _rewrite_an_iceberg_partition(url: str, options: dict[str, str], *, tries: int = 3) -> int:
    """The Iceberg half of :func:`rewrite_as_another_writer`. A rewrite whose commit lost a
    race is planned again from the table as it then is, as a maintenance job does: pyiceberg
    0.12 retries the commit of an overwrite (a delete and an append in one transaction) on
    the refreshed table but keeps the files it planned to delete, and refuses them with a
    ``ValidationException`` when the race changed them."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    for _ in range(tries - 1):
        try:
            return _rewrite_iceberg_once(url, options)
        except (CommitFailedException, ValidationException):
            continue
    return _rewrite_iceberg_once(url, options)


def _rewrite_iceberg_once(url: str, options: dict[str, str]) -> int:
    from pyiceberg.expressions import EqualTo

    table = iceberg_table(url, options)
    if table is None or table.current_snapshot() is None:
        return 0
    spec = table.spec()
    if not spec.fields:
        return 0
    column = table.schema().find_field(spec.fields[0].source_id).name
    files = table.inspect.files()
    values = [row.get(column) for row in files.column("partition").to_pylist()]
    counts = Counter(v for v in values if v is not None)
    if not counts:
        return 0
    value, removed = counts.most_common(1)[0]
    where = EqualTo(term=column, value=value)
    table.overwrite(table.scan(row_filter=where).to_arrow(), overwrite_filter=where)
    return removed
