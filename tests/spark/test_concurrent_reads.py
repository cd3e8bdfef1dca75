"""Readers beside a running query: files roll every other batch, the log compacts every few
batches and old log files are deleted at once, while four readers read in a loop: rotsink's,
Spark's, rotsink's with a partition filter pushed (pruned directories), and the fast path
(``pyspark_rotsink.read``: Spark's reader for finalized files, rotsink's for the rest).

Every read must succeed and see one committed state: no duplicate id, and each read's ids a
superset of the previous read's (a committed row never disappears).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

# reads per reader: 10 in CI, more on demand (ROTSINK_CONCURRENT_READS=200)
READS = int(os.environ.get("ROTSINK_CONCURRENT_READS", "10"))
DEADLINE_S = 120


def running_query(spark, out: Path, checkpoint: Path, fmt: str):
    rate = (spark.readStream.format("rate").option("rowsPerSecond", 200)
            .option("numPartitions", 2).load())
    return (rate.selectExpr("value AS id", "CAST(timestamp AS STRING) AS at", "value % 3 AS g")
            .writeStream.format("rotsink").option("checkpointLocation", str(checkpoint))
            .option("format", fmt).option("partitionBy", "g")
            .option("rotation.maxBatches", "2").option("log.compactInterval", "3")
            .option("log.cleanupDelay", "0s").trigger(processingTime="200 milliseconds")
            .start(str(out)))


def wait_for_batches(query, at_least: int) -> None:
    """Poll (with a deadline) until the query has committed ``at_least`` batches."""
    deadline = time.monotonic() + DEADLINE_S
    while (query.lastProgress or {}).get("batchId", -1) < at_least - 1:
        assert query.isActive, query.exception()
        assert time.monotonic() < deadline, f"no batch {at_least - 1} after {DEADLINE_S}s"
        time.sleep(0.1)


@pytest.fixture(params=["jsonl", "parquet"])
def writing(request, spark, tmp_path):
    """An output path with a query writing to it in the format of the parameter; stopped
    after the test."""
    out = tmp_path / "out"
    query = running_query(spark, out, tmp_path / "ck", request.param)
    wait_for_batches(query, 4)  # the rate source's first batch is empty; files roll at the 3rd
    yield out, query, request.param
    query.stop()


def test_reads_beside_rolls_compactions_and_clean_ups_never_fail(spark, writing, pushdown,
                                                                 shown):
    import pyspark_rotsink

    out, query, fmt = writing
    spark_reader = spark.read.json if fmt == "jsonl" else spark.read.parquet
    readers = {"rotsink": lambda: spark.read.format("rotsink").load(str(out)),
               "spark": lambda: spark_reader(str(out)),
               "pruned": lambda: (spark.read.format("rotsink").load(str(out))
                                  .where("g IN (0, 2)")),
               "fast path": lambda: pyspark_rotsink.read(spark, str(out))}
    seen: dict[str, set[int]] = {name: set() for name in readers}
    first_batch = query.lastProgress["batchId"]
    for _ in range(READS):
        for name, read in readers.items():
            ids = [row.id for row in read().select("id").collect()]
            assert len(ids) == len(set(ids)), f"{name}: a row read twice"
            assert seen[name] <= set(ids), f"{name}: committed rows disappeared"
            seen[name] = set(ids)
    batches = query.lastProgress["batchId"] - first_batch
    log = {p.name for p in (out / "_spark_metadata").iterdir()
           if not p.name.startswith(".")}  # a log file being written: hidden until linked
    shown(f"\n{fmt}: {READS} reads per reader beside {batches} commits: 0 failed; last "
          f"read {len(seen['rotsink'])} rows (rotsink), {len(seen['fast path'])} (fast "
          f"path), {len(seen['pruned'])} (pruned), {len(seen['spark'])} finalized rows "
          f"(Spark); log now {sorted(log, key=lambda n: int(n.split('.')[0]))}")
    # The reads overlapped with the protocol's moves: rolls, compactions and clean-ups.
    assert batches >= 6 and any(n.endswith(".compact") for n in log) and "0" not in log
    # Spark's last read came after rotsink's: finalized rows are among the committed ones
    # that a later read returns
    later = {row.id for row in readers["rotsink"]().select("id").collect()}
    assert seen["spark"] <= later
    assert seen["spark"], "no file rolled while reading"
    assert seen["pruned"] and all(i % 3 != 1 for i in seen["pruned"])
