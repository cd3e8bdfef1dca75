"""Iceberg data files carry the table's Parquet field ids, as Iceberg's own writers' do: read
by an engine that resolves columns by id alone (Daft), by pyiceberg, polars and ClickHouse,
columns added by schema evolution included; a table an earlier rotsink started (files without
ids, read through the name mapping) goes on, read whole by each engine that applies the name
mapping. Expected rows come from the Parquet files on disk, read by pyarrow."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.formats.parquet import PARQUET_FIELD_ID
from commit_protocol.vocabulary.errors import TableError
from tests.unit.test_delta_commits import GROWN_JSON, commit_batch, forget
from tests.unit.test_engines import clickhouse
from tests.unit.test_iceberg_commits import iceberg_config, table_of

BATCHES = 4  # before the schema change, and as many after


@pytest.fixture(autouse=True)
def fresh_process_memory(tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.getbasetemp())  # ClickHouse reads below it
    forget()
    yield
    forget()


def written(out: str) -> Counter:
    """(id, grp, tag) of every row of the finished files on disk (pyarrow; grp from the
    directory name, tag None where a file predates the column)."""
    rows: Counter = Counter()
    for path in Path(out).rglob("part-*.parquet"):
        grp = path.parent.name.partition("=")[2]
        table = pq.read_table(path, partitioning=None)
        tags = table.column("tag").to_pylist() if "tag" in table.column_names \
            else [None] * table.num_rows
        rows.update(zip(table.column("id").to_pylist(),
                        [None if grp == "__HIVE_DEFAULT_PARTITION__" else grp] * table.num_rows,
                        tags, strict=True))
    return rows


def write_output(out: str, *, earlier_rotsink: bool = False, monkeypatch=None):
    """Batches of (id, grp), then of (id, grp, tag) after a schema change; the first half
    without field ids (as an earlier rotsink wrote them) when ``earlier_rotsink``."""
    cfg = iceberg_config(out)
    for batch_id in range(BATCHES):
        with pytest.MonkeyPatch.context() as patch:
            if earlier_rotsink:
                patch.setattr(Committer, "planned", lambda self, config: config)
            commit_batch(cfg, batch_id)
    grown = dataclasses.replace(cfg, schema_evolution="addColumns")
    for batch_id in range(BATCHES, 2 * BATCHES):
        commit_batch(grown, batch_id, schema_json=GROWN_JSON, tagged=True)
    forget()
    return cfg


def by_engine(ids, grps, tags) -> Counter:
    return Counter(zip(ids, grps, tags, strict=True))


def test_every_file_carries_the_tables_field_ids_added_columns_included(tmp_path):
    cfg = write_output(str(tmp_path / "out"))
    table_ids = {f.name: f.field_id for f in table_of(cfg).schema().fields}
    assert set(table_ids) == {"id", "grp", "tag"}
    files = list(Path(cfg.path).rglob("part-*.parquet"))
    assert files
    tagged = 0
    for path in files:
        schema = pq.read_schema(path)
        assert {f.name: int(f.metadata[PARQUET_FIELD_ID]) for f in schema} == \
            {name: table_ids[name] for name in schema.names}, path
        tagged += "tag" in schema.names
    assert tagged > 0


def test_engines_that_resolve_columns_by_id_read_every_column(tmp_path):
    import daft
    import polars as pl

    cfg = write_output(str(tmp_path / "out"))
    expected = written(cfg.path)
    assert len(expected) > 0 and any(tag is not None for _, _, tag in expected)
    table = table_of(cfg)
    got = daft.read_iceberg(table).to_pydict()
    assert by_engine(got["id"], got["grp"], got["tag"]) == expected
    in_a = daft.read_iceberg(table).where("grp = 'a'").to_pydict()
    assert by_engine(in_a["id"], in_a["grp"], in_a["tag"]) == \
        Counter({row: n for row, n in expected.items() if row[1] == "a"})
    frame = pl.scan_iceberg(table).collect()
    assert by_engine(frame["id"], frame["grp"], frame["tag"]) == expected
    arrow = table.scan().to_arrow()
    assert by_engine(arrow["id"].to_pylist(), arrow["grp"].to_pylist(),
                     arrow["tag"].to_pylist()) == expected
    rows = clickhouse(f"SELECT id, grp, tag FROM icebergLocal('{cfg.path}')")
    assert Counter(rows) == expected


def test_a_table_an_earlier_rotsink_started_is_continued_and_read_whole(tmp_path):
    """Files without ids before the upgrade, with them after: the engines that apply the
    table's name mapping read both; Daft, which does not, refuses the earlier files by name
    (docs/tables.md says so)."""
    import daft
    import polars as pl

    cfg = write_output(str(tmp_path / "out"), earlier_rotsink=True)
    files = list(Path(cfg.path).rglob("part-*.parquet"))
    with_ids = [p for p in files if pq.read_schema(p).field("id").metadata]
    assert 0 < len(with_ids) < len(files)
    expected = written(cfg.path)
    table = table_of(cfg)
    arrow = table.scan().to_arrow()
    assert by_engine(arrow["id"].to_pylist(), arrow["grp"].to_pylist(),
                     arrow["tag"].to_pylist()) == expected
    frame = pl.scan_iceberg(table).collect()
    assert by_engine(frame["id"], frame["grp"], frame["tag"]) == expected
    assert Counter(clickhouse(f"SELECT id, grp, tag FROM icebergLocal('{cfg.path}')")) == \
        expected
    with pytest.raises(Exception, match="carries no parquet field IDs"):
        daft.read_iceberg(table).to_pydict()


def test_a_file_whose_ids_the_table_no_longer_has_is_refused(tmp_path):
    """Another writer dropped a column and added it again between a batch's planning and its
    commit: the file's id for it would read as no column, so the table commit refuses it."""
    cfg = iceberg_config(str(tmp_path / "out"), max_batches=1)
    commit_batch(cfg, 0)
    forget()
    with pytest.MonkeyPatch.context() as patch:
        planned = Committer.planned

        def planned_then_changed(self, config):
            ids = planned(self, config)
            table = table_of(cfg)
            with table.update_schema() as update:
                update.delete_column("id")
            with table_of(cfg).update_schema() as update:
                update.add_column("id", table.schema().find_field("grp").field_type)
            return ids

        patch.setattr(Committer, "planned", planned_then_changed)
        with pytest.raises(TableError, match=r"carry field ids .* that the Iceberg table's "
                                             "schema no longer has"):
            commit_batch(cfg, 1)


def test_a_driver_killed_after_adding_the_batchs_columns_goes_on_from_there(tmp_path,
                                                                            monkeypatch):
    """The table has the batch's new column, the log does not yet: the restarted query
    finds the table its own (the column is its schema's), writes the batch with the table's
    id for it and commits it."""
    from commit_protocol.checks.verification import verify_output
    from commit_protocol.storage import open_storage
    from commit_protocol.vocabulary import failpoints
    from commit_protocol.vocabulary.errors import FailpointError
    from tests.unit.test_delta_commits import GROWN_JSON

    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    grown = dataclasses.replace(cfg, schema_evolution="addColumns")
    monkeypatch.setenv(failpoints.ENV_VAR, "table.after_schema=raise")
    with pytest.raises(FailpointError):
        commit_batch(grown, 2, schema_json=GROWN_JSON, tagged=True)
    monkeypatch.delenv(failpoints.ENV_VAR)
    forget()  # a new driver
    assert "tag" in {f.name for f in table_of(cfg).schema().fields}
    storage = open_storage(cfg.path)
    assert verify_output(storage, repair=True, commit_timeout_s=0, fs_options={}).ok, \
        "a repair knows only the log's schema: the planned column is no foreign table"
    restarted = Committer(open_storage(cfg.path), grown, GROWN_JSON)
    restarted.start_table(restarted.latest_state())  # refuses a table it cannot follow
    commit_batch(grown, 2, schema_json=GROWN_JSON, tagged=True)
    commit_batch(grown, 3, schema_json=GROWN_JSON, tagged=True)
    forget()
    tag_id = table_of(cfg).schema().find_field("tag").field_id
    tagged = [p for p in Path(cfg.path).rglob("part-*.parquet") if "tag" in pq.read_schema(p).names]
    assert tagged and all(
        int(pq.read_schema(p).field("tag").metadata[PARQUET_FIELD_ID]) == tag_id for p in tagged)
