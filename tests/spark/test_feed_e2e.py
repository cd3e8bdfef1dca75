"""``spark.readStream.format("rotsink")``: a downstream query follows an upstream rotsink path
and gets every committed row exactly once, across rolls, compactions, restarts of either
query, compression, encryption, partitioning and every format."""

from __future__ import annotations

import base64
import os
import time

import pytest

from tests.support.streams import SCHEMA, rotsink_ids, run_to_completion, write_numbered_source

UPSTREAM = {"rotation.maxRecords": "25", "rotation.maxBatches": "3",
            "log.compactInterval": "3", "partitionBy": "grp"}
CASES = {
    "jsonl": {},
    "csv": {"format": "csv"},
    "parquet": {"format": "parquet"},
    "orc": {"format": "orc"},
    "jsonl-zstd-encrypted": {"compression": "zstd", "encrypted": "yes"},
}


def follow(spark, upstream, out, ck, **read_options: str):
    """Run the downstream query (feed -> a second rotsink path) until it has caught up."""
    reader = spark.readStream.format("rotsink")
    for key, value in read_options.items():
        reader = reader.option(key, value)
    query = (reader.load(str(upstream)).writeStream.format("rotsink")
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start(str(out)))
    query.awaitTermination()
    return query


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.compat)
                                  if case == "parquet" else case
                                  for case in sorted(CASES)])
def test_a_downstream_query_gets_every_row_once_across_runs(spark, tmp_path, case):
    options = {**UPSTREAM, **CASES[case]}
    keys = {}
    if options.pop("encrypted", None):
        (tmp_path / "key").write_text(base64.b64encode(os.urandom(32)).decode())
        keys = {"encryption.key": f"file:{tmp_path / 'key'}"}
    up, down = tmp_path / "up", tmp_path / "down"
    total = write_numbered_source(tmp_path / "in", files=4, rows_per_file=20)
    run_to_completion(spark, tmp_path / "in", up, tmp_path / "ck_up", **options, **keys)
    follow(spark, up, down, tmp_path / "ck_down", **keys)
    assert rotsink_ids(spark, down) == list(range(total))
    # more upstream batches (rolling the files the feed read in progress), then the feed again
    total += write_numbered_source(tmp_path / "in", files=3, rows_per_file=20, start_file=4)
    run_to_completion(spark, tmp_path / "in", up, tmp_path / "ck_up", **options, **keys)
    follow(spark, up, down, tmp_path / "ck_down", **keys)
    assert rotsink_ids(spark, down) == list(range(total))
    rows = spark.read.format("rotsink").load(str(down)).collect()
    assert all(r.name == f'row "{r.id}", ü\\' and r.grp == f"g{r.id % 3}" for r in rows)


def test_a_feed_beside_a_writing_query_is_exact(spark, tmp_path):
    """Both queries run at once: the upstream rolls every 2 batches and compacts every 3rd."""
    total = write_numbered_source(tmp_path / "in", files=30, rows_per_file=10)
    up, down = tmp_path / "up", tmp_path / "down"
    upstream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                .json(str(tmp_path / "in")).writeStream.format("rotsink")
                .option("checkpointLocation", str(tmp_path / "ck_up"))
                .option("rotation.maxBatches", "2").option("log.compactInterval", "3")
                .trigger(processingTime="200 milliseconds").start(str(up)))
    try:
        deadline = time.monotonic() + 60
        while not (up / "_spark_metadata" / "0").exists() and time.monotonic() < deadline:
            time.sleep(0.2)  # the feed needs a committed schema to start
        downstream = (spark.readStream.format("rotsink").load(str(up)).writeStream
                      .format("rotsink").option("checkpointLocation", str(tmp_path / "ck_down"))
                      .trigger(processingTime="200 milliseconds").start(str(down)))
        try:
            upstream.processAllAvailable()
        finally:
            upstream.stop()
            downstream.stop()
    finally:
        upstream.stop()
    follow(spark, up, down, tmp_path / "ck_down")  # catch up from its checkpoint
    assert rotsink_ids(spark, down) == list(range(total))


@pytest.mark.parametrize("starting, expected", [("latest", range(20, 60)),
                                                ("1", range(10, 60)),
                                                ("earliest", range(60))])
def test_starting_batch(spark, tmp_path, starting, expected):
    """Upstream batches 0 and 1 hold rows 0-9 and 10-19 when the feed starts."""
    up, down = tmp_path / "up", tmp_path / "down"
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
    run_to_completion(spark, tmp_path / "in", up, tmp_path / "ck_up")
    feed = spark.readStream.format("rotsink").option("startingBatch", starting).load(str(up))
    query = (feed.writeStream.format("rotsink").option("checkpointLocation",
                                                       str(tmp_path / "ck_down"))
             .trigger(availableNow=True).start(str(down)))
    query.awaitTermination()  # fixes the start position at this run
    write_numbered_source(tmp_path / "in", files=4, rows_per_file=10, start_file=2)
    run_to_completion(spark, tmp_path / "in", up, tmp_path / "ck_up")
    follow(spark, up, down, tmp_path / "ck_down")
    assert rotsink_ids(spark, down) == list(expected)


@pytest.mark.parametrize("limit", [{"maxBatchesPerTrigger": "1"},
                                   {"maxFilesPerTrigger": "1"}, {"maxBytesPerTrigger": "1"}])
def test_admission_limit_and_retention(spark, tmp_path, limit):
    """Each limit takes one upstream batch per downstream micro-batch here (one file each;
    a limit below one batch still takes one, so the feed never stalls). Upstream
    log.retention drops old entries from the listing (Spark's readers no longer see those
    files); the feed reads each batch's own state, so it still delivers every row."""
    up, down = tmp_path / "up", tmp_path / "down"
    total = write_numbered_source(tmp_path / "in", files=6, rows_per_file=10)
    run_to_completion(spark, tmp_path / "in", up, tmp_path / "ck_up",
                      **{"rotation.maxBatches": "1", "log.compactInterval": "2",
                         "log.retention": "1ms"})
    assert len(spark.read.schema(SCHEMA).json(str(up)).collect()) < total  # retention at work
    query = follow(spark, up, down, tmp_path / "ck_down", **limit)
    assert query.lastProgress is not None and query.lastProgress.batchId == 5
    assert rotsink_ids(spark, down) == list(range(total))


@pytest.mark.parametrize("kept", [True, False], ids=["feed.retention", "none"])
def test_a_feed_that_starts_after_the_log_clean_up(spark, tmp_path, kept):
    """The feed starts after the upstream clean-up deleted its first batches' log files (as
    after a long pause). With ``feed.retention`` on the upstream sink it reads their states
    from the segments the clean-up kept: every row once. Without, it fails naming the
    setting, having delivered nothing."""
    up, down = tmp_path / "up", tmp_path / "down"
    total = write_numbered_source(tmp_path / "in", files=6, rows_per_file=10)
    options = {"rotation.maxBatches": "1", "log.compactInterval": "2", "log.cleanupDelay": "0s"}
    if kept:
        options["feed.retention"] = "7d"
    run_to_completion(spark, tmp_path / "in", up, tmp_path / "ck_up", **options)
    assert not (up / "_spark_metadata" / "0").exists()  # cleaned up
    if kept:
        follow(spark, up, down, tmp_path / "ck_down")
        assert rotsink_ids(spark, down) == list(range(total))
        return
    with pytest.raises(Exception, match="needs sink batch 0.*feed.retention"):
        follow(spark, up, down, tmp_path / "ck_down")
    assert not (down / "_spark_metadata").exists() or rotsink_ids(spark, down) == []
