"""Failpoints: every registered name is reached by the protocol, and arming is exact."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pyarrow as pa
import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.naming import partition_claim
from tests.unit.test_task_writer import SCHEMA_JSON, commit, config, rows, run_task, storage_of

SOURCES = Path(__file__).parents[2] / "commit_protocol"
TABLE_SCHEMA_JSON = ('{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,'
                     '"metadata":{}}]}')
GROWN_TABLE_SCHEMA_JSON = TABLE_SCHEMA_JSON[:-2] + (',{"name":"extra","type":"string",'
                                                   '"nullable":true,"metadata":{}}]}')
GROWN_SCHEMA_JSON = ('{"type":"struct","fields":[{"name":"extra","type":"string",'
                     '"nullable":true,"metadata":{}}]}')


def test_every_hit_in_the_code_is_registered_and_every_name_is_hit():
    hits = {name for path in SOURCES.rglob("*.py")
            for name in re.findall(r'failpoints\.hit\("([^"]+)"\)', path.read_text())}
    assert hits == set(failpoints.ALL_POINTS)


def protocol_run(tmp_path: Path) -> None:
    """One small run that passes every failpoint: appends that roll, a commit with renames,
    a fenced resume, a compaction with cleanup (keeping states for change feeds), an abort,
    a refused row quarantined,
    staged Parquet files encoded by a task and by the driver, a partition completed (its
    _SUCCESS marker)."""
    cfg = config(tmp_path, compact_interval=2, cleanup_delay_ms=0,
                 feed_retention_ms=3_600_000, rotation={"max_records": 3})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 4)]))
    storage_of(cfg).create_marker(partition_claim(1, 0))  # a zombie holds batch 1's claim
    commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(4, 1)]))
    Committer(storage_of(cfg), cfg, SCHEMA_JSON).abort(2, [None])
    # errors.mode=quarantine: a null in a NOT NULL column, kept in the quarantine
    refusing = config(tmp_path, path=str(tmp_path / "refusing"), required_columns=("id",),
                      quarantine=config(tmp_path, path=str(tmp_path / "refusing" / "_bad"),
                                        rotation={"max_batches": 1}))
    commit(tmp_path, refusing, 0, run_task(tmp_path, refusing, 0, [
        pa.record_batch({"id": pa.array([1, None], pa.int64())})]))
    # Parquet: a task encodes the file its record limit rolls; the driver the one that
    # inactivity rolls at the next commit, where no task touched it.
    bulk = config(tmp_path, path=str(tmp_path / "bulk"), format="parquet",
                  compression="snappy", file_suffix=".parquet", partition_commit_delay_ms=0,
                  rotation={"max_records": 3, "inactivity_ms": 1})
    commit(tmp_path, bulk, 0, run_task(tmp_path, bulk, 0, [rows(0, 4)]))
    commit(tmp_path, bulk, 1)
    # A restart that adds a column (schema.evolution): the commit records the change.
    grown = dataclasses.replace(bulk, schema_evolution="addColumns")
    Committer(storage_of(grown), grown, GROWN_SCHEMA_JSON).commit(2, [], now_ms=2)
    # A Delta table following a Parquet output: created by batch 0, which rolls a file; a
    # column added by batch 1 (its own table commit first), whose inactivity roll follows.
    table = dataclasses.replace(bulk, path=str(tmp_path / "table"),
                                table_format="delta",
                                partition_commit_delay_ms=None)
    Committer(storage_of(table), table, TABLE_SCHEMA_JSON).commit(
        0, [run_task(tmp_path, table, 0, [rows(0, 4)])], now_ms=0)
    grown_table = dataclasses.replace(table, schema_evolution="addColumns")
    Committer(storage_of(grown_table), grown_table, GROWN_TABLE_SCHEMA_JSON).commit(
        1, [], now_ms=1)
    # An Iceberg table keeping its snapshots 1 ms: batch 1's commit expires batch 0's.
    iceberg = dataclasses.replace(table, path=str(tmp_path / "iceberg"),
                                  table_format="iceberg",
                                  table_options={"snapshotRetention": "1ms"},
                                  rotation=dataclasses.replace(table.rotation, max_batches=1))
    later = int(time.time() * 1000) + 60_000  # the commits' clock: snapshots are older
    for batch_id in range(2):
        Committer(storage_of(iceberg), iceberg, TABLE_SCHEMA_JSON).commit(
            batch_id, [run_task(tmp_path, iceberg, batch_id, [rows(batch_id * 4, 4)])],
            now_ms=later + batch_id)


def test_the_protocol_run_passes_without_failpoints(tmp_path):
    protocol_run(tmp_path)


@pytest.mark.parametrize("point", failpoints.ALL_POINTS)
def test_each_failpoint_is_reached(tmp_path, monkeypatch, point):
    monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
    with pytest.raises(failpoints.FailpointError, match=re.escape(point)):
        protocol_run(tmp_path)


@pytest.mark.parametrize("spec, message", [
    ("task.after_apend=raise", "unknown failpoint 'task.after_apend'"),
    ("task.after_append=explode", "unknown action 'explode'"),
], ids=["typo-in-name", "unknown-action"])
def test_a_mistyped_spec_fails_loudly(spec, message):
    with pytest.raises(ValueError, match=message):
        failpoints.parse(spec)


def test_xn_fires_the_first_n_hits_across_processes(tmp_path, monkeypatch):
    """Markers are files, so the count holds across Spark's worker processes."""
    armed = tmp_path / "armed"
    armed.write_text("task.after_append=raise:x2")
    monkeypatch.delenv(failpoints.ENV_VAR, raising=False)
    monkeypatch.setenv(failpoints.FILE_ENV_VAR, str(armed))
    fired = 0
    for _ in range(4):
        try:
            failpoints.hit("task.after_append")
        except failpoints.FailpointError:
            fired += 1
    assert fired == 2
    assert sorted(p.name for p in tmp_path.glob("armed.*")) == \
        ["armed.task.after_append.fired", "armed.task.after_append.fired.1"]
