"""rotsink's tables found and read by an engine no one here wrote, by path, with no setting:
ClickHouse (through ``chdb``, in-process) reads the Delta table at the output's root and the
Iceberg table of the embedded catalog at the output's root (its metadata in ``metadata/``,
where path-based readers look), each equal to the table's own reader, a partition filter
included; a table an earlier rotsink made (metadata under ``_iceberg/metadata``) is found
once rotsink's next commit writes a new version."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.unit.test_delta_commits import commit_batch, delta, table_config
from tests.unit.test_iceberg_commits import iceberg_config, table_of

BATCHES = 6


@pytest.fixture(autouse=True)
def _files_below_the_working_directory(tmp_path_factory, monkeypatch):
    """ClickHouse reads files below its ``user_files_path`` only, which chdb takes from the
    working directory when it starts: every test's outputs lie below the base temp folder."""
    monkeypatch.chdir(tmp_path_factory.getbasetemp())


def clickhouse(query: str) -> list[tuple]:
    """The rows of a ClickHouse query, as tuples (``chdb``: ClickHouse in this process)."""
    import json

    import chdb

    result = chdb.query(query, "JSONCompact")
    return [tuple(row) for row in json.loads(result.bytes())["data"]]


def ids_by_clickhouse(function: str, out: str, where: str = "") -> Counter:
    return Counter(row[0] for row in clickhouse(f"SELECT id FROM {function}('{out}') {where}"))


def test_clickhouse_reads_the_delta_table_by_path(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(BATCHES):
        commit_batch(cfg, batch_id)
    own = delta(cfg).to_pyarrow_table(columns=["id", "grp"])
    assert ids_by_clickhouse("deltaLakeLocal", cfg.path) == Counter(own.column("id").to_pylist())
    in_a = Counter(i for i, g in zip(own.column("id").to_pylist(), own.column("grp").to_pylist(),
                                     strict=True) if g == "a")
    assert in_a and ids_by_clickhouse("deltaLakeLocal", cfg.path, "WHERE grp = 'a'") == in_a


def test_clickhouse_reads_the_iceberg_table_by_path(tmp_path):
    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(BATCHES):
        commit_batch(cfg, batch_id)
    own = table_of(cfg).scan(selected_fields=("id", "grp")).to_arrow()
    assert ids_by_clickhouse("icebergLocal", cfg.path) == Counter(own.column("id").to_pylist())
    in_a = Counter(i for i, g in zip(own.column("id").to_pylist(), own.column("grp").to_pylist(),
                                     strict=True) if g == "a")
    assert in_a and ids_by_clickhouse("icebergLocal", cfg.path, "WHERE grp = 'a'") == in_a


def test_a_table_an_earlier_rotsink_made_is_found_after_the_next_commit(tmp_path):
    """Its metadata under ``_iceberg/metadata``, which path readers do not look in: the next
    commit drops that setting, so the new version lands in ``metadata/``."""
    cfg = iceberg_config(str(tmp_path / "out"))
    commit_batch(cfg, 0)
    with table_of(cfg).transaction() as tx:  # the layout of rotsink before this version
        tx.set_properties({"write.metadata.path": f"file://{cfg.path}/_iceberg/metadata"})
    commit_batch(cfg, 1)  # rolls files: written under the old layout, not found by path
    assert list((tmp_path / "out" / "_iceberg" / "metadata").glob("*.metadata.json"))
    stale = ids_by_clickhouse("icebergLocal", cfg.path)
    for batch_id in range(2, 4):
        commit_batch(cfg, batch_id)
    table = table_of(cfg)
    assert "write.metadata.path" not in table.properties
    own = Counter(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
    assert ids_by_clickhouse("icebergLocal", cfg.path) == own
    assert stale != own


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_clickhouse_reads_a_shared_table_as_its_own_reader_does(tmp_path, table_format):
    """Another writer deleted rows (copy-on-write), appended a backfill and, for Delta,
    compacted: ClickHouse's read by path equals the table's own, and, once rotsink's log
    followed and compacted, the files Spark's readers list."""
    import dataclasses

    from tests.unit.test_shared_tables import append, delete_where, spark_ids, table_ids

    cfg = dataclasses.replace(table_config(str(tmp_path / "out")),
                              table_format=table_format)
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    delete_where(cfg, 0, 7)
    append(cfg, [9_000, 9_001])
    if table_format == "delta":
        delta(cfg).optimize.compact()
    function = "deltaLakeLocal" if table_format == "delta" else "icebergLocal"
    assert ids_by_clickhouse(function, cfg.path) == table_ids(cfg)
    for batch_id in range(3, 6):  # followed, then compacted into the log
        commit_batch(cfg, batch_id)
    expected = table_ids(cfg)
    assert ids_by_clickhouse(function, cfg.path) == expected == spark_ids(cfg)
    assert 9_000 in expected and not set(range(7)) & set(expected)
