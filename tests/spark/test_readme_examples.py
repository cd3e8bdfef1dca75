"""The README's smallest query, run as written at a small size: its paths under a temporary
directory, an ``availableNow`` trigger instead of a 10-second one and files finished every
micro-batch, over a stream with a ``day`` column (the README's demo and pipeline have tests
of their own)."""

from __future__ import annotations

import re
from pathlib import Path

from pyspark.sql import functions as F

from tests.support.streams import SCHEMA, write_numbered_source

README = Path(__file__).resolve().parents[2] / "README.md"


def smallest_query() -> str:
    section = README.read_text().split("## The smallest query", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_smallest_query_runs_as_written(spark, tmp_path):
    code = smallest_query()
    assert '.partitionBy("day")' in code and '.queryName("events")' in code
    assert 'processingTime="10 seconds"' in code
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=20)
    df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
          .json(str(tmp_path / "in")).withColumn("day", F.lit("2026-11-25")))
    runnable = (code.replace("/data/ck", str(tmp_path / "ck"))
                .replace("/data/out", str(tmp_path / "out"))
                .replace('processingTime="10 seconds"', "availableNow=True")
                # a run of seconds finishes no file by age: finish them per batch, so that
                # the example's Spark reader has finalized files to read
                .replace('.option("rotation.maxBytes", "128mb")',
                         '.option("rotation.maxBytes", "128mb")'
                         '.option("rotation.maxBatches", "1")'))
    # the query, then the reads once it has committed
    end = runnable.index("\n", runnable.index(".start("))
    write, read = runnable[:end], runnable[end:]
    namespace = {"df": df, "spark": spark}
    exec(compile(write, str(README), "exec"), namespace)  # noqa: S102
    for query in spark.streams.active:
        query.awaitTermination()
    exec(compile(read, str(README), "exec"), namespace)  # noqa: S102
    out = str(tmp_path / "out")
    ids = sorted(r.id for r in spark.read.format("rotsink").load(out).select("id").collect())
    assert ids == list(range(total))
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith("day=")] == \
        ["day=2026-11-25"]


def backfill_example() -> str:
    section = README.read_text().split("## Backfills", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_backfill_runs_as_written_and_finishes_every_file(spark, tmp_path):
    """The README's backfill, its paths under a temporary directory and its input Parquet
    files of the tests' rows: every row reaches Spark's own reader of the output (so every
    file finished), once, in the partition directories the option ``partitionBy`` asked for."""
    import pyspark_rotsink

    code = backfill_example()
    assert "pyspark_rotsink.backfill(" in code and "\"partitionBy\": \"day\"" in code
    total = write_numbered_source(tmp_path / "json", files=3, rows_per_file=20)
    (spark.read.schema(SCHEMA).json(str(tmp_path / "json"))
     .withColumn("day", F.concat(F.lit("2026-10-0"), (F.col("id") % 3 + 1).cast("string")))
     .write.parquet(str(tmp_path / "raw")))
    runnable = (code.replace("s3a://lake/raw/2026-10", str(tmp_path / "raw"))
                .replace("s3a://lake/_checkpoints/events-backfill-2026-10", str(tmp_path / "ck"))
                .replace("s3://lake/events-backfill-2026-10", str(tmp_path / "out")))
    schema = spark.read.parquet(str(tmp_path / "raw")).schema
    namespace = {"spark": spark, "events_schema": schema, "pyspark_rotsink": pyspark_rotsink}
    exec(compile(runnable, str(README), "exec"), namespace)  # noqa: S102
    rows = spark.read.parquet(str(tmp_path / "out")).select("id", "day").collect()
    assert sorted(r.id for r in rows) == list(range(total))
    assert sorted(p.name for p in (tmp_path / "out").glob("day=*")) == \
        ["day=2026-10-01", "day=2026-10-02", "day=2026-10-03"]
