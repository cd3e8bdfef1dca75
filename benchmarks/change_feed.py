"""End-to-end latency of the change feed against Spark's file source tailing the same output.

    python benchmarks/change_feed.py                  # 120 s of input, one file per second
    python benchmarks/change_feed.py --seconds 60 --interval 20
    python benchmarks/change_feed.py --catch-up 2000000 [--format parquet]   # throughput

A feeder thread writes one small JSON file per second, each row stamped with the time it was
written. An upstream query (1 s trigger, default rotation unless ``--interval``) writes them
to rotsink; two downstream queries (1 s triggers) follow that output and record, per row, the
time their micro-batch handed it over (``foreachBatch``):

* **rotsink's change feed**: ``spark.readStream.format("rotsink").load(out)``;
* **Spark's file source**: ``spark.readStream.json(out)``, which reads the sink's log and so
  sees a row only once its file is finalized (rolled).

Prints the median and 99th percentile of (delivery time - write time) for each, and how many
rows each delivered (every row once for the feed; the file source misses rows still in
progress at the end). Everything runs in one local[2] session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import quiet_session  # noqa: E402

SCHEMA = "id LONG, written_ms LONG"
ROWS_PER_FILE = 20


def feed(directory: Path, seconds: int, stop: threading.Event) -> None:
    for second in range(seconds):
        if stop.is_set():
            return
        now = int(time.time() * 1000)
        lines = (json.dumps({"id": second * ROWS_PER_FILE + r, "written_ms": now})
                 for r in range(ROWS_PER_FILE))
        temp = directory / f".in-{second:05d}.json"
        temp.write_text("\n".join(lines) + "\n")
        temp.rename(directory / f"in-{second:05d}.json")  # the source never sees half a file
        time.sleep(1)


def recorder(latencies: dict[int, tuple[float, float]], lock: threading.Lock):
    def record(batch, _batch_id) -> None:
        now = time.time() * 1000
        rows = batch.select("id", "written_ms").collect()
        with lock:
            for row in rows:
                latencies.setdefault(row.id, (row.written_ms, now - row.written_ms))
    return record


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=120, help="seconds of input")
    parser.add_argument("--catch-up", type=int, default=0, metavar="ROWS",
                        help="instead: a feed from the earliest batch of ROWS finalized rows "
                             "against Spark's file source (throughput)")
    parser.add_argument("--format", default="jsonl", help="with --catch-up")
    parser.add_argument("--repeats", type=int, default=3, help="with --catch-up")
    parser.add_argument("--warmup", type=int, default=10,
                        help="seconds after the followers start before rows are measured")
    parser.add_argument("--interval", type=int, default=0,
                        help="rotation.interval and inactivity in s (0: the default 60 s)")
    args = parser.parse_args()
    if args.catch_up:
        catch_up(args.catch_up, args.repeats, args.format)
        return
    spark = quiet_session("rotsink-change-feed-benchmark")
    root = Path(tempfile.mkdtemp(prefix="rotsink-feed-"))
    source, out = root / "in", root / "out"
    source.mkdir()
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(source, args.seconds, stop), daemon=True)
    feeder.start()
    writer = (spark.readStream.schema(SCHEMA).json(str(source)).writeStream.format("rotsink")
              .option("checkpointLocation", str(root / "ck_up"))
              .trigger(processingTime="1 second"))
    if args.interval:
        writer = (writer.option("rotation.interval", f"{args.interval}s")
                  .option("rotation.inactivity", f"{args.interval}s"))
    upstream = writer.start(str(out))
    while not (out / "_spark_metadata" / "0").exists():
        time.sleep(0.2)  # the feed reads the schema from the log
    lock = threading.Lock()
    results: dict[str, dict[int, tuple[float, float]]] = {"rotsink change feed": {},
                                                          "Spark file source": {}}
    sources = {"rotsink change feed": spark.readStream.format("rotsink").load(str(out)),
               "Spark file source": spark.readStream.schema(SCHEMA).json(str(out))}
    downstream = [df.writeStream.foreachBatch(recorder(results[name], lock))
                  .option("checkpointLocation", str(root / f"ck_{i}"))
                  .trigger(processingTime="1 second").start()
                  for i, (name, df) in enumerate(sources.items())]
    # rows written before both followers ran their first micro-batch measure start-up
    measured_from = time.time() * 1000 + args.warmup * 1000
    feeder.join()
    time.sleep(5)  # let the last rows through the feed
    for query in [upstream, *downstream]:
        query.stop()
    spark.stop()
    written = args.seconds * ROWS_PER_FILE
    print(f"{args.seconds} s of input, {ROWS_PER_FILE} rows per second, 1 s triggers, "
          f"rotation.interval {args.interval or 60} s; local[2]")
    print(f"  latency of the rows written from {args.warmup} s after the followers started")
    for name, latencies in results.items():
        values = [latency for at, latency in latencies.values() if at >= measured_from]
        if not values:
            print(f"  {name:<20} delivered {len(latencies):,} of {written} rows")
            continue
        median, p99 = statistics.median(values) / 1000, percentile(values, 0.99) / 1000
        print(f"  {name:<20} delivered {len(latencies):,} of {written:,} rows; latency median "
              f"{median:.1f} s, p99 {p99:.1f} s ({len(values):,} rows)")



def catch_up(rows: int, repeats: int, fmt: str) -> None:
    """A feed starting from the earliest batch of ``rows`` finalized rows, against Spark's file
    source reading the same files and the floor (a Python stream reader handing pyarrow's
    decoding of the same files to Spark): every stream with availableNow into Spark's
    ``noop`` sink, alternating, medians of ``repeats``."""
    from throughput import make_source

    from commit_protocol.formats import FORMATS

    spark = quiet_session("rotsink-change-feed-catch-up")
    root = Path(tempfile.mkdtemp(prefix="rotsink-feed-catch-up-"))
    make_source(root / "src", rows, files=4)
    schema = spark.read.parquet(str(root / "src")).schema
    (spark.readStream.schema(schema).parquet(str(root / "src")).writeStream.format("rotsink")
     .option("format", fmt).option("rotation.maxBatches", "1")
     .option("checkpointLocation", str(root / "ck")).trigger(availableNow=True)
     .start(str(root / "out")).awaitTermination())
    import floors

    floors.register(spark)
    reader = "json" if fmt == "jsonl" else fmt
    sides = {"rotsink change feed": lambda: spark.readStream.format("rotsink"),
             "floor (pyarrow, no rotsink)": lambda: spark.readStream.format("floor")
             .schema(schema).option("format", fmt),
             f"Spark file source ({reader})": lambda: spark.readStream.schema(schema)
             .format(reader)}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for repeat in range(repeats + 1):  # the first round warms up
        for name, make in sides.items():
            started = time.perf_counter()
            (make().load(str(root / "out")).writeStream.format("noop")
             .option("checkpointLocation", str(root / f"ck-{name[:6]}-{repeat}"))
             .trigger(availableNow=True).start().awaitTermination())
            if repeat:
                times[name].append(time.perf_counter() - started)
    spark.stop()
    print(f"catch-up read of {rows:,} finalized rows ({FORMATS[fmt].name}), availableNow into "
          f"noop, medians of {repeats}:")
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, seconds in medians.items():
        print(f"  {name:<28} {seconds:6.2f} s  {rows / seconds:12,.0f} rows/s")
    feed, floor, spark_side = medians.values()
    print(f"  throughput rotsink/Spark: {spark_side / feed:.2f}x (target >= 0.8x); "
          f"floor/Spark {spark_side / floor:.2f}x; rotsink/floor {floor / feed:.2f}x")


if __name__ == "__main__":
    main()
