"""``table.format=delta`` without Spark: the Delta table lists exactly the finalized files,
each once, through crashes between the two commit points, replays, racing drivers, added
columns, a table added to an older output, and on S3."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.commit.committer import Committer
from commit_protocol.reading import committed_files, open_committed
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import open_storage
from commit_protocol.tables import follow
from commit_protocol.tables.delta import snapshots as delta_snapshots
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import TableError

SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "grp", "type": "string", "nullable": True, "metadata": {}}]}
SCHEMA_JSON = json.dumps(SCHEMA)
GROWN_JSON = json.dumps({**SCHEMA, "fields": [*SCHEMA["fields"], {
    "name": "tag", "type": "string", "nullable": True, "metadata": {}}]})
ROWS = 12
QUERY = "q1"
GROUPS = ["a", "b", None]  # None: Spark's default partition, a null partition value in Delta


def forget() -> None:
    """What a process remembers of tables, dropped: the next call plays a new driver."""
    follow.forget()
    delta_snapshots.forget_all()


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


def table_config(path: str, **kw) -> SinkConfig:
    rotation = RotationPolicy(max_batches=kw.pop("max_batches", 2), interval_ms=0,
                              inactivity_ms=0)
    return SinkConfig(path=path, format="parquet", compression="snappy",
                      file_suffix=".parquet", partition_by=("grp",),
                      table_format="delta",
                      rotation=rotation, compact_interval=3, **kw)


def batch_rows(batch_id: int, *, tagged: bool = False) -> pa.RecordBatch:
    ids = list(range(batch_id * ROWS, (batch_id + 1) * ROWS))
    columns = {"id": pa.array(ids, pa.int64()), "grp": pa.array([GROUPS[i % 3] for i in ids])}
    if tagged:
        columns["tag"] = pa.array([f"t{i}" for i in ids])
    return pa.record_batch(columns)


def commit_batch(cfg: SinkConfig, batch_id: int, *, schema_json: str = SCHEMA_JSON,
                 tagged: bool = False):
    """One micro-batch as Spark drives it: the plan, one task, the commit."""
    storage = open_storage(cfg.path, cfg.fs_options)
    committer = Committer(storage, cfg, schema_json)
    plan = WritePlan.from_state(committer.latest_state(), storage.root_uri)
    planned = committer.planned(cfg)  # as the planning does
    report = TaskWriter(storage, planned, plan, batch_id=batch_id, partition=0, attempt=0,
                        query_id=QUERY).write([batch_rows(batch_id, tagged=tagged)])
    return Committer(storage, cfg, schema_json).commit(batch_id, [report])


def finalized(cfg: SinkConfig) -> dict[str, int]:
    storage = open_storage(cfg.path, cfg.fs_options)
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    return {f.path: f.length for f in committed_files(log, latest, state,
                                                      include_in_progress=False)}


def delta(cfg: SinkConfig, version: int | None = None):
    from deltalake import DeltaTable

    from commit_protocol.tables.delta.storage import delta_location

    uri, options = delta_location(open_storage(cfg.path, cfg.fs_options).root_uri, cfg)
    return DeltaTable(uri, version=version, storage_options=options or None)


def added_paths(cfg: SinkConfig) -> Counter:
    """How often each path was added over the table's whole history."""
    table = delta(cfg)
    counts: Counter = Counter()
    for version in range(table.version() + 1):
        before = set() if version == 0 else set(delta(cfg, version - 1).file_uris())
        counts.update(set(delta(cfg, version).file_uris()) - before)
    return counts


def assert_table_follows_the_log(cfg: SinkConfig) -> None:
    table = delta(cfg)
    actions = table.get_add_actions(flatten=True)
    files = dict(zip(actions.column("path").to_pylist(),
                     actions.column("size_bytes").to_pylist(), strict=True))
    assert files == finalized(cfg)
    assert max(added_paths(cfg).values(), default=1) == 1  # never listed twice
    ids = sorted(table.to_pyarrow_table().column("id").to_pylist())
    assert len(ids) == len(set(ids))


@pytest.fixture(params=["local", "s3", "azure"])
def cfg(request, tmp_path) -> SinkConfig:
    if request.param == "local":
        return table_config(str(tmp_path / "out"))
    if request.param == "azure":  # Azurite: the connection string reaches delta-rs too
        from tests.support.azurite import ACCOUNT, options

        endpoint, container = (request.getfixturevalue(f)
                               for f in ("azure_endpoint", "azure_container"))
        return table_config(f"abfss://{container}@{ACCOUNT}.dfs.core.windows.net/"
                            f"delta-{tmp_path.name}", fs_options=options(endpoint))
    # SeaweedFS, a server of its own: delta-rs calls that keep the GIL would starve moto's
    # server thread in this process
    endpoint, bucket = (request.getfixturevalue(f)
                        for f in ("seaweedfs_endpoint", "seaweedfs_bucket"))
    return table_config(f"s3://{bucket}/delta-{tmp_path.name}",
                        fs_options={"endpoint_url": endpoint})


def test_the_table_lists_exactly_the_finalized_files(cfg):
    for batch_id in range(6):
        commit_batch(cfg, batch_id)
    assert_table_follows_the_log(cfg)
    table = delta(cfg)
    # batch 0 creates the table; files roll every other batch: 1, 3 and 5 add one version each
    assert [h["rotsinkBatch"] for h in reversed(table.history())] == [0, 1, 3, 5]
    assert table.transaction_version(f"rotsink-{QUERY}") == 5
    # no table property of rotsink's own: engines delete rows as their defaults say (by
    # deletion vector, which rotsink's reader applies, or by rewriting files)
    assert table.metadata().configuration == {}
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert {a["partition.grp"] for a in actions} == {"a", "b", None}
    assert all(a["num_records"] > 0 and "min.id" in a for a in actions)
    # every row is finalized by batch 5; a third of them have a null grp
    nulls = table.to_pyarrow_table().filter(pa.compute.is_null(pa.compute.field("grp")))
    assert nulls.num_rows == 6 * ROWS // 3


@pytest.mark.parametrize("point", ["table.before_commit", "table.after_commit"])
@pytest.mark.parametrize("recovery", ["next-commit", "restart", "repair"])
def test_a_crash_between_the_two_commits_is_caught_up_once(cfg, monkeypatch, point, recovery):
    """Batch 3 is committed (its log file) but the driver dies before (or just after) its
    table commit; the next commit, the next start or ``verify --repair`` catches up, and
    the table lists each file once."""
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(cfg, 3)
    monkeypatch.delenv(failpoints.ENV_VAR)
    forget()  # a new driver: it remembers nothing
    storage = open_storage(cfg.path, cfg.fs_options)
    if recovery == "next-commit":
        commit_batch(cfg, 4)
    elif recovery == "restart":
        committer = Committer(storage, cfg, SCHEMA_JSON)
        committer.start_table(committer.latest_state())
    else:
        found = verify_output(storage, commit_timeout_s=0, fs_options=cfg.fs_options)
        if point == "table.before_commit":
            assert any("table (holding batches up to 1) lacks" in p for p in found.problems)
        assert verify_output(storage, commit_timeout_s=0, repair=True,
                             fs_options=cfg.fs_options).ok
    table = delta(cfg)
    assert table.transaction_version(f"rotsink-{QUERY}") == 3
    # one version per batch that rolled files, batch 3's once (a second commit of it would
    # re-add the same files, which the file list alone does not show); batch 4 rolls none
    assert [h.get("rotsinkBatch") for h in reversed(table.history())] == [0, 1, 3]
    assert_table_follows_the_log(cfg)


def test_a_repeated_or_racing_table_commit_adds_one_version(tmp_path):
    """Two drivers (a zombie and its successor, or a restart and ``--repair``) catch the
    same batch up at once, eight times over: one table version per batch."""
    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    for batch_id in range(2, 10):
        failpoints_env = {failpoints.ENV_VAR: "table.before_commit=raise"}
        with pytest.MonkeyPatch.context() as patch:
            for key, value in failpoints_env.items():
                patch.setenv(key, value)
            with pytest.raises(failpoints.FailpointError):
                commit_batch(cfg, batch_id)
        errors: list[BaseException] = []
        threads = [threading.Thread(target=catch_up, args=(cfg, errors)) for _ in range(2)]
        forget()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
    history = [h["rotsinkBatch"] for h in reversed(delta(cfg).history())]
    assert history == sorted(set(history)) == [0, 1, 3, 5, 7, 9]
    assert_table_follows_the_log(cfg)


def test_a_thread_waits_for_a_refresh_another_thread_is_starting(tmp_path, monkeypatch):
    """One process's snapshot shared by two threads: a thread reading the table while the
    other has just committed waits for the background refresh, even one not started yet."""
    cfg = table_config(str(tmp_path / "out"))
    commit_batch(cfg, 0)
    known = delta_snapshots.snapshot(str(tmp_path / "out"), {}, fresh=True)
    assert known is not None
    starting, start = threading.Event(), threading.Thread.start

    def slow_start(thread: threading.Thread) -> None:
        if thread.name == "rotsink-delta-refresh":
            starting.set()
            threading.Event().wait(0.3)  # the moment another thread may look in
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    committing = threading.Thread(target=known.committed, args=("rotsink-x", 7, 0))
    committing.start()
    assert starting.wait(10)
    assert known.ready().version() == 0  # joins the refresh once started, no error
    committing.join()
    assert known.mark("rotsink-x") == 7


def catch_up(cfg: SinkConfig, errors: list[BaseException]) -> None:
    """What a starting driver (or ``verify --repair``) does to the table."""
    try:
        storage = open_storage(cfg.path)
        committer = Committer(storage, cfg, SCHEMA_JSON)
        committer.start_table(committer.latest_state())
    except BaseException as e:  # noqa: B036 -- the test asserts there are none
        errors.append(e)


def test_added_columns_reach_the_table_before_the_files_that_have_them(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    grown = dataclasses.replace(cfg, schema_evolution="addColumns")
    for batch_id in range(2, 4):
        commit_batch(grown, batch_id, schema_json=GROWN_JSON, tagged=True)
    table = delta(cfg)
    assert [f.name for f in table.schema().fields] == ["id", "grp", "tag"]
    rows = table.to_pyarrow_table().to_pylist()
    assert {r["id"]: r["tag"] for r in rows if r["id"] >= 2 * ROWS} == \
        {i: f"t{i}" for i in range(2 * ROWS, 4 * ROWS)}
    assert all(r["tag"] is None for r in rows if r["id"] < 2 * ROWS)
    assert_table_follows_the_log(grown)


def test_a_table_added_to_an_older_output_is_reconciled(tmp_path):
    """An output written without a table, its early log files cleaned up: the first start
    with ``table.format=delta`` commits every finalized file at once."""
    plain = dataclasses.replace(table_config(str(tmp_path / "out")), table_format=None,
                                cleanup_delay_ms=0)
    for batch_id in range(8):  # compactions at 2 and 5 delete the early log files
        commit_batch(plain, batch_id)
    assert not (tmp_path / "out/_spark_metadata/0").exists()
    cfg = table_config(str(tmp_path / "out"))
    storage = open_storage(cfg.path)
    committer = Committer(storage, cfg, SCHEMA_JSON)
    committer.start_table(committer.latest_state())
    assert [h["rotsinkBatch"] for h in delta(cfg).history()] == [7]
    assert_table_follows_the_log(cfg)
    commit_batch(cfg, 8)
    assert_table_follows_the_log(cfg)


REFUSED = [  # (how the table at the path differs, what the error says, why)
    ("constraint", "the CHECK constraint positive (id > 0)", "another writer's, with a constraint"),
    ("partitions", "partitioned by [], the output by ['grp']", "other partition columns"),
    ("types", "column 'id' is \"string\" in the Delta table", "another type for a column"),
]


@pytest.mark.parametrize("make, expected, why", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_table_the_output_cannot_follow_is_refused_before_writing(tmp_path, make, expected,
                                                                    why):
    from deltalake import write_deltalake
    from deltalake.transaction import CommitProperties, Transaction

    out = tmp_path / "out"
    if make == "constraint":  # another writer's table at a fresh output path
        write_deltalake(str(out), pa.table({"id": [1], "grp": ["a"]}), partition_by=["grp"])
        delta(table_config(str(out))).alter.add_constraint({"positive": "id > 0"})
    else:
        cfg = table_config(str(out))
        commit_batch(cfg, 0)
        (out / "_delta_log").rename(tmp_path / "ours")
        data = pa.table({"id": pa.array(["x"] if make == "types" else [1]), "grp": ["a"]})
        ours = CommitProperties(app_transactions=[Transaction(f"rotsink-{QUERY}", 0)])
        write_deltalake(str(out), data, partition_by=None if make == "partitions" else ["grp"],
                        commit_properties=ours)  # as if this output's, but not its layout
    cfg = table_config(str(out))
    storage = open_storage(cfg.path)
    committer = Committer(storage, cfg, SCHEMA_JSON)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(TableError, match=re.escape(expected)):
        committer.start_table(committer.latest_state())
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_another_writer_s_file_is_followed_and_one_storage_lacks_is_a_problem(tmp_path):
    """A file another writer added to the table is no problem: ``verify`` notes it and the
    next commit follows it. A file the table lists that storage lacks is one: the table's
    readers fail on it."""
    from deltalake.transaction import AddAction, CommitProperties

    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    stray = tmp_path / "out" / "grp=a" / "stray.parquet"
    stray.write_bytes((tmp_path / "out" / next(iter(finalized(cfg)))).read_bytes())
    table = delta(cfg)
    for path, size in (("grp=a/stray.parquet", stray.stat().st_size), ("grp=a/gone.parquet", 9)):
        table.create_write_transaction(
            [AddAction(path, size, {"grp": "a"}, 0, True, "{}")], mode="append",
            schema=table.schema(), partition_by=["grp"], commit_properties=CommitProperties())
    result = verify_output(open_storage(cfg.path), commit_timeout_s=0)
    assert result.problems == ["grp=a/gone.parquet: listed by the delta table (another "
                               "writer's file) but missing from storage: the table's readers "
                               "fail"]
    assert "2 added" in result.notes[0]
    commit_batch(cfg, 2)
    assert {"grp=a/stray.parquet", "grp=a/gone.parquet"} <= set(finalized(cfg))


def test_vacuum_takes_nothing_rotsink_needs(tmp_path):
    """Delta's VACUUM with no retention, in full, between every batch of a rolling query:
    in-progress and staged files, intents and claims live under ``_rotsink/``, where it
    never looks; the output verifies and reads whole after each."""
    from commit_protocol.reading import read_batches

    cfg = table_config(str(tmp_path / "out"), max_batches=3)
    for batch_id in range(7):
        commit_batch(cfg, batch_id)
        delta(cfg).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False,
                          full=True)
        assert verify_output(open_storage(cfg.path), commit_timeout_s=0).ok
    storage = open_storage(cfg.path)
    log, latest, state = open_committed(storage)  # type: ignore[misc]
    schema = pa.schema([("id", pa.int64()), ("grp", pa.string())])
    ids = sorted(i for f in committed_files(log, latest, state, include_in_progress=True)
                 for b in read_batches(storage, f, state=state, schema=schema)
                 for i in b.column("id").to_pylist())
    assert ids == list(range(7 * ROWS))
    assert_table_follows_the_log(cfg)



def test_vacuum_beside_a_committing_driver_takes_nothing_rotsink_needs(tmp_path):
    """delta-rs's VACUUM as the issue of this feature runs it (no retention, not enforced),
    again and again while a driver commits back to back (files roll every other batch, the
    log compacts and cleans up every third): the output verifies and reads whole after."""
    import subprocess
    import sys

    from commit_protocol.storage import LocalStorage
    from tests.support.tables import finalized_ids, table_ids

    out = tmp_path / "out"
    driver = subprocess.Popen([sys.executable, "-m", "tests.support.committing_driver",
                               str(out), "60", "5", "delta"], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).parents[2])
    vacuums = 0
    try:
        assert driver.stdout is not None and driver.stdout.readline().startswith("COMMITTED")
        while driver.poll() is None:
            delta(table_config(str(out))).vacuum(retention_hours=0, dry_run=False,
                                                 enforce_retention_duration=False)
            vacuums += 1
    finally:
        driver.kill()
        driver.wait()
    assert vacuums >= 10
    found = verify_output(LocalStorage(str(out)), commit_timeout_s=0, deep=True)
    assert found.ok, found.problems
    schema = pa.schema([("id", pa.int64()), ("grp", pa.string())])
    assert table_ids(str(out), {"format": "parquet", "table.format": "delta"}) == \
        finalized_ids(LocalStorage(str(out)), schema)


def test_inspect_names_the_delta_tables_age(tmp_path, capsys):
    from datasource.commands import cli

    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    assert cli.main(["inspect", cfg.path]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("table")]
    version = delta(cfg).version()
    rows = sum(pq.ParquetFile(p).metadata.num_rows  # the table's files, read by pyarrow
               for p in Path(cfg.path).rglob("part-*.parquet"))
    assert line.startswith(f"table: delta table at version {version}: {rows} row(s); the log "
                           f"holds versions 0 to {version} ({version + 1} files")
    assert "last checkpoint at version none; log retention interval 30 days" in line
