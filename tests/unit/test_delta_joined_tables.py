"""A stream joins a Delta table another writer made (delta-rs here; Spark's own Delta writer
in ``tests/spark/test_table_spark_writers.py``): the table keeps its schema, partitioning and
properties, the output's log follows the files it had, every Delta table feature is honoured
or refused at start by name, and a NOT NULL column never receives a null."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.commit.layout import laid_out
from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import open_storage
from commit_protocol.tables.delta.features import REFUSED, WRITTEN
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import ConstraintError, TableError
from tests.unit.test_delta_commits import (
    QUERY,
    SCHEMA_JSON,
    assert_table_follows_the_log,
    batch_rows,
    commit_batch,
    delta,
    finalized,
    forget,
    table_config,
)

THEIRS = list(range(1000, 1010))  # the other writer's ids, none of the stream's


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


def their_table(cfg: SinkConfig, *, configuration: dict[str, str] | None = None,
                schema: pa.Schema | None = None) -> None:
    """The table another writer made at the output's path, before the stream's first batch."""
    from deltalake import write_deltalake

    groups = [("a", "b")[i % 2] for i in THEIRS]
    data = pa.table({"id": pa.array(THEIRS, pa.int64()), "grp": groups},
                    schema=schema or pa.schema([("id", pa.int64()), ("grp", pa.string())]))
    write_deltalake(cfg.path, data, partition_by=["grp"], configuration=configuration)


def stream_ids(batches: range) -> list[int]:
    """The ids the stream wrote in ``batches`` (its input, not rotsink's output)."""
    return [i for b in batches for i in batch_rows(b).column("id").to_pylist()]


def table_ids(cfg: SinkConfig) -> list[int]:
    """The table's ids by delta-rs's query engine (its Arrow reader refuses deletion vectors
    and v2 checkpoints), sorted."""
    from deltalake import QueryBuilder

    rows = QueryBuilder().register("t", delta(cfg)).execute("select id from t").read_all()
    return sorted(rows.column("id").to_pylist())


def tree(cfg: SinkConfig) -> list[str]:
    root = Path(cfg.path)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def start(cfg: SinkConfig) -> None:
    storage = open_storage(cfg.path)
    committer = Committer(storage, cfg, SCHEMA_JSON)
    committer.start_table(committer.latest_state())


def test_a_stream_joins_another_writer_s_table_keeping_its_properties(tmp_path, caplog):
    properties = {"delta.enableChangeDataFeed": "true", "delta.appendOnly": "true",
                  "delta.enableDeletionVectors": "true", "delta.logRetentionDuration":
                  "interval 3 days"}
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg, configuration=properties)
    theirs = set(delta(cfg).file_uris())
    start(cfg)  # the query's start
    for batch_id in range(6):
        commit_batch(cfg, batch_id)
    table = delta(cfg)
    ids = table_ids(cfg)
    assert ids == sorted(THEIRS + stream_ids(range(6)))  # every batch rolled by 5
    assert table.metadata().configuration == properties  # nothing forced on a joined table
    assert table.metadata().partition_columns == ["grp"]
    assert table.transaction_version(f"rotsink-{QUERY}") == 5
    assert "this output joins it" in caplog.text
    # the output's log follows the files the table had: rotsink's readers and (from the
    # next compaction, batch 5 here) Spark's list them, each once
    assert theirs <= {f"{cfg.path}/{p}" for p in finalized(cfg)}
    actions = table.get_add_actions(flatten=True)
    assert dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(),
                    strict=True)) == finalized(cfg)


def test_without_partition_by_the_output_takes_the_table_s_partitioning(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg)
    given = dataclasses.replace(cfg, partition_by=(), partition_by_given=False)
    for batch_id in range(2):  # laid out as the planning lays a batch out
        storage = open_storage(cfg.path)
        committer = Committer(storage, given, SCHEMA_JSON)
        commit_batch(laid_out(storage, given, committer.latest_state()), batch_id)
    assert finalized(cfg) and all(p.startswith(("grp=a/", "grp=b/", "grp=__HIVE_DEFAULT"))
                                  for p in finalized(cfg))
    ids = table_ids(cfg)
    assert ids == sorted(THEIRS + stream_ids(range(2)))
    assert_table_follows_the_log(cfg)


def test_other_partition_columns_are_refused_naming_the_table_s(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg)
    before = tree(cfg)
    with pytest.raises(TableError, match=re.escape("partitioned by ['grp'], the output by "
                                                   "[]: give partitionBy grp")):
        start(dataclasses.replace(cfg, partition_by=()))
    assert tree(cfg) == before


def test_a_crash_after_the_first_log_commit_of_a_joined_table_is_caught_up(tmp_path,
                                                                          monkeypatch):
    """The table has no mark of the output yet when the driver dies between its first two
    commit points: the restart catches batch 1 up rather than refusing the table."""
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg)
    commit_batch(cfg, 0)
    monkeypatch.setenv(failpoints.ENV_VAR, "table.before_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(cfg, 1)  # batch 1 rolls the files of batches 0 and 1
    monkeypatch.delenv(failpoints.ENV_VAR)
    forget()
    start(cfg)
    ids = table_ids(cfg)
    assert ids == sorted(THEIRS + stream_ids(range(2)))
    assert_table_follows_the_log(cfg)


def test_a_null_in_a_not_null_column_fails_the_task_before_anything_is_visible(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg, schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                       ("grp", pa.string())]))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)  # no null: written
    good = table_ids(cfg)
    assert good == sorted(THEIRS + stream_ids(range(2)))
    listed = finalized(cfg)
    nulls = pa.record_batch({"id": pa.array([7, None, None], pa.int64()),
                             "grp": ["a", "a", "b"]})
    with pytest.raises(ConstraintError, match=re.escape(
            "column 'id' is NOT NULL in the delta table, and batch 2 has 2 null value(s)")):
        _commit_rows(cfg, 2, nulls)
    assert table_ids(cfg) == good
    assert finalized(cfg) == listed


def _commit_rows(cfg: SinkConfig, batch_id: int, rows: pa.RecordBatch,
                 schema_json: str = SCHEMA_JSON) -> None:
    """One micro-batch of ``rows`` as Spark drives it: the output's schema as the writer
    widens it, the plan, one task, the commit."""
    from commit_protocol.records.plan import WritePlan
    from commit_protocol.tables.delta.format import FORMAT
    from commit_protocol.task.task_writer import TaskWriter

    storage = open_storage(cfg.path)
    committer = Committer(storage, cfg, FORMAT.widened(cfg, schema_json))
    plan = WritePlan.from_state(committer.latest_state(), storage.root_uri)
    report = TaskWriter(storage, committer.planned(cfg), plan, batch_id=batch_id, partition=0,
                        attempt=0, query_id=QUERY).write([rows])
    committer.commit(batch_id, [report])


def _features() -> list[str]:
    from deltalake import TableFeatures

    return [f for f in dir(TableFeatures) if not f.startswith("_")]


@pytest.mark.parametrize("feature", _features())
def test_each_table_feature_delta_rs_can_add_is_written_or_refused_by_name(tmp_path, feature):
    """Every feature of delta-rs's own list, added to another writer's table: either the
    stream appends to it (and the table's readers see each row once), or the start refuses
    the table naming the feature and writes nothing. A feature delta-rs learns to add in a
    later release fails here until it is decided."""
    from deltalake import TableFeatures

    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg)
    needs = ["TimestampWithoutTimezone"] if feature == "TimestampNanos" else []
    for name in [*needs, feature]:
        delta(cfg).alter.add_feature(getattr(TableFeatures, name),
                                     allow_protocol_versions_increase=True)
    added = (set(delta(cfg).protocol().writer_features or ()) |
             set(delta(cfg).protocol().reader_features or ()))
    assert added <= set(WRITTEN) | set(REFUSED), f"undecided: {added - set(WRITTEN)}"
    refused = sorted(added & set(REFUSED))
    if refused:
        before = tree(cfg)
        with pytest.raises(TableError, match=re.escape(f"the table feature {refused[0]!r}")):
            start(cfg)
        assert tree(cfg) == before
        return
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    ids = table_ids(cfg)
    assert ids == sorted(THEIRS + stream_ids(range(2)))


IN_USE = [  # (how the other writer set the table up, what the refusal names)
    ("column mapping", {"delta.columnMapping.mode": "name"}, None,  # delta-rs: col-<uuid>
     "column mapping (delta.columnMapping.mode=name), which rotsink cannot honour: its "
     "column(s) id, grp have physical names other than their names"),
    ("generated column", None, {"delta.generationExpression": "id * 2"},
     "the generated column doubled (GENERATED ALWAYS AS (id * 2))"),
    ("identity column", None, {"delta.identity.start": "1", "delta.identity.step": "1",
                               "delta.identity.allowExplicitInsert": "false"},
     "the identity column doubled"),
]


@pytest.mark.parametrize("how, configuration, metadata, expected", IN_USE,
                         ids=[c[0] for c in IN_USE])
def test_a_feature_in_use_that_rotsink_cannot_honour_is_refused_by_name(
        tmp_path, how, configuration, metadata, expected):
    cfg = table_config(str(tmp_path / "out"))
    schema = pa.schema([("id", pa.int64()), ("grp", pa.string())])
    if metadata is not None:
        schema = schema.append(pa.field("doubled", pa.int64(), metadata=metadata))
    _their_table_with(cfg, schema, configuration)
    before = tree(cfg)
    with pytest.raises(TableError, match=re.escape(expected)):
        start(cfg)
    assert tree(cfg) == before


def _their_table_with(cfg: SinkConfig, schema: pa.Schema,
                      configuration: dict[str, str] | None) -> None:
    """An empty table of ``schema`` (field metadata kept as Delta's column metadata)."""
    from deltalake import DeltaTable, Field, Schema
    from deltalake.schema import PrimitiveType

    fields = [Field(f.name, PrimitiveType("long" if f.type == pa.int64() else "string"),
                    nullable=True,
                    metadata={k.decode(): v.decode() for k, v in (f.metadata or {}).items()})
              for f in schema]
    DeltaTable.create(cfg.path, Schema(fields), partition_by=["grp"],
                      configuration=configuration)


TS_SCHEMA_JSON = json.dumps({"type": "struct", "fields": [
    {"name": name, "type": kind, "nullable": True, "metadata": {}}
    for name, kind in (("id", "long"), ("grp", "string"), ("ts", "timestamp"))]})
ZONE = "America/Los_Angeles"  # the session's: Spark's Arrow batches carry it


def timed_rows(batch_id: int, *, day: list | None = None) -> pa.RecordBatch:
    """Six rows 7 hours apart from 2026-11-30 20:00 UTC, whose days differ in UTC and the
    zone, and a null; each batch the same days (its files roll at the second)."""
    ids = list(range(batch_id * 6, batch_id * 6 + 6))
    start = dt.datetime(2026, 11, 30, 20, tzinfo=dt.timezone.utc)
    ts = [None if i % 6 == 4 else start + dt.timedelta(hours=7 * (i % 6)) for i in ids]
    columns = {"id": pa.array(ids, pa.int64()), "grp": pa.array(["a"] * 6),
               "ts": pa.array(ts, pa.timestamp("us", ZONE))}
    if day is not None:
        columns["day"] = pa.array(day, pa.date32())
    return pa.record_batch(columns)


def generated_table(cfg: SinkConfig, expression: str = "CAST(ts AS DATE)") -> SinkConfig:
    """Another writer's table partitioned by a generated day, as Spark's SQL makes it:
    ``day DATE GENERATED ALWAYS AS (CAST(ts AS DATE))``."""
    from deltalake import DeltaTable, Field, Schema
    from deltalake.schema import PrimitiveType

    fields = [Field("id", PrimitiveType("long")), Field("grp", PrimitiveType("string")),
              Field("ts", PrimitiveType("timestamp")),
              Field("day", PrimitiveType("date"),
                    metadata={"delta.generationExpression": expression})]
    DeltaTable.create(cfg.path, Schema(fields), partition_by=["day"])
    return dataclasses.replace(cfg, partition_by=("day",))


def test_a_generated_day_the_stream_lacks_is_computed_in_the_session_s_zone(tmp_path):
    from zoneinfo import ZoneInfo

    cfg = generated_table(table_config(str(tmp_path / "out")))
    start(dataclasses.replace(cfg))  # the start's check: the expression is one rotsink computes
    for batch_id in range(2):
        _commit_rows(cfg, batch_id, timed_rows(batch_id), TS_SCHEMA_JSON)
    from deltalake import QueryBuilder

    found = pa.table(QueryBuilder().register("t", delta(cfg)).execute(
        "select id, ts, day from t").read_all()).to_pylist()
    expected = {r["id"]: None if r["ts"] is None else r["ts"].astimezone(ZoneInfo(ZONE)).date()
                for b in range(2) for r in timed_rows(b).to_pylist()}
    assert {r["id"]: r["day"] for r in found} == expected
    utc = {r["id"]: r["ts"] and r["ts"].astimezone(dt.timezone.utc).date()
           for r in timed_rows(0).to_pylist()}
    assert any(utc[i] != expected[i] for i in utc)  # the zone decides some rows' day
    assert all(p.startswith("day=") for p in finalized(cfg))  # directories by the generated day


def test_a_generated_value_the_stream_gives_is_checked(tmp_path):
    cfg = generated_table(table_config(str(tmp_path / "out")))
    given = json.loads(TS_SCHEMA_JSON)
    given["fields"].append({"name": "day", "type": "date", "nullable": True, "metadata": {}})
    def days(batch_id: int) -> list[dt.date | None]:  # PST in December: UTC-8
        return [r["ts"] and r["ts"].astimezone(dt.timezone(dt.timedelta(hours=-8))).date()
                for r in timed_rows(batch_id).to_pylist()]

    _commit_rows(cfg, 0, timed_rows(0, day=days(0)), json.dumps(given))
    wrong = [*days(1)[:-1], dt.date(2000, 1, 1)]
    with pytest.raises(ConstraintError, match=re.escape(
            "column 'day' is generated as CAST(ts AS DATE) in the delta table, and 1 row(s) "
            "give it another value")):
        _commit_rows(cfg, 1, timed_rows(1, day=wrong), json.dumps(given))


@pytest.mark.parametrize("point", ["table.before_follow", "table.after_follow",
                                   "table.before_commit", "table.after_commit",
                                   "driver.after_log_write"])
@pytest.mark.parametrize("batch", [0, 3])
def test_a_crash_at_each_table_step_of_a_joined_table_loses_and_doubles_nothing(
        tmp_path, monkeypatch, point, batch):
    """Another writer's table partitioned by a generated day, NOT NULL id: the driver dies
    at a step of batch ``batch`` (the first one, which follows the table's own files in, or
    a later one), a new driver starts the query again and replays the batch: every row of
    theirs and of the stream's is in the table once, and the output's log lists what the
    table does."""
    from deltalake import DeltaTable, Field, Schema, write_deltalake
    from deltalake.schema import PrimitiveType

    cfg = dataclasses.replace(table_config(str(tmp_path / "out")), partition_by=("day",))
    fields = [Field("id", PrimitiveType("long"), nullable=False),
              Field("grp", PrimitiveType("string")), Field("ts", PrimitiveType("timestamp")),
              Field("day", PrimitiveType("date"),
                    metadata={"delta.generationExpression": "CAST(ts AS DATE)"})]
    DeltaTable.create(cfg.path, Schema(fields), partition_by=["day"])
    # delta-rs computes their day (in UTC: its session's zone)
    write_deltalake(cfg.path, pa.table(timed_rows(100)), mode="append")
    raised = []
    for batch_id in range(5):
        if batch_id == batch:  # another writer appends, then the driver dies at the step
            write_deltalake(cfg.path, pa.table(timed_rows(200)), mode="append")
            monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
        try:
            _commit_rows(cfg, batch_id, timed_rows(batch_id), TS_SCHEMA_JSON)
        except failpoints.FailpointError:
            raised.append(batch_id)
            monkeypatch.delenv(failpoints.ENV_VAR)
            forget()  # a new driver starts the query again and replays the batch
            start(cfg)
            _commit_rows(cfg, batch_id, timed_rows(batch_id), TS_SCHEMA_JSON)
    assert raised and raised[0] in (batch, batch + 1)  # the follow: at the next log file
    expected = sorted(r["id"] for b in (100, 200, *range(5))
                      for r in timed_rows(b).to_pylist())
    found = table_ids(cfg)
    finished = set(range(0, 4 * 6)) | {r["id"] for b in (100, 200)  # batch 4: still open
                                       for r in timed_rows(b).to_pylist()}
    assert found == sorted(i for i in expected if i in finished)
    actions = delta(cfg).get_add_actions(flatten=True)
    assert dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(),
                    strict=True)) == finalized(cfg)


def test_timestamp_partitions_are_recorded_as_utc_instants(tmp_path):
    """partitionBy a timestamp: the directories are named in the session's zone (Spark's
    cast, for Spark's path readers), the table records each file's instant in UTC as Delta's
    own writers do, so delta-rs reads the input's instants back (a null: a null)."""
    from deltalake import QueryBuilder

    cfg = dataclasses.replace(table_config(str(tmp_path / "out")), partition_by=("ts",))
    for batch_id in range(2):
        _commit_rows(cfg, batch_id, timed_rows(batch_id), TS_SCHEMA_JSON)
    found = pa.table(QueryBuilder().register("t", delta(cfg)).execute(
        "select id, ts from t").read_all()).to_pylist()
    expected = {r["id"]: r["ts"] for b in range(2) for r in timed_rows(b).to_pylist()}
    assert {r["id"]: r["ts"] for r in found} == expected
    recorded = {json.loads(line)["add"]["partitionValues"]["ts"]
                for log in Path(cfg.path, "_delta_log").glob("*.json")
                for line in log.read_text().splitlines() if '"add"' in line}
    assert recorded == {None if ts is None else ts.astimezone(dt.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ") for ts in expected.values()}
    assert "ts=2026-11-30 12%3A00%3A00" in {p.split("/")[0] for p in finalized(cfg)}  # 20:00Z


@pytest.mark.parametrize("point", ["table.before_commit", "driver.after_log_write"])
def test_a_timestamp_partition_s_zone_survives_a_crash_before_its_table_commit(
        tmp_path, monkeypatch, point):
    """The driver dies after batch 1's log commit, before its table commit: the restart
    catches the batch up from its log file, whose recorded zone turns the directories'
    wall-clock times into the same UTC instants (the restarted driver saw no task)."""
    from deltalake import QueryBuilder

    cfg = dataclasses.replace(table_config(str(tmp_path / "out")), partition_by=("ts",))
    _commit_rows(cfg, 0, timed_rows(0), TS_SCHEMA_JSON)
    monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
    with pytest.raises(failpoints.FailpointError):
        _commit_rows(cfg, 1, timed_rows(1), TS_SCHEMA_JSON)
    monkeypatch.delenv(failpoints.ENV_VAR)
    forget()
    start(cfg)
    found = pa.table(QueryBuilder().register("t", delta(cfg)).execute(
        "select id, ts from t").read_all()).to_pylist()
    assert {r["id"]: r["ts"] for r in found} == {
        r["id"]: r["ts"] for b in range(2) for r in timed_rows(b).to_pylist()}
