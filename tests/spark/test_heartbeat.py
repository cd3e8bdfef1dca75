"""``with_heartbeat``: files finish on time while the input is idle, and an availableNow run
without new input makes one idle micro-batch that ``rotation.rollOnIdle`` uses to finish
every file."""

from __future__ import annotations

import time

import pytest

from commit_protocol.vocabulary.errors import OptionError
from pyspark_rotsink import with_heartbeat
from tests.support.streams import SCHEMA, rotsink_ids, write_numbered_source


def committed_any(out) -> bool:
    return any(p.name[0].isdigit() for p in (out / "_spark_metadata").glob("*"))


def spark_ids(spark, out) -> list[int]:
    """Spark's own reader: the finalized rows only."""
    if not committed_any(out):
        return []
    return sorted(r.id for r in spark.read.schema(SCHEMA).json(str(out)).collect())


def start_query(spark, tmp_path, *, heartbeat: bool):
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    if heartbeat:
        beating = with_heartbeat(df, "1 second")
        assert beating.schema == df.schema
        df = beating
    return (df.writeStream.format("rotsink").option("checkpointLocation", str(tmp_path / "ck"))
            .option("rotation.inactivity", "2s").option("rotation.interval", "0")
            .trigger(processingTime="500 milliseconds").start(str(tmp_path / "out")))


def poll(condition, seconds: float) -> bool:
    """Whether ``condition()`` held within ``seconds`` (a timing behaviour, polled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


def finalized_files(out):
    from commit_protocol.log import open_committed
    from commit_protocol.storage import LocalStorage

    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None
    log, latest, _ = committed
    return log.finalized_entries(latest)


@pytest.mark.compat
def test_idle_input_still_finishes_files_within_inactivity_and_restarts_exactly(spark,
                                                                              tmp_path):
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=10)
    out = tmp_path / "out"
    query = start_query(spark, tmp_path, heartbeat=True)
    try:
        visible = poll(lambda: spark_ids(spark, out) == list(range(total)), 90)
        progress = query.lastProgress
    finally:
        query.stop()
    # the input (3 batches) stopped long ago; only idle batches could have rolled the files
    assert visible, f"Spark's reader saw {len(spark_ids(spark, out))} of {total} rows"
    assert progress is not None
    assert progress.batchId >= 3 and progress.numInputRows == 0
    assert rotsink_ids(spark, out) == list(range(total))
    # idle batches added no row, no empty file, no duplicate
    assert all(entry["size"] > 0 for entry in finalized_files(out))
    # a restart of the query with its heartbeat continues exactly
    total += write_numbered_source(tmp_path / "in", files=2, rows_per_file=10, start_file=3)
    query = start_query(spark, tmp_path, heartbeat=True)
    try:
        visible = poll(lambda: spark_ids(spark, out) == list(range(total)), 90)
    finally:
        query.stop()
    assert visible and rotsink_ids(spark, out) == list(range(total))
    assert all(entry["size"] > 0 for entry in finalized_files(out))


def test_without_a_heartbeat_idle_rows_stay_in_progress(spark, tmp_path):
    """Spark's fact the heartbeat answers (pinned): no input, no micro-batch, no roll."""
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=10)
    out = tmp_path / "out"
    query = start_query(spark, tmp_path, heartbeat=False)
    try:
        assert poll(lambda: committed_any(out) and rotsink_ids(spark, out) == list(range(total)),
                    90)
        committed = query.lastProgress.batchId if query.lastProgress else None
        # three times rotation.inactivity: with a heartbeat, every file would have rolled
        assert not poll(lambda: spark_ids(spark, out) == list(range(total)), 6)
        assert (query.lastProgress.batchId if query.lastProgress else None) == committed
    finally:
        query.stop()
    assert len(spark_ids(spark, out)) < total


@pytest.mark.parametrize("fmt", ["jsonl", pytest.param("parquet", marks=pytest.mark.compat)])
def test_available_now_run_without_input_finishes_every_file(spark, tmp_path, fmt):
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=10)
    out, ck = tmp_path / "out", tmp_path / "ck"

    def run() -> int:
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
            str(tmp_path / "in"))
        query = (with_heartbeat(df, "1 second").writeStream.format("rotsink")
                 .option("format", fmt).option("partitionBy", "grp")
                 .option("rotation.rollOnIdle", "true")
                 .option("checkpointLocation", str(ck)).trigger(availableNow=True)
                 .start(str(out)))
        query.awaitTermination()
        assert query.lastProgress is not None
        return query.lastProgress.batchId

    read = (lambda: sorted(r.id for r in spark.read.schema(SCHEMA).parquet(str(out)).collect())
            ) if fmt == "parquet" else (lambda: spark_ids(spark, out))
    last = run()
    assert rotsink_ids(spark, out) == list(range(total))
    assert len(read()) < total  # the default rotation keeps the last files in progress
    assert run() == last + 1  # exactly one idle micro-batch
    assert read() == list(range(total))
    assert rotsink_ids(spark, out, includeInProgress="false") == list(range(total))


def test_bad_heartbeats_are_refused(spark, tmp_path):
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    with pytest.raises(OptionError, match=r"option interval='soon': expected a duration"):
        with_heartbeat(stream, "soon")
    with pytest.raises(OptionError, match=r"a heartbeat needs an interval > 0"):
        with_heartbeat(stream, "0")
    with pytest.raises(OptionError, match=r"takes a streaming DataFrame"):
        with_heartbeat(spark.range(1), "1s")


def test_partitions_get_their_success_marker_once_quiet(spark, tmp_path):
    """With a heartbeat, each partition directory gets _SUCCESS after partition.commitDelay
    without new rows; Spark's readers ignore the markers."""
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=9)
    out = tmp_path / "out"
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    query = (with_heartbeat(df, "1 second").writeStream.format("rotsink")
             .option("checkpointLocation", str(tmp_path / "ck")).option("partitionBy", "grp")
             .option("rotation.maxBatches", "1").option("partition.commitDelay", "2s")
             .trigger(processingTime="500 milliseconds").start(str(out)))
    try:
        deadline = time.monotonic() + 90
        markers: list[str] = []
        while time.monotonic() < deadline and len(markers) < 3:
            time.sleep(0.5)  # polling a timing behaviour, with a deadline
            markers = sorted(p.parent.name for p in out.glob("*/_SUCCESS"))
    finally:
        query.stop()
    assert markers == ["grp=g0", "grp=g1", "grp=g2"]
    assert spark_ids(spark, out) == list(range(total))
    from datasource.commands.inspect import partitions, verify

    assert partitions(str(out)).complete == markers
    assert verify(str(out)).problems == []
