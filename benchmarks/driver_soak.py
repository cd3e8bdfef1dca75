"""A real query's driver over many micro-batches: the memory of the Python process that runs
rotsink's commits (PySpark's streaming sink runner, which lives as long as the query), not the
JVM heap users size (issue 55).

    python benchmarks/driver_soak.py                               # 2,000 micro-batches a table
    python benchmarks/driver_soak.py --batches 20000 --table iceberg   # on demand (hours)

A ``rate-micro-batch`` source feeds a query into rotsink back to back (no trigger interval),
``--rows`` rows a micro-batch, files rolled every ``--roll`` batches, with a Delta or Iceberg table
following the log (``--table none``: the log alone); beside them the anchors, measured in the
same run: the floor (``benchmarks/floors.py``'s Python sink that only counts rows) and Spark's
own Parquet sink (no Python runner at all). Every ``--every`` micro-batches it prints
the resident set of the sink runner (the processes whose command names
``python_streaming_sink_runner``: PySpark's daemon for it and the worker it forks for the
query), of the other Python workers, and of the JVM, with the micro-batches a second. Each
side runs in a Spark session (a process) of its own: PySpark keeps a stopped query's worker
for the next query.
The memory a long-running driver needs is the runner's plateau (docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # floors.py, as the others import it

from benchmarks.common import TENTH, _children, memory_mb, quiet_session  # noqa: E402

RUNNER = "python_streaming_sink_runner"


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def memory(spark) -> dict[str, float]:
    """Resident sets now, MB: the sink runner's processes (PySpark's daemon for it and the
    worker it forks for the query), the other Python workers, the JVM. Each side runs in a
    session of its own, so these are its query's alone."""
    jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    children = _children(jvm)
    runner = [memory_mb(pid) for pid in children if RUNNER in _command(pid)]
    others = [memory_mb(pid) for pid in children if RUNNER not in _command(pid)]
    return {"runner_mb": sum(m["rss"] for m in runner),
            "runner_anon_mb": sum(m["anon"] for m in runner),  # without the libraries' code
            "runner_processes": float(len(runner)),
            "other_workers_mb": sum(m["rss"] for m in others),
            "jvm_mb": memory_mb(jvm)["rss"]}


def table_metadata(output: Path) -> dict[str, float]:
    """The table's metadata on disk now: what its commits read grows with what it keeps
    (Iceberg's ``metadata.json`` holds every snapshot kept), so a runner's memory is read
    beside it."""
    folder = next((output / name for name in ("metadata", "_delta_log")
                   if (output / name).is_dir()), None)
    if folder is None:
        return {}
    sizes = [f.stat().st_size for f in folder.iterdir() if f.is_file()]
    found = {"table_metadata_mb": sum(sizes) / 1e6, "table_metadata_files": float(len(sizes))}
    newest = max(folder.glob("*.metadata.json"), key=lambda f: f.stat().st_mtime, default=None)
    if newest is not None:
        found["metadata_json_kb"] = newest.stat().st_size / 1e3
    return found


def soak(spark, table: str, batches: int, rows: int, roll: int, every: int,
         extra: dict[str, str]) -> list[dict]:
    """``table``: a ``table.format`` or ``none`` into rotsink; ``floor`` (a Python sink that
    only counts rows: its runner is what any Python sink's costs); ``spark`` (Spark's own
    Parquet sink: no Python runner, the JVM alone). ``extra``: more of rotsink's options."""
    work = Path(tempfile.mkdtemp(prefix=f"driver-soak-{table}-"))
    sink = {"floor": "floor", "spark": "parquet"}.get(table, "rotsink")
    options = {"checkpointLocation": str(work / "ck")}
    if sink == "rotsink":
        options.update({"format": "parquet", "rotation.maxBatches": str(roll),
                        "log.cleanupDelay": "60s"})
    if table not in ("none", "floor", "spark"):
        options["table.format"] = table
    if sink == "rotsink":
        options.update(extra)
    # a batch of rows per micro-batch, whatever the clock (``rate`` waits a second for each)
    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows)
              .option("numPartitions", 1).load())
    query = source.writeStream.format(sink).options(**options).start(str(work / "out"))
    points: list[dict] = []
    started, last = time.monotonic(), (0, time.monotonic())
    try:
        while True:
            progress = query.lastProgress
            done = progress["batchId"] + 1 if progress else 0
            if done >= (len(points) + 1) * every or done >= batches:
                now = time.monotonic()
                point = {"batch": done, "batches_per_s": (done - last[0]) / (now - last[1]),
                         **memory(spark), **table_metadata(work / "out")}
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
    first, last_point = points[0], points[-1]
    growth = (f"({last_point['runner_mb'] / first['runner_mb']:.2f}x)" if first["runner_mb"]
              else "(no Python runner)")
    print(f"{table}: {batches:,} micro-batches in {time.monotonic() - started:,.0f} s; sink "
          f"runner {first['runner_mb']:,.0f} MB at {first['batch']:,} -> "
          f"{last_point['runner_mb']:,.0f} MB at {last_point['batch']:,} {growth}; JVM "
          f"{first['jvm_mb']:,.0f} -> {last_point['jvm_mb']:,.0f} MB", flush=True)
    tenth = next((p for p in points if p["batch"] >= TENTH), None)
    if tenth is not None and tenth is not last_point and tenth["runner_mb"]:
        print(f"{table}: sink runner from micro-batch {tenth['batch']:,} to "
              f"{last_point['batch']:,}: {tenth['runner_mb']:,.1f} -> "
              f"{last_point['runner_mb']:,.1f} MB "
              f"({last_point['runner_mb'] / tenth['runner_mb']:.3f}x); its own part "
              f"{tenth['runner_anon_mb']:,.1f} -> {last_point['runner_anon_mb']:,.1f} MB",
              flush=True)
    return points


def _side(command: list[str]):
    """Runs one side, printing its lines as they come (a soak runs for hours: its points
    show, and stay, while it runs) and yielding its points."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as side:
        assert side.stdout is not None
        for line in side.stdout:
            print(line, end="", flush=True)
            if line.startswith("{"):
                yield json.loads(line)
    if side.returncode:
        raise subprocess.CalledProcessError(side.returncode, command)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", default="floor,spark,none,delta,iceberg",
                        help="rotsink's table.format or none; floor, spark: the anchors")
    parser.add_argument("--batches", type=int, default=2_000)
    parser.add_argument("--rows", type=int, default=100, help="rows a micro-batch, about")
    parser.add_argument("--roll", type=int, default=10, help="rotation.maxBatches")
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="one more rotsink option, e.g. table.snapshotRetention=2min "
                             "(a table keeps 5 days of snapshots by default)")
    parser.add_argument("--json", type=Path, help="every point, by table")
    parser.add_argument("--side", help=argparse.SUPPRESS)  # one side, in a process of its own
    args = parser.parse_args()
    for option in args.option:
        if "=" not in option:
            parser.error(f"--option {option!r}: expected KEY=VALUE")
    if args.side:
        spark = quiet_session(f"rotsink-driver-soak-{args.side}")
        import floors

        floors.register(spark)
        soak(spark, args.side, args.batches, args.rows, args.roll, args.every,
             dict(option.split("=", 1) for option in args.option))
        spark.stop()
        return 0
    results = {}
    for table in args.table.split(","):
        command = [sys.executable, __file__, "--side", table, "--batches", str(args.batches),
                   "--rows", str(args.rows), "--roll", str(args.roll),
                   "--every", str(args.every),
                   *(f"--option={option}" for option in args.option)]
        results[table] = list(_side(command))
    if "floor" in results:
        floor = results["floor"][-1]["runner_mb"]
        print("sink runner at the end against the floor's: " + ", ".join(
            f"{table} {points[-1]['runner_mb'] / floor:.2f}x" for table, points in results.items()
            if table not in ("floor", "spark")), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
