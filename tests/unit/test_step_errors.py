"""An error is not a kill: every step of the protocol raising, then Spark's abort, then the
replay of the batch, lose and duplicate nothing, and never leave the query unable to go on.

Driven as Spark drives a query, without Spark (:class:`~tests.support.spark_like.SparkLikeQuery`):
each micro-batch is planned (the process's first planning starts the table), written by one
task and committed; an error at any step aborts the epoch with the reports Spark holds, and
the restarted query replays the batch, in the same process (the harder case: it remembers the
table as started).
Each failpoint raises once. Then a last batch rolls every file, and the rows come from
outside rotsink: the input written, against the finalized files read from ``_spark_metadata``
by the tests' own reader and pyarrow (as Spark's readers read them), and the table read by its
own library. ``rotsink verify`` runs last, without ``--repair``: the restarts repaired all.

Before the abort kept what a committed log file names, every point from
``driver.after_stage`` on failed here: the abort deleted the fresh files the intent or the log
file named, and the replay stopped on a missing in-progress file.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.commit import after_commit
from commit_protocol.commit.committer import Committer
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import open_storage
from commit_protocol.tables import follow
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import AfterCommitError, RotsinkError
from tests.support.spark_like import QUERY, SparkLikeQuery
from tests.support.spark_log import finalized_paths, latest_batch
from tests.support.tables import rewrite_as_another_writer, table_ids

FIELD = {"nullable": True, "metadata": {}}
SCHEMA = {"type": "struct", "fields": [{"name": "id", "type": "long", **FIELD},
                                       {"name": "grp", "type": "string", **FIELD}]}
GROWN = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "tag", "type": "string", **FIELD}]}
GROUPS = ("a", "b", "c")
ROWS, BATCHES = 12, 8
GROWS_AT, SHARED_AT = 4, 5  # the batch that adds a column; before it, another writer's rewrite


def setup_config(setup: str, out: Path) -> SinkConfig:
    """Files that roll inside tasks (``maxRecords``), stay in progress across batches and
    are resumed six batches later (each batch writes one group from one task partition, in
    turn), rolled by the driver for their age at the last batch, a compaction and its
    clean-up every third batch, ``_SUCCESS`` markers."""
    cfg = SinkConfig(path=str(out), partition_by=("grp",), compact_interval=3,
                     cleanup_delay_ms=0, partition_commit_delay_ms=0,
                     feed_retention_ms=3_600_000,
                     rotation=RotationPolicy(max_records=8, max_batches=3, interval_ms=10_000,
                                             inactivity_ms=65))
    if setup == "jsonl":
        return cfg
    bulk = dataclasses.replace(cfg, format="parquet", compression="snappy",
                               file_suffix=".parquet", schema_evolution="addColumns")
    if setup == "parquet":
        return bulk
    table = dataclasses.replace(bulk, table_format=setup, partition_commit_delay_ms=None)
    if setup == "iceberg":  # snapshots expire while the batches commit
        return dataclasses.replace(table, table_options={"snapshotRetention": "1ms"})
    return table


def setup_points(setup: str) -> list[str]:
    converts = [p for p in failpoints.ALL_POINTS if p.endswith("_convert")]
    plain = [p for p in failpoints.TASK_POINTS + failpoints.DRIVER_POINTS + failpoints.LOG_POINTS
             if p not in converts and p != "driver.schema_change"]
    return {"jsonl": plain, "parquet": converts + ["driver.schema_change"],
            "delta": [p for p in failpoints.TABLE_POINTS if "expire" not in p],
            "iceberg": ["table.before_commit", "table.before_expire", "table.after_expire"],
            }[setup]


CASES = [(setup, point) for setup in ("jsonl", "parquet", "delta", "iceberg")
         for point in setup_points(setup)]


def armed_with(point: str) -> str:
    """``point`` raising once; the points reached only after another failure get it too."""
    if point == "driver.during_abort":
        return "task.before_report=raise:once,driver.during_abort=raise:once"
    if point == "task.after_fence_copy":  # the replay finds the failed attempt's claim
        return "task.after_resume=raise:once,task.after_fence_copy=raise:once"
    return f"{point}=raise:once"


def schema_json(cfg: SinkConfig, batch_id: int) -> str:
    grows = cfg.schema_evolution == "addColumns" and batch_id >= GROWS_AT
    return json.dumps(GROWN if grows else SCHEMA)


def rows(cfg: SinkConfig, batch_id: int) -> pa.RecordBatch | None:
    """Batch ``batch_id``'s rows, of one group; none for the last batch (its rolls only)."""
    if batch_id >= BATCHES:
        return None
    ids = list(range(batch_id * ROWS, (batch_id + 1) * ROWS))
    columns = {"id": pa.array(ids, pa.int64()), "grp": [GROUPS[batch_id % 3]] * ROWS}
    if schema_json(cfg, batch_id) != json.dumps(SCHEMA):
        columns["tag"] = [f"t{i}" for i in ids]
    return pa.record_batch(columns)


def query_of(cfg: SinkConfig) -> SparkLikeQuery:
    return SparkLikeQuery(cfg, rows=lambda b: rows(cfg, b),
                          schema_json=lambda b: schema_json(cfg, b))


def finalized_ids(cfg: SinkConfig) -> Counter:
    """The ids of the files ``_spark_metadata`` lists, read as Spark's readers read them."""
    latest = latest_batch(cfg.path)
    assert latest is not None
    read = pq.read_table if cfg.format == "parquet" else pj.read_json
    return Counter(i for path in finalized_paths(cfg.path, latest)
                   for i in read(path).column("id").to_pylist())


@pytest.fixture(autouse=True)
def fresh_process_memory():
    follow.forget()
    yield
    follow.forget()


@pytest.mark.parametrize("setup, point", CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_a_step_raising_loses_nothing_and_the_replay_goes_on(tmp_path, monkeypatch, setup,
                                                             point):
    armed = tmp_path / "failpoints"
    armed.write_text(armed_with(point))
    monkeypatch.setenv(failpoints.FILE_ENV_VAR, str(armed))
    cfg = setup_config(setup, tmp_path / "out")
    query = query_of(cfg)
    options = {"format": "parquet", "partitionBy": "grp", "table.format": setup}
    later = int(time.time() * 1000) + 60_000  # the commits' clock: Iceberg's snapshots expire
    for batch_id in range(BATCHES + 1):  # the last one rolls every file (its age)
        if cfg.table_format is not None and batch_id == SHARED_AT:
            rewrite_as_another_writer(cfg.path, options)
        query.run(batch_id, now_ms=later + (10 * batch_id if batch_id < BATCHES else 100_000))
    assert list(tmp_path.glob(f"failpoints.{point}.fired*")), f"{point} never fired"
    assert query.failures, "the armed step raised, and the batch was aborted"
    assert finalized_ids(cfg) == Counter(range(BATCHES * ROWS)), query.failures
    found = verify_output(open_storage(cfg.path), commit_timeout_s=0)
    assert found.ok and not found.pending, found.problems
    if cfg.table_format is not None:
        assert table_ids(cfg.path, options) == Counter(range(BATCHES * ROWS))


@pytest.mark.parametrize("setup", ["delta", "iceberg"])
def test_the_replay_of_the_last_batch_catches_its_table_up(tmp_path, monkeypatch, setup):
    """The table step of the last batch fails; the replay (the same process, which started
    the table already, and no batch after it) brings the table up to the log."""
    cfg = setup_config(setup, tmp_path / "out")
    query = query_of(cfg)
    later = int(time.time() * 1000) + 60_000
    for batch_id in range(3):
        query.run(batch_id, now_ms=later + 10 * batch_id)
    monkeypatch.setenv(failpoints.ENV_VAR, "table.before_commit=raise:1")
    failpoints._hits.clear()
    query.run(3, now_ms=later + 100_000)  # rolls every file: the table must list them
    assert [f.split(":")[0] for f in query.failures] == ["FailpointError"]
    options = {"format": "parquet", "partitionBy": "grp", "table.format": setup}
    finalized = finalized_ids(cfg)
    assert set(range(3 * ROWS)) <= set(finalized)  # rolled for their age by batch 3
    assert table_ids(cfg.path, options) == finalized


def test_the_abort_after_the_commit_point_keeps_the_committed_files(tmp_path, monkeypatch):
    """The case found from outside: the first batch's log file commits two in-progress files,
    the step after it raises, and the abort of the epoch used to delete both (every restart
    then failed on a missing in-progress file)."""
    cfg = setup_config("jsonl", tmp_path / "out")
    storage = open_storage(cfg.path)
    plan = WritePlan.from_state(None, storage.root_uri)
    rows = pa.record_batch({"id": pa.array(range(4), pa.int64()), "grp": ["a", "b"] * 2})
    report = TaskWriter(storage, cfg, plan, batch_id=0, partition=0, attempt=0,
                        query_id=QUERY).write([rows])
    monkeypatch.setenv(failpoints.ENV_VAR, "driver.after_log_write=raise")
    with pytest.raises(failpoints.FailpointError):
        Committer(storage, cfg, json.dumps(SCHEMA)).commit(0, [report], now_ms=0)
    monkeypatch.delenv(failpoints.ENV_VAR)
    Committer(storage, cfg, json.dumps(SCHEMA)).abort(0, [report])
    temps = [f.temp for f in report.files]
    assert len(temps) == 2 and all(storage.exists(t) for t in temps)
    assert verify_output(storage, commit_timeout_s=0).ok


def test_the_abort_of_a_batch_that_never_committed_leaves_its_files_to_the_clean_up(tmp_path):
    """Its commit may yet land (a create that timed out on the client may reach the store
    later: below), so the abort deletes nothing; no reader sees the files, and the clean-up
    of a later compaction deletes them once ``log.cleanupDelay`` has passed."""
    cfg = dataclasses.replace(setup_config("jsonl", tmp_path / "out"), cleanup_delay_ms=0)
    storage = open_storage(cfg.path)
    report = TaskWriter(storage, cfg, WritePlan.from_state(None, storage.root_uri), batch_id=0,
                        partition=0, attempt=0, query_id=QUERY).write([rows(cfg, 0)])
    Committer(storage, cfg, json.dumps(SCHEMA)).abort(0, [report])
    assert all(storage.exists(f.temp) for f in report.files)
    query = query_of(cfg)
    for batch_id in range(3):  # the replay, then a compaction (batch 2) and its clean-up
        query.run(batch_id, now_ms=int(time.time() * 1000) + 1000)
    assert not any(storage.exists(f.temp) for f in report.files)
    assert verify_output(storage, commit_timeout_s=0).ok


@pytest.mark.parametrize("lands", ["before the replay plans", "while the replay commits"])
def test_a_commit_that_lands_after_its_attempt_failed_is_rolled_forward_once(
        tmp_path, monkeypatch, lands):
    """The driver's create of the batch's intent (the commit's decision) timed out on the
    client (an answer slower than its timeout) and the attempt failed; the request reaches
    the store later, after Spark's abort. Abort used to find no intent and delete the fresh
    files the late one then named, and every restart failed on a missing file (found on Cloud
    Storage with slow answers). Now the files stay, and the late intent is rolled forward:
    by the replay's planning, or, landing while the replay commits, by the replay's commit,
    whose own intent finds this query's earlier one there. The batch's rows are there once."""
    from commit_protocol.storage.local import LocalStorage
    from commit_protocol.vocabulary.naming import INTENT_DIR

    cfg = setup_config("jsonl", tmp_path / "out")
    storage = open_storage(cfg.path)
    held: list = []  # the request the network holds; then none: the client gave up once
    original = LocalStorage.write_exclusive

    def timed_out(self, path, chunks):
        if path == f"{INTENT_DIR}/0" and held == []:  # batch 0's intent
            held.append((self, path, list(chunks)))
            raise TimeoutError("read timed out")
        return original(self, path, chunks)

    def land() -> None:
        self_, path, chunks = held[0]
        held[0] = None  # landed
        original(self_, path, chunks)

    monkeypatch.setattr(LocalStorage, "write_exclusive", timed_out)
    first = TaskWriter(storage, cfg, WritePlan.from_state(None, storage.root_uri), batch_id=0,
                       partition=0, attempt=0, query_id=QUERY).write([rows(cfg, 0)])
    with pytest.raises(TimeoutError):
        Committer(storage, cfg, json.dumps(SCHEMA)).commit(0, [first], now_ms=0)
    Committer(storage, cfg, json.dumps(SCHEMA)).abort(0, [first])
    if lands == "before the replay plans":
        land()
    committer = Committer(storage, cfg, json.dumps(SCHEMA))
    plan = WritePlan.from_state(committer.latest_state(), storage.root_uri)
    replay = TaskWriter(storage, cfg, plan, batch_id=0, partition=0, attempt=0,
                        query_id=QUERY).write([rows(cfg, 0)])
    if lands == "while the replay commits":
        land()
    Committer(storage, cfg, json.dumps(SCHEMA)).commit(0, [replay], now_ms=0)
    assert held == [None]
    query = query_of(cfg)
    for batch_id in range(1, 3):
        query.run(batch_id, now_ms=0)
    assert verify_output(storage, commit_timeout_s=0).ok
    committed = Committer(storage, cfg, json.dumps(SCHEMA)).latest_state()
    assert committed is not None and committed.batch_id == 2
    assert rows_committed(cfg) == Counter(range(3 * ROWS))


def rows_committed(cfg: SinkConfig) -> Counter:
    """Every committed row, finalized or in progress, read through rotsink's reading path."""
    from commit_protocol.reading import committed_files, open_committed, read_batches

    storage = open_storage(cfg.path)
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    return Counter(i for f in committed_files(log, latest, state)
                   for batch in read_batches(storage, f, state=state, schema=pa.schema(
                       [("id", pa.int64()), ("grp", pa.string())]))
                   for i in batch.column("id").to_pylist())


class Flaky:
    """A step that fails ``times`` times with ``error``, then returns ``["done"]``."""

    def __init__(self, times: int, error: Exception) -> None:
        self.times, self.error, self.calls = times, error, 0

    def __call__(self) -> list[str]:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return ["done"]


def test_a_step_after_the_commit_point_is_tried_again_with_backoff():
    waits: list[float] = []
    step = Flaky(3, OSError("503 SlowDown"))
    assert after_commit.tried("table commit (delta)", 4, step, sleep=waits.append) == ["done"]
    assert waits == list(after_commit.RETRY_DELAYS_S[:3])


def test_a_step_that_keeps_failing_names_the_batch_the_step_and_what_to_do(caplog):
    waits: list[float] = []
    step = Flaky(99, TimeoutError("catalog timed out"))
    with pytest.raises(AfterCommitError, match=r"batch 4 is committed .* table commit \(iceberg\)"
                       r" failed: TimeoutError: catalog timed out\. .* restart the query"):
        after_commit.tried("table commit (iceberg)", 4, step, sleep=waits.append)
    assert step.calls == len(after_commit.RETRY_DELAYS_S) + 1
    refused = Flaky(99, RotsinkError("refused"))
    with pytest.raises(RotsinkError, match="refused"), \
            caplog.at_level("ERROR", logger="rotsink.commit"):
        after_commit.tried("table commit (iceberg)", 4, refused, sleep=waits.append)
    assert refused.calls == 1  # a refusal is not tried again, and keeps its kind
    assert "batch 4 is committed (its _spark_metadata log file exists)" in caplog.text


def test_a_clean_up_that_keeps_failing_is_left_to_the_next_compaction(caplog):
    step = Flaky(99, OSError("503 SlowDown"))
    with caplog.at_level("WARNING", logger="rotsink.commit"):
        assert after_commit.housekeeping(5, step, sleep=lambda s: None) == []
    assert "batch 5 is committed; its clean-up failed 5 times (OSError: 503 SlowDown)" \
        in caplog.text
    with pytest.raises(failpoints.FailpointError):  # a failpoint still fails the commit
        after_commit.housekeeping(5, Flaky(1, failpoints.FailpointError("x")),
                                  sleep=lambda s: None)
