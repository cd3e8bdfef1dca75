"""End to end: numbered rows streamed through rotsink and read back by both readers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from commit_protocol.log import open_committed
from commit_protocol.storage import LocalStorage
from tests.support.streams import rotsink_ids, run_to_completion, write_numbered_source

READERS = {
    "jsonl": lambda spark, out: spark.read.json(out),
    # Spark's CSV defaults (escape is a backslash): rotsink writes what Spark's own CSV sink writes
    "csv": lambda spark, out: spark.read.option("header", True).option("multiLine", True)
    .csv(out),
    "parquet": lambda spark, out: spark.read.parquet(out),
    "orc": lambda spark, out: spark.read.orc(out),
    "avro": lambda spark, out: spark.read.format("avro").load(out),  # spark-avro
}


def log_files(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "_spark_metadata").iterdir() if not p.name.startswith("."))


def finalized(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("part-*") if "_rotsink" not in p.parts)


def spark_ids(spark, fmt: str, out: Path) -> list[int]:
    if fmt == "text":
        rows = spark.read.text(str(out)).collect()
        return sorted(json.loads(r.value)["id"] for r in rows)
    return sorted(int(r.id) for r in READERS[fmt](spark, str(out)).select("id").collect())


def to_text(df):
    from pyspark.sql import functions as F

    return df.select(F.to_json(F.struct(*df.columns)).alias("value"))


def text_ids(spark, out: Path, **options: str) -> list[int]:
    reader = spark.read.format("rotsink")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(json.loads(r.value)["id"] for r in reader.load(str(out)).collect())


@pytest.mark.compat
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "text", "avro", "parquet", "orc"])
def test_every_row_exactly_once_in_both_readers(spark, tmp_path, fmt):
    total = write_numbered_source(tmp_path / "in", files=4, rows_per_file=50)
    out = tmp_path / "out"
    transform = to_text if fmt == "text" else None
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", format=fmt,
                      transform=transform, **{"rotation.maxRecords": "70"})
    ids = text_ids(spark, out) if fmt == "text" else rotsink_ids(spark, out)
    assert ids == list(range(total))
    finished = (text_ids(spark, out, includeInProgress="false") if fmt == "text"
                else rotsink_ids(spark, out, includeInProgress="false"))
    # Spark's reader sees exactly the finalized files: the log, not the directory listing.
    assert spark_ids(spark, fmt, out) == finished
    assert len(finished) == len(set(finished)) > 0
    if fmt != "text":  # and the same values: quotes, backslashes and non-ASCII included
        names = sorted((int(r.id), r.name) for r in READERS[fmt](spark, str(out)).collect())
        assert names == [(i, f'row "{i}", ü\\') for i in finished]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "avro", "parquet", "orc"])
def test_max_batches_one_behaves_like_spark_file_sink(spark, tmp_path, fmt):
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=20)
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", format=fmt,
                      **{"rotation.maxBatches": "1"})
    assert rotsink_ids(spark, out, includeInProgress="false") == list(range(total))
    assert spark_ids(spark, fmt, out) == list(range(total))


@pytest.mark.parametrize("fmt", ["jsonl", "avro", "parquet", "orc"])
def test_files_span_micro_batches_and_roll_by_batch_count(spark, tmp_path, shown, fmt):
    batches = 12  # a micro-batch an input file: each slot's file spans 6 and rolls
    write_numbered_source(tmp_path / "in", files=batches, rows_per_file=4)
    out = tmp_path / "out"
    query = run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", format=fmt,
                              **{"rotation.maxBatches": "6"})
    assert query.lastProgress["batchId"] == batches - 1
    per_slot = Counter(p.name.split("-")[1] for p in finalized(out))
    shown(f"\n{fmt}: {batches} micro-batches: rotsink finalized {len(finalized(out))} "
          f"files ({dict(per_slot)} per slot); Spark's file sink would write >= {batches}")
    assert per_slot and max(per_slot.values()) <= 2
    assert rotsink_ids(spark, out) == list(range(batches * 4))
    finished = rotsink_ids(spark, out, includeInProgress="false")
    assert spark_ids(spark, fmt, out) == finished and len(finished) == len(set(finished))


def test_parquet_path_written_finished_per_batch_continues_spanning_batches(spark, tmp_path):
    """A path whose Parquet files were all finished per batch (the layout of releases that
    encoded Parquet at the end of every task: no in-progress file) continues with staged
    files after the upgrade, nothing lost or read twice."""
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=10)
    out, ck = tmp_path / "out", tmp_path / "ck"
    run_to_completion(spark, tmp_path / "in", out, ck, format="parquet",
                      **{"rotation.maxBatches": "1"})
    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None and committed[2].in_progress == ()  # every file finished
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=10, start_file=3)
    run_to_completion(spark, tmp_path / "in", out, ck, format="parquet")
    assert rotsink_ids(spark, out) == list(range(60))
    assert spark_ids(spark, "parquet", out) == list(range(30))  # the rest is staged


def test_compaction_keeps_readers_exact_and_deletes_old_log_files(spark, tmp_path):
    batches = 32
    write_numbered_source(tmp_path / "in", files=batches, rows_per_file=3)
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck",
                      **{"rotation.maxBatches": "3", "log.compactInterval": "10",
                         "log.cleanupDelay": "0s"})
    names = log_files(out)
    assert "29.compact" in names and "19.compact" in names
    assert "9.compact" not in names and "5" not in names  # deleted after the (zero) delay
    # A reader that listed the log just before 29.compact appeared still needs 19.compact and
    # the deltas after it; everything older is gone.
    assert [n for n in names if n.isdigit()] == [str(b) for b in [*range(20, 29), 30, 31]]
    assert rotsink_ids(spark, out) == list(range(batches * 3))
    assert spark_ids(spark, "jsonl", out) == rotsink_ids(spark, out, includeInProgress="false")


def test_partitioned_output_uses_hive_dirs_spark_discovers(spark, tmp_path):
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=30)
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", partitionBy="grp",
                      **{"rotation.maxBatches": "1"})
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("grp=")) == \
        ["grp=g0", "grp=g1", "grp=g2"]
    rows = spark.read.format("rotsink").load(str(out)).collect()
    assert sorted(r.id for r in rows) == list(range(total))
    assert all(r.grp == f"g{r.id % 3}" for r in rows)
    spark_rows = spark.read.json(str(out)).collect()
    assert sorted((r.id, r.grp) for r in spark_rows) == sorted((r.id, r.grp) for r in rows)


@pytest.mark.compat
def test_restart_continues_the_same_in_progress_files(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=10)
    out, ck = tmp_path / "out", tmp_path / "ck"
    run_to_completion(spark, tmp_path / "in", out, ck)
    first = {p.name for p in (out / "_rotsink" / "inprogress").iterdir()}
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=10, start_file=3)
    run_to_completion(spark, tmp_path / "in", out, ck)
    assert {p.name for p in (out / "_rotsink" / "inprogress").iterdir()} == first
    assert rotsink_ids(spark, out) == list(range(50))
    assert finalized(out) == []  # nothing rolled: 60s age and inactivity not reached
