"""Per-micro-batch overhead: many tiny batches through rotsink and Spark's built-in JSON sink.

    python benchmarks/batch_overhead.py --batches 200 --rows 10

Every sink reads the same pre-generated JSON files, one file per micro-batch
(``maxFilesPerTrigger=1``, ``availableNow``), so they see identical batches. rotsink writes
``format=jsonl`` with default rotation, durable (``commit.fsync=true``, the default) and, as
``rotsink-nofsync``, without the ``fsync`` calls (what durability costs per batch), and as
``rotsink-metrics`` with Spark's streaming metrics on for its query
(``spark.sql.streaming.metricsEnabled``: rotsink's metrics, and Spark's own of the query, into
the session's JMX sink: what watching a query costs per batch); the anchor is
``format("json")``, the floor ``benchmarks/floors.py``'s sink that only counts rows.

Warm: one session, a warm-up query per sink, then the measured query per sink.
Metrics alone: the driver's commit of the same tiny batches without Spark, metrics recorded
into a mailbox and not (``--commits``, alternating runs): what metrics add to a commit,
below the noise of a Spark batch.
Cold: each sink's first query in a fresh session, each in its own subprocess (fresh JVM and
Python workers). Prints per-batch wall ms (wall / batches) and the medians of Spark's
per-batch ``durationMs`` (``triggerExecution``: the whole batch; ``addBatch``: the sink's
write and commit), rows/s, MB/s of input, peak memory and the ratio rotsink/builtin.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floors  # noqa: E402
from common import (  # noqa: E402
    driver_peak_rss_mb,
    jvm_heap_peak_mb,
    median,
    quiet_session,
    ratio,
    reset_jvm_heap_peak,
)

SCHEMA = "id LONG, name STRING, score DOUBLE, grp STRING"
SINKS = ("builtin", "floor", "rotsink", "rotsink-nofsync", "rotsink-metrics")
METRICS = "spark.sql.streaming.metricsEnabled"
PHASES = ("triggerExecution", "addBatch", "queryPlanning", "latestOffset", "getBatch",
          "walCommit", "commitOffsets")


def make_source(directory: Path, batches: int, rows: int) -> int:
    """``batches`` JSON files of ``rows`` rows each; returns their total size in bytes."""
    directory.mkdir(parents=True)
    for b in range(batches):
        lines = (json.dumps({"id": i, "name": f"name-{i}", "score": i / 7, "grp": str(i % 8)})
                 for i in range(b * rows, (b + 1) * rows))
        (directory / f"in-{b:05d}.json").write_text("\n".join(lines) + "\n")
    return sum(p.stat().st_size for p in directory.iterdir())


def run(spark, source: Path, out: Path, sink: str, batches: int) -> dict:
    """One availableNow query of ``batches`` micro-batches; wall time and Spark's timings."""
    shutil.rmtree(out, ignore_errors=True)
    checkpoint = f"{out}-ck"
    shutil.rmtree(checkpoint, ignore_errors=True)
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    writer = df.writeStream.option("checkpointLocation", checkpoint)
    if sink.startswith("rotsink"):
        writer = writer.format("rotsink").option("format", "jsonl") \
            .option("commit.fsync", str(sink != "rotsink-nofsync").lower())
    else:
        writer = writer.format(sink if sink == "floor" else "json")
    reset_jvm_heap_peak(spark)
    started = time.perf_counter()
    spark.conf.set(METRICS, str(sink == "rotsink-metrics").lower())  # read at the start
    query = writer.trigger(availableNow=True).start(str(out))
    spark.conf.unset(METRICS)
    query.awaitTermination()
    wall = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p.get("numInputRows")]
    shutil.rmtree(checkpoint, ignore_errors=True)
    return {"wall": wall, "batches": len(progress),
            "rows": sum(p["numInputRows"] for p in progress),
            "first_ms": progress[0]["durationMs"]["triggerExecution"] if progress else None,
            "medians": {k: median([p["durationMs"].get(k, 0) for p in progress])
                        for k in PHASES},
            "jvm_heap_mb": jvm_heap_peak_mb(spark), "driver_rss_mb": driver_peak_rss_mb()}


def commit_alone(batches: int, mailbox: str | None) -> float:
    """Median ms of the driver's commit of ``batches`` tiny batches (no Spark: the plan, one
    task's rows, the commit), recording metrics into ``mailbox`` when given."""
    import pyarrow as pa

    from commit_protocol import metrics
    from commit_protocol.commit.committer import Committer
    from commit_protocol.records.config import RotationPolicy, SinkConfig
    from commit_protocol.records.plan import WritePlan
    from commit_protocol.storage import open_storage
    from commit_protocol.task.task_writer import TaskWriter

    schema = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,' \
        '"metadata":{}}]}'
    out = tempfile.mkdtemp(prefix="rotsink-commit-alone-")
    config = SinkConfig(path=out, rotation=RotationPolicy(max_batches=5, interval_ms=0,
                                                          inactivity_ms=0))
    storage = open_storage(out, {})
    times = []
    for b in range(batches):
        plan = WritePlan.from_state(Committer(storage, config, schema).latest_state(),
                                    storage.root_uri)
        report = TaskWriter(storage, config, plan, batch_id=b, partition=0, attempt=0,
                            query_id="q").write([pa.record_batch(
                                {"id": pa.array(range(b * 10, b * 10 + 10), pa.int64())})])
        started = time.perf_counter()
        with metrics.recording(mailbox, b) as recorded:
            result = Committer(storage, config, schema).commit(b, [report])
            recorded.committed(result.state, compacted=result.compacted)
        times.append((time.perf_counter() - started) * 1000)
    shutil.rmtree(out, ignore_errors=True)
    return median(times[batches // 10:])  # past the first compactions


def session(batches: int):
    spark = quiet_session("rotsink-batch-overhead", conf={
        "spark.metrics.conf.*.sink.jmx.class": "org.apache.spark.metrics.sink.JmxSink"})
    floors.register(spark)
    # recentProgress keeps 100 batches by default: keep all of them for the medians.
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(batches + 10))
    return spark


def cold(source: Path, out: Path, sink: str, batches: int) -> dict:
    """The first query of a fresh session, in a subprocess so that nothing is warm."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--cold-side", sink, "--source",
                           str(source), "--out", str(out), "--batches", str(batches)],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"cold {sink} run failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    return result


def show(label: str, r: dict, input_bytes: int) -> None:
    per_batch = r["wall"] / max(r["batches"], 1) * 1000
    m = r["medians"]
    print(f"{label:>16}: {per_batch:7.1f} ms/batch wall  median trigger "
          f"{m['triggerExecution']:6.1f} ms  addBatch {m['addBatch']:6.1f} ms  "
          f"{r['rows'] / r['wall']:>8,.0f} rows/s  {input_bytes / 1e6 / r['wall']:7.4f} MB/s  "
          f"heap<= {r['jvm_heap_mb']:5.0f} MB  driver rss {r['driver_rss_mb']:4.0f} MB  "
          f"({r['batches']} batches, {r['wall']:.1f} s)")
    print(f"{'':>16}  other medians (ms): " + "  ".join(
        f"{k} {m[k]:.0f}" for k in PHASES[2:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rows", type=int, default=10, help="rows per micro-batch")
    parser.add_argument("--warmup-batches", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1, help="measured queries per sink, "
                        "in alternating order (the run with the median wall time is shown)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold subprocesses")
    parser.add_argument("--commits", type=int, default=300,
                        help="batches of the metrics-alone runs (0: skip them)")
    parser.add_argument("--cold-side", choices=SINKS, help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_side:  # the subprocess of cold(): one query, result as a JSON line
        spark = session(args.batches)
        print(json.dumps(run(spark, Path(args.source), Path(args.out), args.cold_side,
                             args.batches)))
        spark.stop()
        return

    root = Path(tempfile.mkdtemp(prefix="rotsink-overhead-"))
    input_bytes = make_source(root / "src", args.batches, args.rows)
    make_source(root / "warm-src", args.warmup_batches, args.rows)
    print(f"{args.batches} micro-batches of {args.rows} rows (one {input_bytes / args.batches:.0f}"
          f"-byte JSON file each); rotsink format=jsonl, default rotation; builtin = json sink")
    spark = session(args.batches)
    warm = {}
    for sink in SINKS:
        run(spark, root / "warm-src", root / f"warm-{sink}", sink, args.warmup_batches)
    runs: dict[str, list[dict]] = {sink: [] for sink in SINKS}
    for repeat in range(args.repeats):  # alternating order: no sink always runs warmest
        for sink in SINKS if repeat % 2 == 0 else reversed(SINKS):
            runs[sink].append(run(spark, root / "src", root / sink, sink, args.batches))
    for sink in SINKS:
        warm[sink] = sorted(runs[sink], key=lambda r: r["wall"])[len(runs[sink]) // 2]
        show(f"warm {sink}", warm[sink], input_bytes)
    spark.stop()
    for anchor in ("builtin", "floor", "rotsink-nofsync"):  # (and metrics on against off)
        rot, base = warm["rotsink"], warm[anchor]
        trigger = ratio(rot["medians"]["triggerExecution"], base["medians"]["triggerExecution"])
        print(f"warm ratio rotsink/{anchor}: wall {ratio(rot['wall'], base['wall'])}  median "
              f"trigger {trigger}  median addBatch "
              f"{ratio(rot['medians']['addBatch'], base['medians']['addBatch'])}")
    on, off = warm["rotsink-metrics"], warm["rotsink"]
    print(f"warm ratio rotsink metrics on/off: wall {ratio(on['wall'], off['wall'])}  median "
          f"trigger {ratio(on['medians']['triggerExecution'], off['medians']['triggerExecution'])}"
          f"  median addBatch {ratio(on['medians']['addBatch'], off['medians']['addBatch'])}")
    if args.commits:
        mailbox = tempfile.mkdtemp(prefix="rotsink-metrics-")
        alone: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(3):
            alone["off"].append(commit_alone(args.commits, None))
            alone["on"].append(commit_alone(args.commits, mailbox))
        off, on = median(alone["off"]), median(alone["on"])
        print(f"driver commit alone ({args.commits} tiny batches, 3 runs each): metrics off "
              f"{off:.2f} ms, on {on:.2f} ms (+{on - off:.2f} ms, {ratio(on, off)})")
        shutil.rmtree(mailbox, ignore_errors=True)
    if not args.no_cold:
        colds = {sink: cold(root / "src", root / f"cold-{sink}", sink, args.batches)
                 for sink in ("builtin", "rotsink")}
        for sink, r in colds.items():
            show(f"cold {sink}", r, input_bytes)
            print(f"{'':>16}  first batch {r['first_ms']} ms; whole process (JVM start, "
                  f"session, query, stop) {r['process_s']:.1f} s")
        rot, base = colds["rotsink"], colds["builtin"]
        print(f"cold ratio rotsink/builtin: wall {ratio(rot['wall'], base['wall'])}  first "
              f"batch {ratio(rot['first_ms'], base['first_ms'])}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
