"""A table others share, without Spark: another writer deletes rows by predicate, appends,
compacts and vacuums between rotsink's commits (delta-rs, pyiceberg); rotsink's commits land
once each, the log follows the table (rotsink's reader at the next commit, Spark's reading of
``_spark_metadata`` at the next compaction), through kills at the new steps, and ``verify``
tells the shared table from a broken one.

Expected rows come from the table's own reader (delta-rs, pyiceberg) and from pyarrow over
the files ``_spark_metadata`` lists as Spark reads it (``tests/support/spark_log.py``), never
from rotsink's reader, which is what is checked."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.reading import committed_files, open_committed
from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import open_storage
from commit_protocol.vocabulary import failpoints
from tests.support.spark_log import finalized_paths, latest_batch
from tests.unit.test_delta_commits import SCHEMA_JSON, commit_batch, forget, table_config

INTERVAL = 3  # table_config's compaction interval: batches 2, 5, 8, ... are compactions


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


@pytest.fixture(params=["delta", "iceberg"])
def cfg(request, tmp_path) -> SinkConfig:
    return dataclasses.replace(table_config(str(tmp_path / "out")),
                               table_format=request.param)


def out_of(cfg: SinkConfig) -> Path:
    return Path(cfg.path)


def format_of(cfg: SinkConfig) -> str:
    assert cfg.table_format is not None
    return cfg.table_format


# -- the three views: the table's own reader, Spark's listing, rotsink's reader ------------
def table_ids(cfg: SinkConfig) -> Counter:
    if format_of(cfg) == "delta":
        from deltalake import DeltaTable

        rows = DeltaTable(cfg.path).to_pyarrow_table(columns=["id"])
    else:
        rows = _iceberg(cfg).scan(selected_fields=("id",)).to_arrow()
    return Counter(rows.column("id").to_pylist())


def spark_ids(cfg: SinkConfig) -> Counter:
    """What ``spark.read.parquet(path)`` returns: the files the log lists as Spark reads it."""
    out = out_of(cfg)
    latest = latest_batch(out)
    assert latest is not None
    return Counter(i for path in finalized_paths(out, latest)
                   for i in pq.read_table(path, columns=["id"]).column("id").to_pylist())


def rotsink_ids(cfg: SinkConfig) -> Counter:
    """What rotsink's reader lists as finalized, read by pyarrow."""
    committed = open_committed(open_storage(cfg.path))
    assert committed is not None
    log, latest, state = committed
    return Counter(i for f in committed_files(log, latest, state, include_in_progress=False)
                   for i in pq.read_table(out_of(cfg) / f.path, columns=["id"])
                   .column("id").to_pylist())


def _iceberg(cfg: SinkConfig):
    from commit_protocol.tables.iceberg.table import IcebergFollowedTable

    table = IcebergFollowedTable(open_storage(cfg.path).root_uri, cfg).loaded()
    assert table is not None
    return table


# -- what other writers do ---------------------------------------------------------------
def delete_where(cfg: SinkConfig, low: int, high: int) -> None:
    """Delete rows ``low <= id < high`` (copy-on-write: the files holding them rewritten)."""
    if format_of(cfg) == "delta":
        from deltalake import DeltaTable

        DeltaTable(cfg.path).delete(f"id >= {low} AND id < {high}")
    else:
        _iceberg(cfg).delete(delete_filter=f"id >= {low} and id < {high}")


def append(cfg: SinkConfig, ids: list[int]) -> None:
    rows = pa.table({"id": pa.array(ids, pa.int64()), "grp": pa.array(["a"] * len(ids))})
    if format_of(cfg) == "delta":
        from deltalake import write_deltalake

        write_deltalake(cfg.path, rows, mode="append", partition_by=["grp"])
    else:
        table = _iceberg(cfg)
        table.append(rows.cast(table.schema().as_arrow()))


def verified(cfg: SinkConfig, *, repair: bool = False):
    result = verify_output(open_storage(cfg.path), commit_timeout_s=0, repair=repair)
    assert result.ok, result.problems
    return result


def test_the_log_follows_deletes_and_appends_at_the_next_commit_and_spark_at_a_compaction(cfg):
    for batch_id in range(3):  # batch 2: a compaction
        commit_batch(cfg, batch_id)
    written = table_ids(cfg)
    delete_where(cfg, 0, 6)
    append(cfg, [9_000, 9_001])
    after = table_ids(cfg)
    assert sum(after.values()) == sum(written.values()) - 6 + 2
    assert "other writers changed the table" in " ".join(verified(cfg).notes)

    commit_batch(cfg, 3)  # follows them: rotsink's reader has the table's rows at once
    assert rotsink_ids(cfg) == table_ids(cfg)
    assert spark_ids(cfg) != table_ids(cfg)  # Spark's readers: up to the next compaction
    assert not verified(cfg).notes
    commit_batch(cfg, 4)
    assert rotsink_ids(cfg) == table_ids(cfg)
    commit_batch(cfg, 5)  # the compaction: Spark's readers see the table's rows
    expected = table_ids(cfg)
    assert spark_ids(cfg) == rotsink_ids(cfg) == expected
    assert max(expected.values()) == 1 and 0 not in expected and expected[9_000] == 1
    assert not verified(cfg).notes


def test_a_compaction_and_a_vacuum_after_rotsink_followed_them(tmp_path):
    """Delta's OPTIMIZE replaces rotsink's small files; once a compaction has left them out
    of the log, a VACUUM with zero retention deletes them and no reader misses a row."""
    from deltalake import DeltaTable

    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    DeltaTable(cfg.path).optimize.compact()
    expected = table_ids(cfg)
    for batch_id in range(4, 6):
        commit_batch(cfg, batch_id)
    assert spark_ids(cfg) == rotsink_ids(cfg) == table_ids(cfg)
    assert set(expected) <= set(table_ids(cfg))
    removed = DeltaTable(cfg.path).vacuum(retention_hours=0, enforce_retention_duration=False,
                                          dry_run=False)
    assert removed  # OPTIMIZE's inputs are gone from storage
    assert spark_ids(cfg) == rotsink_ids(cfg) == table_ids(cfg)
    verified(cfg)


def test_a_vacuum_before_the_compaction_is_named_by_verify(tmp_path):
    from deltalake import DeltaTable

    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    delete_where(cfg, 0, 3)
    commit_batch(cfg, 3)  # followed; Spark's listing still has the rewritten file
    DeltaTable(cfg.path).vacuum(retention_hours=0, enforce_retention_duration=False,
                                dry_run=False)
    problems = verify_output(open_storage(cfg.path), commit_timeout_s=0).problems
    assert problems and all("before rotsink's next compaction" in p for p in problems), problems
    assert rotsink_ids(cfg) == table_ids(cfg)  # rotsink's reader does not need them


@pytest.mark.parametrize("point", ["table.before_follow", "table.after_follow"])
def test_a_kill_while_following_is_followed_once_by_the_replay(cfg, monkeypatch, point):
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    delete_where(cfg, 0, 4)
    monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(cfg, 2)
    monkeypatch.delenv(failpoints.ENV_VAR)
    forget()  # a new driver replays the batch
    commit_batch(cfg, 2)
    for batch_id in range(3, 6):
        commit_batch(cfg, batch_id)
    expected = table_ids(cfg)
    assert max(expected.values()) == 1 and not set(range(4)) & set(expected)
    assert spark_ids(cfg) == rotsink_ids(cfg) == expected
    verified(cfg)


@pytest.mark.parametrize("removal", ["followed", "not yet followed"])
def test_repair_catches_the_table_up_without_re_adding_what_it_removed(cfg, monkeypatch,
                                                                       removal):
    """A driver died between the log file and the table commit of batch 3: the table lacks
    batch 3 (a problem), while rows another writer deleted from earlier batches are no
    problem, and ``verify --repair`` commits batch 3 alone."""
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    if removal == "followed":
        delete_where(cfg, 0, 4)
    monkeypatch.setenv(failpoints.ENV_VAR, "table.before_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(cfg, 3)
    monkeypatch.delenv(failpoints.ENV_VAR)
    if removal == "not yet followed":
        delete_where(cfg, 0, 4)
    forget()
    problems = verify_output(open_storage(cfg.path), commit_timeout_s=0).problems
    assert len(problems) == 1 and "lacks" in problems[0], problems
    assert verify_output(open_storage(cfg.path), commit_timeout_s=0, repair=True).ok
    ids = table_ids(cfg)
    assert max(ids.values()) == 1 and not set(range(4)) & set(ids)
    assert set(range(3 * 12, 4 * 12)) & set(ids)  # batch 3's rows, once its files roll
    commit_batch(cfg, 4)
    commit_batch(cfg, 5)
    assert spark_ids(cfg) == rotsink_ids(cfg) == table_ids(cfg)


def test_another_writer_s_file_outside_the_partition_directories_is_named_not_listed(tmp_path):
    """A file in ``data/grp=a/`` (Iceberg's default data path) would break Spark's partition
    discovery of the whole output: the log never lists it, and verify says where it must go.
    rotsink's Iceberg tables send every writer's files to the output's root instead."""
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, CommitProperties

    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    source = next(p for p in out_of(cfg).glob("grp=a/*.parquet"))
    (out_of(cfg) / "data" / "grp=a").mkdir(parents=True)
    (out_of(cfg) / "data" / "grp=a" / "x.parquet").write_bytes(source.read_bytes())
    table = DeltaTable(cfg.path)
    table.create_write_transaction(
        [AddAction("data/grp=a/x.parquet", source.stat().st_size, {"grp": "a"}, 0, True, "{}")],
        mode="append", schema=table.schema(), partition_by=["grp"],
        commit_properties=CommitProperties())
    commit_batch(cfg, 2)
    committed = open_committed(open_storage(cfg.path))
    assert committed is not None
    assert "data/grp=a/x.parquet" not in {
        f.path for f in committed_files(*committed, include_in_progress=False)}
    problems = verify_output(open_storage(cfg.path), commit_timeout_s=0).problems
    assert any(p.startswith("data/grp=a/x.parquet: another writer's file") and
               "outside the output's partition directories" in p for p in problems), problems


def test_other_writers_of_an_iceberg_table_write_into_the_output_s_partitions(tmp_path):
    cfg = dataclasses.replace(table_config(str(tmp_path / "out")),
                              table_format="iceberg")
    commit_batch(cfg, 0)
    append(cfg, [9_000])
    added = [p.relative_to(out_of(cfg)).as_posix() for p in out_of(cfg).rglob("*.parquet")
             if not p.name.startswith("part-")]  # rotsink's own are part-<task>-...
    assert added and all(p.startswith("grp=a/") for p in added), added


def test_a_file_others_added_and_removed_again_is_known_until_it_is_gone(tmp_path):
    """A backfill's file, followed, then compacted away by an OPTIMIZE before rotsink's log
    compaction took it in: no log file lists it, and verify knows it for the table's until
    a VACUUM deletes it."""
    from deltalake import DeltaTable

    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    append(cfg, [9_000])
    commit_batch(cfg, 3)  # follows the append
    DeltaTable(cfg.path).optimize.compact()
    commit_batch(cfg, 4)  # follows the OPTIMIZE, which removed the backfill's file
    assert rotsink_ids(cfg) == table_ids(cfg)
    verified(cfg)
    commit_batch(cfg, 5)
    assert spark_ids(cfg) == rotsink_ids(cfg) == table_ids(cfg)
    DeltaTable(cfg.path).vacuum(retention_hours=0, enforce_retention_duration=False,
                                dry_run=False)
    verified(cfg)
    for batch_id in range(6, 9):  # the next compaction forgets what the VACUUM deleted
        commit_batch(cfg, batch_id)
    assert spark_ids(cfg) == rotsink_ids(cfg) == table_ids(cfg)
    verified(cfg)


def test_two_rotsink_queries_commit_each_batch_once_into_one_iceberg_table(tmp_path,
                                                                           monkeypatch):
    """A live stream and a backfill, each with its own output and checkpoint, into one table
    of a shared SQL catalog, their commits interleaved, one of them killed at a random step of
    its commit in each round and replayed by a new driver: the table holds every finalized
    row of both outputs once, each query's batches once each, and neither output's log lists
    the other's files."""
    import random

    from commit_protocol.commit.committer import Committer
    from commit_protocol.records.plan import WritePlan
    from commit_protocol.task.task_writer import TaskWriter
    from tests.unit.test_delta_commits import batch_rows

    catalog = {"table.catalog.type": "sql",
               "table.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
               "table.catalog.warehouse": f"file://{tmp_path}/warehouse",
               "table.identifier": "lake.events"}
    configs = {query: dataclasses.replace(
        table_config(str(tmp_path / query)), table_format="iceberg",
        table_options={k.removeprefix("table."): v for k, v in catalog.items()})
        for query in ("live", "backfill")}

    def commit(query: str, batch_id: int) -> None:
        cfg = configs[query]
        storage = open_storage(cfg.path)
        committer = Committer(storage, cfg, SCHEMA_JSON)
        plan = WritePlan.from_state(committer.latest_state(), storage.root_uri)
        offset = 0 if query == "live" else 1000  # the backfill's ids apart
        report = TaskWriter(storage, cfg, plan, batch_id=batch_id, partition=0, attempt=0,
                            query_id=query).write([batch_rows(batch_id + offset)])
        Committer(storage, cfg, SCHEMA_JSON).commit(batch_id, [report])

    rng = random.Random(40)
    points = ["table.before_commit", "table.after_commit", "driver.after_log_write",
              "driver.after_stage", None]
    for batch_id in range(8):
        for query in rng.sample(list(configs), 2):
            point = rng.choice(points)
            if point is not None:
                monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
                with pytest.raises(failpoints.FailpointError):
                    commit(query, batch_id)
                monkeypatch.delenv(failpoints.ENV_VAR)
                forget()  # a new driver replays the batch
            commit(query, batch_id)
    for cfg in configs.values():  # the last kills caught up by the next start
        committer = Committer(open_storage(cfg.path), cfg, SCHEMA_JSON)
        committer.start_table(committer.latest_state())

    table = _iceberg(configs["live"])
    summaries = [s.summary.additional_properties for s in table.snapshots()]
    marks = Counter((s["rotsink.owner"], s["rotsink.batch"]) for s in summaries
                    if "rotsink.owner" in s)
    assert max(marks.values()) == 1, marks  # each query's batch committed once
    assert {owner for owner, _ in marks} == {"rotsink-live", "rotsink-backfill"}
    expected = spark_ids(configs["live"]) + spark_ids(configs["backfill"])
    assert table_ids(configs["live"]) == expected and max(expected.values()) == 1
    for cfg in configs.values():
        assert rotsink_ids(cfg) == spark_ids(cfg)  # neither lists the other's files
        assert not verified(cfg).notes


def table_files(cfg: SinkConfig) -> set[str]:
    """The data files the table lists now, by name."""
    if format_of(cfg) == "delta":
        from deltalake import DeltaTable

        return {Path(uri).name for uri in DeltaTable(cfg.path).file_uris()}
    return {Path(path).name for path in
            _iceberg(cfg).inspect.files().column("file_path").to_pylist()}


def rewrite(cfg: SinkConfig) -> None:
    """What a maintenance job does to the table: its files rewritten, their rows kept
    (Delta's OPTIMIZE; an Iceberg partition overwritten with its own rows)."""
    from tests.support.tables import rewrite_as_another_writer

    options = {"format": "parquet", "table.format": format_of(cfg), "partitionBy": "grp"}
    assert rewrite_as_another_writer(cfg.path, options) > 0


TABLE_KILLS = ("table.before_follow", "table.after_follow", "table.before_commit",
               "table.after_commit")


@pytest.mark.parametrize("point", TABLE_KILLS)
def test_a_driver_down_past_every_clean_up_brings_back_nothing_another_writer_removed(
        cfg, monkeypatch, point):
    """A driver killed at a table step, then down while another writer deletes rows and
    rewrites the table, then restarted through compactions whose clean-up deletes every log
    file it may (``log.cleanupDelay`` 0, so any downtime is "longer than the delay"): no file
    the other writer removed comes back, no deleted row either. A table falls behind its log
    only by the batch its driver was killed in, the clean-up runs only in a driver, and a
    restarted driver catches the table up (from that batch's log file) before it commits or
    cleans up anything."""
    cfg = dataclasses.replace(cfg, cleanup_delay_ms=0)
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    if point in ("table.before_follow", "table.after_follow"):
        delete_where(cfg, 0, 2)  # reached only when another writer changed the table
    monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(cfg, 4)  # killed: no abort, nothing after the point
    monkeypatch.delenv(failpoints.ENV_VAR)
    before = table_files(cfg)
    delete_where(cfg, 4, 12)  # the driver is down meanwhile
    rewrite(cfg)
    removed = before - table_files(cfg)
    assert removed
    forget()  # a new driver, which replays the batch it was killed in, as Spark does
    for batch_id in range(4, 12):  # compactions (and their clean-ups) at batches 5, 8 and 11
        commit_batch(cfg, batch_id)
    assert not (out_of(cfg) / "_spark_metadata" / "4").exists()  # cleaned up
    assert not removed & table_files(cfg)
    ids = table_ids(cfg)
    assert max(ids.values()) == 1 and not set(range(4, 12)) & set(ids)
    assert set(range(4 * 12, 5 * 12)) <= set(ids)  # the batch it was killed in, once
    assert spark_ids(cfg) == rotsink_ids(cfg) == ids
    verified(cfg)


def test_verify_of_a_table_far_behind_a_cleaned_up_log(tmp_path, monkeypatch):
    """The table holds no batch of the query (its first table commit failed) and the log
    files of the early batches are cleaned up: verify names the missing files, and --repair
    reconciles the table, instead of failing on the log files that are gone."""
    cfg = dataclasses.replace(table_config(str(tmp_path / "out")), table_format=None,
                              cleanup_delay_ms=0)
    for batch_id in range(9):
        commit_batch(cfg, batch_id)
    assert not (out_of(cfg) / "_spark_metadata" / "0").exists()  # cleaned up
    followed = dataclasses.replace(cfg, table_format="delta")
    monkeypatch.setenv(failpoints.ENV_VAR, "table.before_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(followed, 9)
    monkeypatch.delenv(failpoints.ENV_VAR)
    problems = verify_output(open_storage(cfg.path), commit_timeout_s=0).problems
    assert len(problems) == 1 and "lacks" in problems[0], problems
    verified(followed, repair=True)
    assert table_ids(followed) == spark_ids(followed)


def test_files_nobody_cleans_up_are_carried_no_longer_than_the_retention():
    """A file the table removed is carried in the log's state (for verify) until the table's
    clean-up deletes it, but for RETIRED_KEEP_MS at most: a table rewritten often and never
    vacuumed does not grow every log head forever."""
    from commit_protocol.tables.sharing import RETIRED_KEEP_MS, Followed

    followed = Followed(version=3, removed=frozenset({"d=1/a.parquet"}))
    first = followed.compacted(["d=1/a.parquet"], now_ms=1_000)
    assert dict(first.retired) == {"d=1/a.parquet": 1_000}
    kept = Followed.of({"table_followed": first.recorded()}).compacted(
        ["d=1/a.parquet"], now_ms=1_000 + RETIRED_KEEP_MS)
    assert dict(kept.retired) == {"d=1/a.parquet": 1_000}
    assert not kept.compacted(["d=1/a.parquet"], now_ms=1_001 + RETIRED_KEEP_MS).retired
    # an earlier rotsink's state (paths alone) is stamped at its next compaction
    legacy = Followed.of({"table_followed": {"version": 3, "retired": ["d=1/b.parquet"]}})
    assert dict(legacy.compacted(["d=1/b.parquet"], now_ms=50).retired) == {"d=1/b.parquet": 50}


def test_partition_values_delta_encodes_are_followed_as_the_same_files(tmp_path, monkeypatch):
    """Delta's log holds paths as percent-encoded URIs (``grp=a%20b``, ``grp=c%2525d`` for
    Spark's ``c%25d``): another writer's delete is followed file for file, not as every such
    file removed and an encoded twin added (rows lost and doubled), and verify is clean."""
    import tests.unit.test_delta_commits as commits

    monkeypatch.setattr(commits, "GROUPS", ["a b", "c%d", None])
    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    delete_where(cfg, 0, 2)  # another writer: the next commit follows the table
    commit_batch(cfg, 4)
    assert {path.split("/")[0] for path in finalized_of(cfg)} >= {"grp=a b", "grp=c%25d"}
    assert rotsink_ids(cfg) == table_ids(cfg)
    assert not {0, 1} & set(rotsink_ids(cfg))
    verified(cfg)


def finalized_of(cfg: SinkConfig) -> list[str]:
    committed = open_committed(open_storage(cfg.path))
    assert committed is not None
    log, latest, state = committed
    return [f.path for f in committed_files(log, latest, state, include_in_progress=False)]
