"""Read throughput: ``spark.read.format("rotsink")`` against Spark's own reader, same files.

    python benchmarks/read_throughput.py --rows 2000000 --format parquet
    python benchmarks/read_throughput.py --rows 2000000 --format jsonl    # or --format orc
    python benchmarks/read_throughput.py --rows 2000000 --format parquet --staged

One rotsink stream writes the output (every file finalized, so Spark's reader, which honours
``_spark_metadata``, sees all of it); then both readers scan it in full (``noop`` sink: the
cost of reading and decoding, nothing else), a warm-up each, then ``--repeats`` timed scans
in alternation. Prints rows/s and MB/s (bytes of the files read), CPU seconds of the JVM and
of the Python workers, peak memory of each side's scans, and the ratio of rotsink's
throughput to Spark's (higher is better; the target is >= 0.8x).

A third side, the *floor* (``benchmarks/floors.py``), is a Python data source reader that
only hands pyarrow's own decoding of the same files to Spark: what any Python reader costs
before it checks a log, a committed length or a key.

``--staged`` (bulk formats: Parquet, ORC) adds a second rotsink output of the same rows whose
files never roll (``rotation.maxBytes`` 1 GB, interval and inactivity 1 h), so every row is
still staged (Arrow IPC) when it is read, and a fourth side: rotsink's reader over those
staged rows (``includeInProgress``, on by default), against rotsink's reader over the finished
files. The target: staged rows read at least as fast as finished ones (Spark's reader cannot
see staged rows: they are not in ``_spark_metadata``).
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
from throughput import BULK_FORMATS, make_source, output_bytes

READ_FORMATS = ("parquet", "jsonl", "orc")
STAGED = "rotsink staged"
# Rotation of the --staged output: nothing rolls while the benchmark runs.
NEVER_ROLL = {"rotation.maxBytes": "1g", "rotation.interval": "1h",
              "rotation.inactivity": "1h"}


def write_output(spark, source: Path, out: Path, fmt: str, rotation: dict[str, str]) -> int:
    """A rotsink output of every source row, written with ``rotation``; returns the bytes of
    its finished files, or of its in-progress ones when none finished."""
    schema = spark.read.parquet(str(source)).schema
    (spark.readStream.schema(schema).parquet(str(source)).writeStream.format("rotsink")
     .option("format", fmt).options(**rotation)
     .option("checkpointLocation", str(out) + "-ck").trigger(availableNow=True)
     .start(str(out)).awaitTermination())
    finished, in_progress = output_bytes(out)
    print(f"{out.name}: rotation {rotation}: {finished / 1e6:,.1f} MB of finished files, "
          f"{in_progress / 1e6:,.1f} MB in progress", flush=True)
    return finished or in_progress


def reader(spark, out: Path, fmt: str, side: str):
    """The DataFrame ``side`` scans."""
    if side in ("rotsink", STAGED):
        return spark.read.format("rotsink").option("includeInProgress", "true").load(str(out))
    schema = spark.read.format("rotsink").load(str(out)).schema
    if side == "floor":
        return spark.read.format("floor").schema(schema).option("format", fmt).load(str(out))
    if fmt == "jsonl":
        return spark.read.schema(schema).json(str(out))
    return spark.read.format(fmt).load(str(out))


def scan(spark, out: Path, fmt: str, side: str) -> dict:
    """One full read into the ``noop`` sink: its wall time, CPU seconds and peak memory."""
    df = reader(spark, out, fmt, side)
    reset_peak_memory(spark)
    cpu_before = cpu_seconds(spark)
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - started
    return {"wall": wall, **cpu_used(cpu_before, cpu_seconds(spark)),
            "memory": peak_memory_mb(spark)}


def show(side: str, runs: list[dict], rows: int, data_bytes: int, fmt: str) -> float:
    """Print one side's medians; return its median wall time."""
    t = statistics.median(r["wall"] for r in runs)
    jvm = statistics.median(r["jvm"] for r in runs)
    workers = statistics.median(r["workers"] for r in runs)
    mb = data_bytes / 1e6
    peak = {k: max(r["memory"][k] for r in runs) for k in ("jvm", "workers")}
    print(f"{side:>14} read {fmt:>7}: {t:6.2f} s  {rows / t:>12,.0f} rows/s  "
          f"{mb / t:8.1f} MB/s (of {mb:,.1f} MB on disk)  CPU JVM {jvm:.2f} s, "
          f"Python workers {workers:.2f} s; {format_memory(peak)}")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--format", default="parquet", choices=READ_FORMATS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--staged", action="store_true",
                        help="also read the same rows while still staged (bulk formats)")
    args = parser.parse_args()
    if args.staged and args.format not in BULK_FORMATS:
        parser.error(f"--staged: only bulk formats ({', '.join(BULK_FORMATS)}) stage rows")
    root = Path(tempfile.mkdtemp(prefix="rotsink-read-bench-"))
    make_source(root / "src", args.rows, files=4)
    spark = quiet_session("rotsink-read-bench")
    floors.register(spark)
    finished = write_output(spark, root / "src", root / "out", args.format,
                            {"rotation.maxBatches": "1"})
    outs = {side: root / "out" for side in ("spark", "floor", "rotsink")}
    data_bytes = dict.fromkeys(outs, finished)
    if args.staged:
        outs[STAGED] = root / "staged"
        data_bytes[STAGED] = write_output(spark, root / "src", root / "staged", args.format,
                                          NEVER_ROLL)
    runs: dict[str, list[dict]] = {side: [] for side in outs}
    for side, out in outs.items():
        scan(spark, out, args.format, side)  # warm-up
    for _ in range(args.repeats):
        for side, out in outs.items():
            runs[side].append(scan(spark, out, args.format, side))
    times = {side: show(side, side_runs, args.rows, data_bytes[side], args.format)
             for side, side_runs in runs.items()}
    print(f"ratio rotsink/spark read throughput: {times['spark'] / times['rotsink']:.2f}x "
          f"(median of {args.repeats}); floor/spark {times['spark'] / times['floor']:.2f}x: "
          "a Python reader that does nothing of its own")
    if args.staged:
        print(f"ratio staged/finished read throughput (rotsink's reader): "
              f"{times['rotsink'] / times[STAGED]:.2f}x (target >= 1.0x)")
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
