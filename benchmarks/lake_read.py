"""Reading a lake: one day and everything, through Spark's reader, rotsink's reader (filters
pushed), the fast path (``pyspark_rotsink.read``) and the floor, on the same output.

    python benchmarks/lake_read.py                       # 6,000,000 rows, 365 days, parquet
    python benchmarks/lake_read.py --format jsonl --repeats 5

The lake is written by rotsink itself, partitioned by ``day`` into ``--days`` directories:
``--rows`` rows finalized (``rotation.maxBatches=1``), then ``--fresh`` more rows committed
in progress in every directory (the rows only rotsink's readers return). Each query is
``sum(x)``, over one day (``day = 'd-007'``) and over everything, run ``--repeats`` times
after a warm-up, sides in alternation, medians reported:

* ``spark``: ``spark.read.<format>(out)``, which honours ``_spark_metadata``: finalized rows
  (JSON lines with the schema given: inferring it reads every file at each query);
* ``rotsink``: ``spark.read.format("rotsink")`` with ``spark.sql.python.filterPushdown
  .enabled=true``, so the day's filter prunes directories (planned files printed);
* ``rotsink, no pushdown``: the same with the conf at Spark's default (false): every file;
* ``fast path``: ``pyspark_rotsink.read(spark, out)``: Spark's reader for the finalized
  files, rotsink's for the rows in progress;
* ``floor``: a Python data source that only hands pyarrow's decoding of the finalized files
  (of the day's directory, for one day) to Spark: what any Python reader costs;
* ``spark + empty source``: Spark's reader in a union with a Python data source that reads
  nothing: the least a read of Spark's files plus any Python source's rows costs (the fast
  path's floor).

Each line: wall time, rows/s and MB/s (rows and bytes the side reads), CPU of the JVM and the
Python workers, peak resident memory; then the ratios of throughput against Spark's reader
and against the floor (higher is better), and the row counts (the fast path must return
Spark's rows plus the committed in-progress rows).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import floors
from common import (
    cpu_seconds,
    cpu_used,
    format_memory,
    peak_memory_mb,
    quiet_session,
    reset_peak_memory,
)

DAY = "d-007"
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
JSON_SCHEMA = "id LONG, x LONG, name STRING, day STRING"
SIDES = ("spark", "rotsink", "rotsink, no pushdown", "fast path", "floor",
         "spark + empty source")


def write_lake(spark, root: Path, fmt: str, rows: int, days: int, fresh: int) -> Path:
    """The lake: ``rows`` finalized rows, then ``fresh`` rows left in progress."""
    from pyspark.sql import functions as F

    def source(path: Path, start: int, count: int) -> None:
        (spark.range(start, start + count, numPartitions=2)
         .withColumn("x", F.col("id") % 1000)
         .withColumn("name", F.concat(F.lit("row-"), F.col("id").cast("string")))
         .withColumn("day", F.format_string("d-%03d", (F.col("id") % days).cast("int")))
         .write.mode("append").parquet(str(path)))

    src, out = root / "src", root / "out"
    source(src, 0, rows)
    schema = spark.read.parquet(str(src)).schema
    for rotation in ({"rotation.maxBatches": "1"},
                     {"rotation.interval": "1h", "rotation.inactivity": "1h"}):
        (spark.readStream.schema(schema).parquet(str(src)).writeStream.format("rotsink")
         .option("format", fmt).option("partitionBy", "day").options(**rotation)
         .option("checkpointLocation", str(root / "ck")).trigger(availableNow=True)
         .start(str(out)).awaitTermination())
        if rotation.get("rotation.maxBatches"):
            source(src, rows, fresh)  # the second run's input: rows that stay in progress
    return out


def frame(spark, out: Path, fmt: str, side: str, one_day: bool):
    """The DataFrame of ``side``'s query (before its aggregate)."""
    import pyspark_rotsink

    spark.conf.set(PUSHDOWN, "false" if side == "rotsink, no pushdown" else "true")
    if side == "spark":
        # JSON without a schema would be inferred from every file at each read
        df = (spark.read.schema(JSON_SCHEMA).json(str(out)) if fmt == "jsonl"
              else spark.read.format(fmt).load(str(out)))
    elif side == "fast path":
        df = pyspark_rotsink.read(spark, str(out))
    elif side == "floor":
        schema = "id LONG, x LONG, name STRING"
        path = out / f"day={DAY}" if one_day else out
        return spark.read.format("floor").schema(schema).option("format", fmt).load(str(path))
    elif side == "spark + empty source":
        # the fast path's own floor: Spark's reader beside a Python source with nothing to read
        empty = (spark.read.format("floor").schema(JSON_SCHEMA).option("format", fmt)
                 .load(str(out / "_nothing")))
        df = frame(spark, out, fmt, "spark", False).unionByName(empty)
    else:
        df = spark.read.format("rotsink").load(str(out))
    return df.where(f"day = '{DAY}'") if one_day else df


def query(spark, out: Path, fmt: str, side: str, one_day: bool) -> dict:
    """One ``sum(x)``: its wall time, CPU seconds, peak memory and rows summed."""
    from pyspark.sql import functions as F

    reset_peak_memory(spark)
    cpu_before = cpu_seconds(spark)
    started = time.perf_counter()
    rows, _ = frame(spark, out, fmt, side, one_day).agg(F.count("x"), F.sum("x")).collect()[0]
    wall = time.perf_counter() - started
    return {"wall": wall, **cpu_used(cpu_before, cpu_seconds(spark)),
            "memory": peak_memory_mb(spark), "rows": rows}


def planned_files(out: Path, one_day: bool) -> tuple[int, int]:
    """(files rotsink's reader plans for the query, files of the whole output)."""
    from pyspark.sql.datasource import EqualTo
    from pyspark.sql.types import StructType

    from datasource.reading.reader import PruningRotSinkReader, committed_schema

    options = {"path": str(out)}
    schema: StructType = committed_schema(options)
    reader = PruningRotSinkReader(options, schema)
    total = len(reader.files)
    if one_day:
        reader.pushFilters([EqualTo(("day",), DAY)])
    return len(reader.planned_files()), total


def data_bytes(out: Path, one_day: bool) -> int:
    """Bytes of the files a query reads: finalized and in progress, of one day or all."""
    from commit_protocol.log import open_committed
    from commit_protocol.reading import committed_files
    from commit_protocol.storage import LocalStorage

    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None
    files = committed_files(*committed)
    return sum(f.length for f in files if not one_day or f.directory == f"day={DAY}")


def show(side: str, runs: list[dict], data: int) -> float:
    t = statistics.median(r["wall"] for r in runs)
    rows = runs[0]["rows"]
    jvm = statistics.median(r["jvm"] for r in runs)
    workers = statistics.median(r["workers"] for r in runs)
    peak = {k: max(r["memory"][k] for r in runs) for k in ("jvm", "workers")}
    print(f"  {side:>21}: {t:6.3f} s {rows / t:>13,.0f} rows/s {data / 1e6 / t:8.1f} MB/s  "
          f"CPU JVM {jvm:.2f} s, workers {workers:.2f} s; {format_memory(peak)}; "
          f"{rows:,} rows", flush=True)
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=6_000_000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--fresh", type=int, default=200_000,
                        help="rows committed in progress after the finalized ones")
    parser.add_argument("--format", default="parquet", choices=("parquet", "jsonl", "orc"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rotsink-lake-"))
    spark = quiet_session("rotsink-lake-read", {"spark.driver.memory": "4g"})
    floors.register(spark)
    started = time.perf_counter()
    out = write_lake(spark, root, args.format, args.rows, args.days, args.fresh)
    print(f"lake: {args.format}, {args.rows:,} finalized rows + {args.fresh:,} in progress, "
          f"{args.days} days, written in {time.perf_counter() - started:.1f} s", flush=True)
    for one_day in (True, False):
        label = f"day = '{DAY}'" if one_day else "everything"
        planned, total = planned_files(out, one_day)
        print(f"{label}: rotsink plans {planned} of {total} files (the pushed filter "
              f"{'prunes the other directories' if one_day else 'is absent'})")
        runs: dict[str, list[dict]] = {side: [] for side in SIDES}
        for side in SIDES:
            query(spark, out, args.format, side, one_day)  # warm-up
        for _ in range(args.repeats):
            for side in SIDES:
                runs[side].append(query(spark, out, args.format, side, one_day))
        data = data_bytes(out, one_day)
        times = {side: show(side, runs[side], data) for side in SIDES}
        rows = {side: runs[side][0]["rows"] for side in SIDES}
        print(f"  throughput against Spark's reader: rotsink "
              f"{times['spark'] / times['rotsink']:.2f}x (no pushdown "
              f"{times['spark'] / times['rotsink, no pushdown']:.2f}x), fast path "
              f"{times['spark'] / times['fast path']:.2f}x, floor "
              f"{times['spark'] / times['floor']:.2f}x; against the floor: rotsink "
              f"{times['floor'] / times['rotsink']:.2f}x, fast path "
              f"{times['floor'] / times['fast path']:.2f}x, against Spark + an empty source: "
              f"fast path {times['spark + empty source'] / times['fast path']:.2f}x "
              f"(medians of {args.repeats})")
        fresh = rows["rotsink"] - rows["spark"]
        print(f"  rows: fast path {rows['fast path']:,} = Spark's {rows['spark']:,} + "
              f"{fresh:,} committed in progress: "
              f"{'yes' if rows['fast path'] == rows['rotsink'] else 'NO'}", flush=True)
    spark.conf.set(PUSHDOWN, "false")
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
