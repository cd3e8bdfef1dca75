"""Time to visibility after the input stops, and what an idle heartbeat costs.

    python benchmarks/heartbeat.py                           # inactivity 30 s, heartbeat 10 s
    python benchmarks/heartbeat.py --inactivity 5 --heartbeat 2 --idle-seconds 60 --no-baseline

A query with a 1 s processing-time trigger reads three small JSON files (then nothing) into
rotsink with ``rotation.inactivity`` and ``rotation.interval=0``:

* **with the heartbeat** (``with_heartbeat(df, interval)``): seconds from the commit of the
  last input row (when rotsink's reader first returns every row) until Spark's own reader
  (``spark.read.json(out)``, finalized files only) returns every row. Expected: at most
  inactivity + heartbeat + one micro-batch.
* **without it** (unless ``--no-baseline``): Spark's reader, polled for as long, never sees the
  last rows: Spark runs no micro-batch without input, and the roll happens at a commit.

Then the heartbeat query stays idle for ``--idle-seconds``: CPU seconds of the JVM and the
Python workers, micro-batches, and files created in ``_spark_metadata`` and in the
checkpoint, extrapolated to an idle hour (and the files present at the end: compaction and
Spark's checkpoint retention bound them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, cpu_used, quiet_session  # noqa: E402

SCHEMA = "id LONG, name STRING"
ROWS_PER_FILE = 10


def write_input(directory: Path, files: int = 3) -> int:
    directory.mkdir(parents=True)
    for f in range(files):
        rows = (json.dumps({"id": f * ROWS_PER_FILE + r, "name": f"row {r}"})
                for r in range(ROWS_PER_FILE))
        (directory / f"in-{f}.json").write_text("\n".join(rows) + "\n")
    return files * ROWS_PER_FILE


def start(spark, root: Path, args, *, heartbeat: bool):
    from pyspark_rotsink import with_heartbeat

    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(root / "in"))
    if heartbeat:
        df = with_heartbeat(df, f"{args.heartbeat} seconds")
    return (df.writeStream.format("rotsink").option("checkpointLocation", str(root / "ck"))
            .option("rotation.inactivity", f"{args.inactivity}s")
            .option("rotation.interval", "0").trigger(processingTime="1 second")
            .start(str(root / "out")))


def count(spark, out: Path, *, spark_reader: bool) -> int:
    if not any(p.name[0].isdigit() for p in (out / "_spark_metadata").glob("*")):
        return 0
    if spark_reader:
        return spark.read.schema(SCHEMA).json(str(out)).count()
    return spark.read.format("rotsink").load(str(out)).count()


def wait_for(predicate, timeout_s: float) -> float | None:
    """Seconds until ``predicate()`` holds (polled every 0.25 s), None after ``timeout_s``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.25)
    return None


def visibility(spark, root: Path, args, *, heartbeat: bool) -> float | None:
    total = write_input(root / "in")
    query = start(spark, root, args, heartbeat=heartbeat)
    try:
        out = root / "out"
        committed = wait_for(lambda: count(spark, out, spark_reader=False) == total, 120)
        assert committed is not None, "the input was never committed"
        limit = args.inactivity + args.heartbeat + 30
        seen = wait_for(lambda: count(spark, out, spark_reader=True) == total, limit)
        if heartbeat:
            idle_cost(spark, root, query, args)
        return seen
    finally:
        query.stop()


def files_in(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def part_files(out: Path) -> set[str]:
    """Finished part files and in-progress temp files (``part-*`` anywhere under ``out``)."""
    return {str(p) for p in out.rglob("*part-*") if p.is_file()}


def idle_cost(spark, root: Path, query, args) -> None:
    """The heartbeat query, idle for ``--idle-seconds``: its CPU and files, per idle hour."""
    log, checkpoint = root / "out" / "_spark_metadata", root / "ck"
    seen_log, seen_ck = files_in(log), files_in(checkpoint)
    parts_before = part_files(root / "out")
    created_log, created_ck = set(), set()
    first_batch = query.lastProgress.batchId if query.lastProgress else 0
    cpu_before = cpu_seconds(spark)
    started = time.monotonic()
    while time.monotonic() - started < args.idle_seconds:
        time.sleep(1)
        created_log |= files_in(log) - seen_log
        created_ck |= files_in(checkpoint) - seen_ck
    elapsed = time.monotonic() - started
    cpu = cpu_used(cpu_before, cpu_seconds(spark))
    batches = (query.lastProgress.batchId if query.lastProgress else 0) - first_batch
    per_hour = 3600 / elapsed
    print(f"idle {elapsed:.0f} s with a {args.heartbeat} s heartbeat: {batches} micro-batches; "
          f"CPU {cpu['jvm'] + cpu['workers']:.1f} s (the JVM and its Python processes: an idle "
          "batch's planning and commit runners end within it, so the split between them is "
          "not meaningful)")
    print(f"  per idle hour: {batches * per_hour:,.0f} micro-batches, "
          f"{(cpu['jvm'] + cpu['workers']) * per_hour:,.0f} CPU seconds "
          f"({(cpu['jvm'] + cpu['workers']) / elapsed * 100:.1f}% of one core), "
          f"{len(created_log) * per_hour:,.0f} files created in _spark_metadata, "
          f"{len(created_ck) * per_hour:,.0f} in the checkpoint")
    print(f"  part files (finished and in progress) created while idle: "
          f"{len(part_files(root / 'out') - parts_before)}")
    print(f"  files present at the end: _spark_metadata {len(files_in(log))}, checkpoint "
          f"{len(files_in(checkpoint))} (compaction, log.cleanupDelay and Spark's "
          "minBatchesToRetain=100 bound them)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inactivity", type=int, default=30, help="rotation.inactivity, s")
    parser.add_argument("--heartbeat", type=int, default=10, help="heartbeat interval, s")
    parser.add_argument("--idle-seconds", type=int, default=120)
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the run without a heartbeat")
    args = parser.parse_args()
    spark = quiet_session("rotsink-heartbeat-benchmark")
    root = Path(tempfile.mkdtemp(prefix="rotsink-heartbeat-"))
    print(f"rotation.inactivity={args.inactivity}s, rotation.interval=0, heartbeat "
          f"{args.heartbeat} s, trigger 1 s; local[2]")
    try:
        seen = visibility(spark, root / "heartbeat", args, heartbeat=True)
        bound = args.inactivity + args.heartbeat
        print("with the heartbeat: Spark's reader saw every row "
              + (f"{seen:.1f} s after its commit (inactivity + heartbeat = {bound} s, plus one "
                 "micro-batch)" if seen is not None else "NEVER (bug)"))
        if not args.no_baseline:
            seen = visibility(spark, root / "baseline", args, heartbeat=False)
            limit = bound + 30
            print("without it: Spark's reader "
                  + (f"saw every row after {seen:.1f} s" if seen is not None
                     else f"never saw the last rows (polled {limit} s)"))
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
