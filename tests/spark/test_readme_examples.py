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
    assert '.option("partitionBy", "day")' in code and 'processingTime="10 seconds"' in code
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
