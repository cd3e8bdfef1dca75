"""Upgrade: a Parquet path written by the release that finished a Parquet file per task (commit
f74e71a, before Parquet rows were staged across micro-batches) continues with this code.

``tests/fixtures/parquet_per_task_v0/`` holds that release's output and checkpoint after three
micro-batches of a real query (``tests/fixtures/make_parquet_per_task_v0.py`` made it and says
how). Both readers resolve the log's absolute ``file://`` URIs as they are, so the fixture goes
back to the path it was written at, :data:`ROOT`, under a lock, and the same query continues
there: same checkpoint, query id, output path and input directory; new input files with new
names (the old ones are not in the fixture).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commit_protocol.log import open_committed
from commit_protocol.storage import LocalStorage

ROOT = Path("/tmp/rotsink-fixture-v0")  # where the old release wrote the fixture
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "parquet_per_task_v0"
SCHEMA = "id LONG, name STRING, grp STRING, score DOUBLE"
ROWS_PER_BATCH, OLD_BATCHES = 4, 3  # as in make_parquet_per_task_v0.py
OLD_IDS = list(range(OLD_BATCHES * ROWS_PER_BATCH))


def batch_ids(batch: int) -> list[int]:
    return list(range(batch * ROWS_PER_BATCH, (batch + 1) * ROWS_PER_BATCH))


def write_input(directory: Path, batches: range) -> None:
    """One file per micro-batch, rows as the fixture's (``grp`` = ``g<id % 3>``), each file
    newer than the one before."""
    directory.mkdir(parents=True, exist_ok=True)
    for batch in batches:
        rows = [{"id": i, "name": f"row {i}", "grp": f"g{i % 3}", "score": i / 4}
                for i in batch_ids(batch)]
        path = directory / f"in-{batch:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        # maxFilesPerTrigger takes the oldest files first: distinct times keep file = batch
        stamp = time.time() - 100 + batch
        os.utime(path, (stamp, stamp))


def continue_query(spark, source: Path, out: Path, ck: Path, **options: str):
    """The fixture's query (same plan and sink options), run until ``source`` is read."""
    stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .json(str(source)).repartition(2))
    writer = (stream.writeStream.format("rotsink").option("checkpointLocation", str(ck))
              .option("format", "parquet").option("partitionBy", "grp")
              .trigger(availableNow=True))
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start(str(out))
    query.awaitTermination()
    return query


def finalized(out: Path) -> dict[str, str]:
    """Finalized part files (relative name -> sha256) outside ``_rotsink/``."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("part-*")) if "_rotsink" not in p.relative_to(out).parts}


def staged(out: Path) -> list[str]:
    """Files under ``_rotsink/inprogress/`` (Parquet slots' staged Arrow IPC streams)."""
    inprogress = out / "_rotsink" / "inprogress"
    return sorted(p.name for p in inprogress.rglob("*") if p.is_file()) \
        if inprogress.exists() else []


def is_arrow_stream(path: Path) -> bool:
    """An Arrow IPC stream (continuation marker), not a Parquet file (``PAR1``)."""
    with path.open("rb") as f:
        return f.read(4) == b"\xff\xff\xff\xff"


def spark_ids(spark, out: Path) -> list[int]:
    return sorted(r.id for r in spark.read.parquet(str(out)).select("id").collect())


def rotsink_ids(spark, out: Path, **options: str) -> list[int]:
    reader = spark.read.format("rotsink")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(r.id for r in reader.load(str(out)).select("id").collect())


def rotsink_rows(spark, out: Path) -> list[tuple]:
    rows = spark.read.format("rotsink").load(str(out)).collect()
    return sorted((r.id, r.name, r.grp, r.score) for r in rows)


def expected_rows(ids: list[int]) -> list[tuple]:
    return [(i, f"row {i}", f"g{i % 3}", i / 4) for i in ids]


def verify(out: Path) -> subprocess.CompletedProcess:
    """``rotsink verify --deep <out>``: the console script beside this interpreter."""
    script = Path(sys.executable).parent / "rotsink"
    command = [str(script)] if script.exists() else \
        [sys.executable, "-c",
         "import sys; from datasource.commands.cli import main; sys.exit(main())"]
    return subprocess.run([*command, "verify", "--deep", str(out)], capture_output=True,
                          text=True, timeout=120)


def assert_verified(out: Path) -> None:
    result = verify(out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PROBLEM" not in result.stdout, result.stdout


def assert_per_task_parquet(out: Path, batches: range) -> None:
    """Spark's file sink layout for each batch: finished Parquet files of that batch only, one
    per (task, partition directory), roll 000, holding exactly the batch's rows."""
    files = [p for p in out.rglob("part-*.parquet") if "_rotsink" not in p.relative_to(out).parts]
    for batch in batches:
        mine = [p for p in files if p.name.split("-")[2] == f"{batch:06d}"]
        assert mine, f"batch {batch} finished no Parquet file"
        ids = []
        for p in mine:
            task, _, roll = p.name.removesuffix(".parquet").split("-")[1:]
            assert int(task) < 2 and roll == "000", p.name  # 2 tasks, one file each per dir
            file_ids = pq.read_table(p, columns=["id"]).column("id").to_pylist()
            assert {f"grp=g{i % 3}" for i in file_ids} == {p.parent.name}, (p, file_ids)
            ids += file_ids
        assert sorted(ids) == batch_ids(batch), (batch, [p.name for p in mine])


@pytest.fixture
def upgraded() -> Iterator[tuple[Path, Path, Path]]:
    """The old release's output and checkpoint back at :data:`ROOT` (one test at a time
    across processes), and the query's input directory, empty."""
    with open(f"{ROOT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            shutil.rmtree(ROOT, ignore_errors=True)
            ROOT.mkdir(parents=True)
            shutil.copytree(FIXTURE / "out", ROOT / "out")
            shutil.copytree(FIXTURE / "ck", ROOT / "ck")
            # The file source's checkpoint names its input directory: on restart Spark
            # re-plans the last committed batch under the current one ("Wrong basePath"
            # otherwise). The old input files need not exist; new ones get new names.
            yield ROOT / "out", ROOT / "ck", ROOT / "in"
        finally:
            shutil.rmtree(ROOT, ignore_errors=True)


def test_fixture_is_the_old_per_task_layout(spark, upgraded):
    out, _, _ = upgraded
    assert staged(out) == []
    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None and committed[1] == OLD_BATCHES - 1
    assert committed[2].in_progress == ()
    assert_per_task_parquet(out, range(OLD_BATCHES))
    # Read by this code before any new batch: both readers, every old row once.
    assert spark_ids(spark, out) == rotsink_ids(spark, out) == OLD_IDS
    assert_verified(out)


def test_upgrade_continues_staging_then_max_batches_one_finishes_everything(spark, upgraded):
    out, ck, source = upgraded
    old_files = finalized(out)
    old_log = {p.name: p.read_bytes() for p in (out / "_spark_metadata").iterdir()}
    query_id = json.loads((ck / "metadata").read_text())["id"]

    # Default rotation: the new rows are staged across micro-batches, not finished.
    write_input(source, range(3, 5))
    query = continue_query(spark, source, out, ck)
    assert str(query.id) == query_id and query.lastProgress["batchId"] == 4
    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None and committed[1] == 4
    assert committed[2].query_id == query_id and committed[2].in_progress
    temps = [out / f.temp for f in committed[2].in_progress]
    assert all(p.name in staged(out) and is_arrow_stream(p) for p in temps), temps
    assert rotsink_rows(spark, out) == expected_rows(list(range(20)))  # each row once
    assert rotsink_ids(spark, out, includeInProgress="false") == OLD_IDS
    assert spark_ids(spark, out) == OLD_IDS  # Spark sees the finalized rows only
    assert finalized(out) == old_files  # nothing new finished, nothing old touched
    assert_verified(out)

    # rotation.maxBatches=1: batch 5 appends to the staged slots it touches and rolls every
    # open slot; from then on every batch finishes its own files, as the old release did.
    staged_names = {f.name for f in committed[2].in_progress}  # "grp=g0/part-..."
    write_input(source, range(5, 8))
    query = continue_query(spark, source, out, ck, **{"rotation.maxBatches": "1"})
    assert str(query.id) == query_id and query.lastProgress["batchId"] == 7
    committed = open_committed(LocalStorage(str(out)))
    # nothing in progress (staged temp files left behind go after log.cleanupDelay)
    assert committed is not None and committed[1] == 7 and committed[2].in_progress == ()
    everything = list(range(32))
    assert rotsink_rows(spark, out) == expected_rows(everything)
    assert rotsink_ids(spark, out, includeInProgress="false") == everything
    assert spark_ids(spark, out) == everything
    assert sorted((r.id, r.name, r.grp, r.score) for r in spark.read.parquet(str(out))
                  .collect()) == expected_rows(everything)
    now = finalized(out)
    assert {k: now[k] for k in old_files} == old_files  # old files unchanged
    assert staged_names <= set(now)  # the staged slots were finished as Parquet
    assert_per_task_parquet(out, range(6, 8))
    for name, content in old_log.items():
        assert (out / "_spark_metadata" / name).read_bytes() == content
    assert_verified(out)


def test_upgrade_with_max_batches_one_finishes_parquet_per_task_as_before(spark, upgraded):
    out, ck, source = upgraded
    old_files = finalized(out)
    old_log = {p.name: p.read_bytes() for p in (out / "_spark_metadata").iterdir()}
    query_id = json.loads((ck / "metadata").read_text())["id"]
    write_input(source, range(3, 11))  # batches 3-10: 9.compact lists old and new files
    query = continue_query(spark, source, out, ck, **{"rotation.maxBatches": "1"})
    assert str(query.id) == query_id and query.lastProgress["batchId"] == 10
    assert (out / "_spark_metadata" / "9.compact").exists()
    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None and committed[1] == 10 and committed[2].in_progress == ()
    everything = list(range(44))
    assert spark_ids(spark, out) == everything
    assert rotsink_rows(spark, out) == expected_rows(everything)
    now = finalized(out)
    assert {k: now[k] for k in old_files} == old_files
    for name, content in old_log.items():  # compaction wrote 9.compact, kept 0-2 as they were
        assert (out / "_spark_metadata" / name).read_bytes() == content
    # The new batches have the old release's layout: Spark's file sink's, one file per task.
    assert_per_task_parquet(out, range(OLD_BATCHES + 8))
    assert_verified(out)


# -- a path written by the release whose every log file carried the whole state -------------
V1_ROOT = Path("/tmp/rotsink-fixture-v1")  # where that release wrote the fixture
V1_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "jsonl_full_state_v1"
V1_SCHEMA = "id LONG, name STRING, grp STRING"
V1_ROWS_PER_BATCH, V1_BATCHES = 6, 3  # as in make_jsonl_full_state_v1.py


def v1_rows(ids: range) -> list[tuple]:
    return [(i, f"row {i}", f"g{i % 3}") for i in ids]


def write_v1_input(directory: Path, batches: range) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for batch in batches:
        ids = range(batch * V1_ROWS_PER_BATCH, (batch + 1) * V1_ROWS_PER_BATCH)
        path = directory / f"in-{batch:05d}.json"
        path.write_text("".join(json.dumps({"id": i, "name": n, "grp": g}) + "\n"
                                for i, n, g in v1_rows(ids)))
        stamp = time.time() - 100 + batch
        os.utime(path, (stamp, stamp))


def continue_v1_query(spark, source: Path, out: Path, ck: Path, **options: str):
    stream = (spark.readStream.schema(V1_SCHEMA).option("maxFilesPerTrigger", 1)
              .json(str(source)).repartition(2))
    writer = (stream.writeStream.format("rotsink").option("checkpointLocation", str(ck))
              .option("partitionBy", "grp").option("partition.commitDelay", "1h")
              .trigger(availableNow=True))
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start(str(out))
    query.awaitTermination()
    return query


def state_line(out: Path, name: str, line: int = 1) -> dict:
    return json.loads((out / "_spark_metadata" / name).read_text().splitlines()[line])


@pytest.fixture
def upgraded_v1() -> Iterator[tuple[Path, Path, Path]]:
    """The full-state release's output and checkpoint back at :data:`V1_ROOT`."""
    with open(f"{V1_ROOT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            shutil.rmtree(V1_ROOT, ignore_errors=True)
            V1_ROOT.mkdir(parents=True)
            shutil.copytree(V1_FIXTURE / "out", V1_ROOT / "out")
            shutil.copytree(V1_FIXTURE / "ck", V1_ROOT / "ck")
            yield V1_ROOT / "out", V1_ROOT / "ck", V1_ROOT / "in"
        finally:
            shutil.rmtree(V1_ROOT, ignore_errors=True)


def test_a_path_whose_log_files_carried_the_whole_state_continues(spark, upgraded_v1):
    """The state of batch 2 is whole (version 1); batch 3's head names it, the files in
    progress then continue through heads of changes and a compaction's snapshot, and
    every reader sees every row once."""
    out, ck, source = upgraded_v1
    old_log = {p.name: p.read_bytes() for p in (out / "_spark_metadata").iterdir()}
    before = open_committed(LocalStorage(str(out)))
    assert before is not None and before[1] == V1_BATCHES - 1
    old_slots = {f.slot: f for f in before[2].in_progress}
    assert len(old_slots) == 6 and before[2].open_partitions

    # Files in progress keep appending (no time rule rolls them), across batch 9.compact.
    write_v1_input(source, range(V1_BATCHES, 12))
    forever = {"rotation.interval": "3650d", "rotation.inactivity": "3650d"}
    query = continue_v1_query(spark, source, out, ck, **forever)
    assert query.lastProgress["batchId"] == 11
    head = state_line(out, "3")["rotsink"]
    assert head["version"] == 2 and head["after"] == ""  # follows the whole state of batch 2
    assert state_line(out, "9.compact", 2)["rotsink_snapshot"]["in_progress"]
    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None and committed[1] == 11
    for slot, f in committed[2].slots().items():
        if slot in old_slots:  # the same file, grown
            assert f.temp == old_slots[slot].temp and f.size > old_slots[slot].size
    assert {d for d, _ in committed[2].open_partitions} == {"grp=g0", "grp=g1", "grp=g2"}
    everything = range(12 * V1_ROWS_PER_BATCH)
    assert sorted(tuple(r) for r in spark.read.format("rotsink").load(str(out))
                  .select("id", "name", "grp").collect()) == v1_rows(everything)
    for name, content in old_log.items():
        assert (out / "_spark_metadata" / name).read_bytes() == content
    assert_verified(out)

    # Default rotation: everything in progress is older than a minute and rolls.
    write_v1_input(source, range(12, 13))
    continue_v1_query(spark, source, out, ck)
    everything = range(13 * V1_ROWS_PER_BATCH)
    assert sorted(r.id for r in spark.read.json(str(out)).collect()) == list(everything)
    assert sorted(r.id for r in spark.read.format("rotsink").load(str(out)).collect()) == \
        list(everything)
    assert_verified(out)
