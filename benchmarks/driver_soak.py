"""A real query's driver over many micro-batches: the memory of the Python process that runs
rotsink's commits (PySpark's streaming sink runner, which lives as long as the query), not the
JVM heap users size (issue 55).

    python benchmarks/driver_soak.py                               # 2,000 micro-batches a table
    python benchmarks/driver_soak.py --batches 20000 --table iceberg   # on demand (hours)

A ``rate-micro-batch`` source feeds a query into rotsink back to back (no trigger interval),
``--rows`` rows a micro-batch, files rolled every ``--roll`` batches, with a Delta or Iceberg table
following the log (``--table none``: the log alone). Every ``--every`` micro-batches it prints
the resident set of the sink runner (the processes whose command names
``python_streaming_sink_runner``; PySpark starts one for the query, its daemon forks the
worker), of the planning workers beside it, and of the JVM, with the micro-batches a second.
The memory a long-running driver needs is the runner's plateau (docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import _children, _status, quiet_session  # noqa: E402

RUNNER = "python_streaming_sink_runner"


def _rss_mb(pid: int) -> float:
    return int(_status(pid).get("VmRSS", "0 kB").split()[0]) / 1024


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def memory(spark) -> dict[str, float]:
    """Resident sets now, MB: the sink runner's processes, the other Python workers, the JVM."""
    jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    children = _children(jvm)
    runner = [pid for pid in children if RUNNER in _command(pid)]
    return {"runner_mb": sum(_rss_mb(p) for p in runner),
            "runner_processes": float(len(runner)),
            "other_workers_mb": sum(_rss_mb(p) for p in children if p not in runner),
            "jvm_mb": _rss_mb(jvm)}


def soak(spark, table: str, batches: int, rows: int, roll: int, every: int) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix=f"driver-soak-{table}-"))
    options = {"checkpointLocation": str(work / "ck"), "format": "parquet",
               "rotation.maxBatches": str(roll), "log.cleanupDelay": "60s"}
    if table != "none":
        options["table.format"] = table
    # a batch of rows per micro-batch, whatever the clock (``rate`` waits a second for each)
    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows)
              .option("numPartitions", 1).load())
    query = source.writeStream.format("rotsink").options(**options).start(str(work / "out"))
    points: list[dict] = []
    started, last = time.monotonic(), (0, time.monotonic())
    try:
        while True:
            progress = query.lastProgress
            done = progress["batchId"] + 1 if progress else 0
            if done >= (len(points) + 1) * every or done >= batches:
                now = time.monotonic()
                point = {"batch": done, "batches_per_s": (done - last[0]) / (now - last[1]),
                         **memory(spark)}
                last = (done, now)
                points.append(point)
                print(json.dumps(point), flush=True)
                if done >= batches:
                    break
            if query.exception() is not None:
                raise SystemExit(f"the query failed: {query.exception()}")
            time.sleep(0.5)  # (a benchmark polling a live query, not a test)
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{table}: {batches:,} micro-batches in {time.monotonic() - started:,.0f} s; sink "
          f"runner {points[0]['runner_mb']:,.0f} MB at {points[0]['batch']:,} -> "
          f"{points[-1]['runner_mb']:,.0f} MB at {points[-1]['batch']:,} "
          f"({points[-1]['runner_mb'] / points[0]['runner_mb']:.2f}x)", flush=True)
    return points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", default="none,delta,iceberg")
    parser.add_argument("--batches", type=int, default=2_000)
    parser.add_argument("--rows", type=int, default=100, help="rows a micro-batch, about")
    parser.add_argument("--roll", type=int, default=10, help="rotation.maxBatches")
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--json", type=Path, help="every point, by table")
    args = parser.parse_args()
    spark = quiet_session("rotsink-driver-soak")
    results = {table: soak(spark, table, args.batches, args.rows, args.roll, args.every)
               for table in args.table.split(",")}
    if args.json:
        args.json.write_text(json.dumps(results))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
