"""Read throughput: ``spark.read.format("rotsink")`` against Spark's own reader, same files.

    python benchmarks/read_throughput.py --rows 2000000 --format parquet
    python benchmarks/read_throughput.py --rows 2000000 --format jsonl

One rotsink stream writes the output (every file finalized, so Spark's reader, which honours
``_spark_metadata``, sees all of it); then both readers scan it in full (``noop`` sink: the
cost of reading and decoding, nothing else), a warm-up each, then ``--repeats`` timed scans
in alternation. Prints rows/s and MB/s (bytes of the files read), CPU seconds of the JVM and
of the Python workers, peak memory, and the ratio of rotsink's throughput to Spark's (higher
is better; the target is >= 0.8x).

A third side, the *floor* (``benchmarks/floors.py``), is a Python data source reader that
only hands pyarrow's own decoding of the same files to Spark: what any Python reader costs
before it checks a log, a committed length or a key.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import floors
from common import cpu_seconds, cpu_used, format_memory, peak_memory_mb, quiet_session
from throughput import make_source


def write_output(spark, source: Path, out: Path, fmt: str) -> int:
    """The rotsink output read by both sides; returns the bytes of its data files."""
    schema = spark.read.parquet(str(source)).schema
    (spark.readStream.schema(schema).parquet(str(source)).writeStream.format("rotsink")
     .option("format", fmt).option("rotation.maxBatches", "1")
     .option("checkpointLocation", str(out) + "-ck").trigger(availableNow=True)
     .start(str(out)).awaitTermination())
    return sum(p.stat().st_size for p in out.rglob("part-*"))


def scan(spark, out: Path, fmt: str, side: str) -> tuple[float, dict[str, float]]:
    """One full read into the ``noop`` sink: its wall time and CPU seconds."""
    if side == "rotsink":
        df = spark.read.format("rotsink").load(str(out))
    elif side == "floor":
        schema = spark.read.format("rotsink").load(str(out)).schema
        df = spark.read.format("floor").schema(schema).option("format", fmt).load(str(out))
    else:
        schema = spark.read.format("rotsink").load(str(out)).schema
        df = (spark.read.parquet(str(out)) if fmt == "parquet"
              else spark.read.schema(schema).json(str(out)))
    cpu_before = cpu_seconds(spark)
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - started
    return wall, cpu_used(cpu_before, cpu_seconds(spark))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--format", default="parquet", choices=["parquet", "jsonl"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rotsink-read-bench-"))
    make_source(root / "src", args.rows, files=4)
    spark = quiet_session("rotsink-read-bench")
    floors.register(spark)
    data_bytes = write_output(spark, root / "src", root / "out", args.format)
    times: dict[str, list[float]] = {"spark": [], "floor": [], "rotsink": []}
    cpus: dict[str, list[dict[str, float]]] = {side: [] for side in times}
    for side in times:
        scan(spark, root / "out", args.format, side)  # warm-up
    for _ in range(args.repeats):
        for side in times:
            wall, cpu = scan(spark, root / "out", args.format, side)
            times[side].append(wall)
            cpus[side].append(cpu)
    mb = data_bytes / 1e6
    for side, runs in times.items():
        t = statistics.median(runs)
        jvm = statistics.median(c["jvm"] for c in cpus[side])
        workers = statistics.median(c["workers"] for c in cpus[side])
        print(f"{side:>8} read {args.format:>7}: {t:6.2f} s  {args.rows / t:>12,.0f} rows/s  "
              f"{mb / t:8.1f} MB/s (of {mb:,.1f} MB on disk)  CPU JVM {jvm:.2f} s, "
              f"Python workers {workers:.2f} s")
    ratio = statistics.median(times["spark"]) / statistics.median(times["rotsink"])
    floor = statistics.median(times["spark"]) / statistics.median(times["floor"])
    print(f"ratio rotsink/spark read throughput: {ratio:.2f}x (median of {args.repeats}); "
          f"floor/spark {floor:.2f}x: a Python reader that does nothing of its own")
    print(format_memory(peak_memory_mb(spark)) + " (both sides, one session)")
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
