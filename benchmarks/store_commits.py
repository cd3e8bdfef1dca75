"""Object-store commits through Spark: rotsink against Spark's built-in sink on a real S3
server (or Cloud Storage's and Azure's emulators), per micro-batch, with a region's latency.

    python benchmarks/store_commits.py --batches 30 --rows 1000 --latency-ms 0,20 --repeats 3
    python benchmarks/store_commits.py --store gcs|azure ...

On Cloud Storage Spark's sink writes through gcs-connector, on Azure through hadoop-azure's
``wasb://`` (Azurite serves no DFS endpoint for ``abfs://``); requests are named by each
store's API (``COMPOSE`` is Cloud Storage's compose, ``COMMIT`` Azure's Put Block List,
``COPY`` a server-side copy: S3's UploadPartCopy, Cloud Storage's rewrite, Azure's Put Block
From URL).

One Parquet stream (``batches`` input files of ``rows`` rows, one file per micro-batch,
``availableNow``), partitioned by ``day`` (4 values, so each batch writes 4 files), is
written to SeaweedFS on 127.0.0.1 through the recording proxy of ``tests/support/faulty_proxy.py``,
which delays every request by ``--latency-ms`` (0 ms is loopback; AWS S3 answers in 10-30 ms):

* ``builtin``: Spark's Parquet sink through Hadoop's s3a (its log in ``_spark_metadata`` on
  the bucket), ``.partitionBy("day")``;
* ``floor``: a Python sink that does nothing (``benchmarks/floors.py``): what the Python Data
  Source API costs a micro-batch before a Python sink sends a request;
* ``rotsink-batch1``: rotsink with ``rotation.maxBatches=1``, so every batch finishes its
  files: the same objects as the built-in sink;
* ``rotsink``: rotsink with its default rotation (files span micro-batches).

The checkpoints are on the local disk by default (``--checkpoint s3`` puts them on the bucket
through s3a for every side), so the requests counted are the sink's own. Requests are given
to a batch by time, between the start and end of its trigger in Spark's progress reports.
For each side: per-batch wall time (the median ``triggerExecution``, and the run's wall time
over its batches), rows/s and MB/s of input, the peak memory of the JVM, the driver and the
Python workers, and then, per batch kind (append only, with a roll, with a compaction of the
log), the requests by S3 operation and the *sequential* requests: the longest chain of
requests of the batch that ran one after another, the round trips a trigger waits for
(requests sent in parallel count once). Ratios are rotsink's per-batch time over the
built-in sink's and over the floor's, medians of ``--repeats`` runs in alternating order.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers
sys.path.insert(0, str(Path(__file__).resolve().parent))
import floors  # noqa: E402
from common import (  # noqa: E402
    format_memory,
    median,
    peak_memory_mb,
    quiet_session,
    ratio,
    reset_peak_memory,
)

from tests.support import azurite, gcsserver  # noqa: E402
from tests.support.cloud_readers import (  # noqa: E402
    EMULATOR_PORT,
    point_gs_at,
    point_wasb_at_emulator,
)
from tests.support.faulty_proxy import (  # noqa: E402
    FailingProxy,
    Sent,
    azure_operation,
    gcs_operation,
    operation,
    sequential,
)
from tests.support.jvm import cloud_reader_jars, spark_packages  # noqa: E402
from tests.support.s3server import (  # noqa: E402
    DUMMY_CREDENTIALS,
    LocalS3,
    create_bucket,
    point_s3a_at,
    start_seaweedfs_server,
)

SIDES = ("builtin", "floor", "rotsink-batch1", "rotsink")
DAYS = ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04")


@dataclass
class Store:
    """One store's server on 127.0.0.1 and how each side reaches it through the proxy:
    SeaweedFS (S3), fake-gcs-server (Cloud Storage), Azurite (Azure; Spark's wasb:// reaches
    the emulator only on port 10000, where the proxy then listens)."""

    name: str
    endpoint: str = ""

    def start(self):
        if self.name == "s3":
            self.endpoint, stop = start_seaweedfs_server()
        elif self.name == "gcs":
            self.endpoint, stop = gcsserver.start_fake_gcs()
        else:
            self.endpoint, stop = azurite.start_azurite()
        return stop

    def proxy(self, latency_s: float) -> FailingProxy:
        classify = {"s3": operation, "gcs": gcs_operation, "azure": azure_operation}[self.name]
        return FailingProxy(self.endpoint, latency_s=latency_s, classify=classify,
                            port=EMULATOR_PORT if self.name == "azure" else 0)

    def bucket(self, spark, proxy: FailingProxy) -> tuple[str, str, dict[str, str]]:
        """A fresh bucket, Spark pointed at it through ``proxy``: the built-in sink's output
        URL, rotsink's, and rotsink's options."""
        name = f"commits-{uuid.uuid4().hex[:10]}"
        if self.name == "s3":
            create_bucket(self.endpoint, name)
            point_s3a_at(spark, name, LocalS3("seaweedfs", proxy.endpoint))
            return f"s3a://{name}/out", f"s3://{name}/out", {"fs.endpoint_url": proxy.endpoint}
        if self.name == "gcs":
            gcsserver.create_bucket(self.endpoint, name)
            point_gs_at(spark, proxy.endpoint)
            return (f"gs://{name}/out", f"gs://{name}/out",
                    {"fs.endpoint_url": proxy.endpoint, "fs.token": "anon"})
        azurite.create_container(self.endpoint, name)
        point_wasb_at_emulator(spark)
        url = f"wasb://{name}@{azurite.ACCOUNT}.blob.core.windows.net/out"
        return url, url, {"fs.connection_string": azurite.connection_string(proxy.endpoint)}


@dataclass
class Batch:
    """One micro-batch of a run: its kind, wall time and the sink's requests."""

    batch_id: int
    trigger_ms: float
    requests: list[Sent]

    @property
    def sequential(self) -> int:
        return sequential(self.requests)


def make_source(directory: Path, batches: int, rows: int) -> int:
    """``batches`` Parquet files of ``rows`` rows (id, day, name), modified in order."""
    directory.mkdir(parents=True)
    for b in range(batches):
        ids = pa.array(range(b * rows, (b + 1) * rows), pa.int64())
        pq.write_table(pa.table({
            "id": ids,
            "day": pa.array([DAYS[i % len(DAYS)] for i in range(rows)]).cast(pa.date32()),
            "name": pa.array([f"name-{i}" for i in range(b * rows, (b + 1) * rows)])}),
            directory / f"in-{b:05d}.parquet")
    return sum(p.stat().st_size for p in directory.iterdir())


def batch_kind(side: str, batch_id: int) -> str:
    """What a batch of ``side`` does beyond appending (the log's interval is 10 everywhere)."""
    compaction = (batch_id + 1) % 10 == 0
    rolls = side in ("builtin", "rotsink-batch1")  # every batch finishes its files
    if side == "floor":
        return "no requests"
    return ("compaction" if compaction else "roll" if rolls else "append") + \
        (" + roll" if compaction and rolls else "")


def run(spark, proxy: FailingProxy, store: Store, source: Path, side: str,
        batches: int, checkpoint_on_s3: bool, work: Path) -> dict:
    """One availableNow query of ``side``; its batches with their requests."""
    builtin_out, rotsink_out, rotsink_options = store.bucket(spark, proxy)
    checkpoint = (f"{builtin_out.rsplit('/', 1)[0]}/_checkpoint" if checkpoint_on_s3
                  else str(work / "ck"))
    shutil.rmtree(work / "ck", ignore_errors=True)
    df = spark.readStream.schema("id LONG, day DATE, name STRING") \
        .option("maxFilesPerTrigger", 1).parquet(str(source))
    writer = df.writeStream.option("checkpointLocation", checkpoint)
    if side == "builtin":
        writer = writer.format("parquet").partitionBy("day")
        out = builtin_out
    elif side == "floor":
        writer = writer.format("floor")
        out = str(work / "floor-out")
    else:
        writer = writer.format("rotsink").option("format", "parquet") \
            .option("partitionBy", "day").options(**rotsink_options)
        if side == "rotsink-batch1":
            writer = writer.option("rotation.maxBatches", "1")
        out = rotsink_out
    reset_peak_memory(spark)
    first = len(proxy.requests)
    started = time.perf_counter()
    query = writer.trigger(availableNow=True).start(out)
    query.awaitTermination()
    wall = time.perf_counter() - started
    sent = proxy.requests[first:]
    progress = [p for p in query.recentProgress if p.get("numInputRows")]
    runs = []
    for p in progress:
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        end = start + p["durationMs"]["triggerExecution"] / 1000
        mine = [r for r in sent if start <= r.started < end and "/_checkpoint" not in r.path]
        runs.append(Batch(p["batchId"], p["durationMs"]["triggerExecution"], mine))
    return {"wall": wall, "batches": runs, "rows": sum(p["numInputRows"] for p in progress),
            "memory": peak_memory_mb(spark),
            "objects": len([r for r in sent if r.operation in ("PUT", "COPY", "UPLOAD",
                                                                 "COMPOSE", "COMMIT")])}


def summary(side: str, result: dict, input_bytes: int) -> str:
    batches = result["batches"]
    per_batch = result["wall"] / max(len(batches), 1) * 1000
    steady = [b.trigger_ms for b in batches if b.batch_id > 0]
    return (f"{side:>15}: {median(steady):7.1f} ms/batch (median trigger, batch 0 left out), "
            f"{per_batch:7.1f} ms/batch wall  {result['rows'] / result['wall']:>9,.0f} rows/s  "
            f"{input_bytes / 1e6 / result['wall']:6.3f} MB/s  {format_memory(result['memory'])}")


def kinds_table(side: str, result: dict) -> list[str]:
    """Per batch kind: median requests, median sequential requests, operations."""
    by_kind: dict[str, list[Batch]] = {}
    for b in result["batches"]:
        if b.batch_id > 0:  # the first batch also sets the path up
            by_kind.setdefault(batch_kind(side, b.batch_id), []).append(b)
    lines = []
    for kind, items in sorted(by_kind.items()):
        ops = Counter(r.operation for b in items for r in b.requests)
        per = ", ".join(f"{op} {n / len(items):.1f}" for op, n in sorted(ops.items()))
        lines.append(f"{'':>15}  {kind:<18} x{len(items):<3} requests "
                     f"{median([len(b.requests) for b in items]):5.1f}  sequential "
                     f"{median([b.sequential for b in items]):5.1f}  "
                     f"trigger {median([b.trigger_ms for b in items]):6.1f} ms  ({per})")
    return lines


def trace(result: dict, batch_id: int) -> list[str]:
    """Every request of one batch: milliseconds from the batch's first request, the time it
    took, its operation and path."""
    for b in result["batches"]:
        if b.batch_id == batch_id and b.requests:
            zero = min(r.started for r in b.requests)
            return [f"{'':>17}{(r.started - zero) * 1000:7.1f} ms "
                    f"{(r.ended - r.started) * 1000:5.1f} ms  {r.operation:<6} {r.path[:110]}"
                    for r in sorted(b.requests, key=lambda r: r.started)]
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rows", type=int, default=1000, help="rows per micro-batch")
    parser.add_argument("--latency-ms", default="0,20",
                        help="comma-separated delays per request, one set of runs each")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--checkpoint", choices=("local", "s3"), default="local",
                        help="s3: the checkpoints on the store too, for every side")
    parser.add_argument("--store", choices=("s3", "gcs", "azure"), default="s3",
                        help="SeaweedFS (S3), fake-gcs-server (Cloud Storage) or Azurite")
    parser.add_argument("--trace", type=int, metavar="BATCH",
                        help="also print every request of this batch, per side")
    args = parser.parse_args()
    sides = [s for s in args.sides.split(",") if s]
    os.environ.update(DUMMY_CREDENTIALS)
    work = Path(tempfile.mkdtemp(prefix="rotsink-s3-commits-"))
    input_bytes = make_source(work / "src", args.batches, args.rows)
    make_source(work / "warm-src", 3, args.rows)
    store = Store(args.store)
    stop = store.start()
    spark = quiet_session("rotsink-s3-commits",
                          extra_jars=(*spark_packages().jars, *cloud_reader_jars()))
    floors.register(spark)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(args.batches + 10))
    print(f"{args.batches} micro-batches of {args.rows} rows, 4 day partitions, Parquet, "
          f"{ {'s3': 'SeaweedFS', 'gcs': 'fake-gcs-server', 'azure': 'Azurite'}[args.store]}; "
          f"checkpoints {args.checkpoint}")
    try:
        for latency_ms in (float(x) for x in args.latency_ms.split(",")):
            proxy = store.proxy(latency_ms / 1000)
            try:
                for side in sides:  # warm-up: JVM classes, s3a, Python workers
                    run(spark, proxy, store, work / "warm-src", side, 3,
                        args.checkpoint == "s3", work)
                runs: dict[str, list[dict]] = {side: [] for side in sides}
                for repeat in range(args.repeats):
                    for side in sides if repeat % 2 == 0 else reversed(sides):
                        runs[side].append(run(spark, proxy, store, work / "src", side,
                                              args.batches, args.checkpoint == "s3", work))
            finally:
                proxy.stop()
            print(f"\n-- {latency_ms:g} ms per request (medians of {args.repeats} runs) --")
            chosen = {}
            for side in sides:
                ordered = sorted(runs[side], key=lambda r: median(
                    [b.trigger_ms for b in r["batches"] if b.batch_id > 0]))
                chosen[side] = ordered[len(ordered) // 2]
                print(summary(side, chosen[side], input_bytes))
                for line in kinds_table(side, chosen[side]):
                    print(line)
                if args.trace is not None:
                    for line in trace(chosen[side], args.trace):
                        print(line)
            steady = {side: median([b.trigger_ms for b in chosen[side]["batches"]
                                    if b.batch_id > 0]) for side in sides}
            for side in (s for s in sides if s.startswith("rotsink")):
                for anchor in (a for a in ("builtin", "floor") if a in sides):
                    print(f"ratio {side}/{anchor}: per-batch time "
                          f"{ratio(steady[side], steady[anchor])}")
    finally:
        spark.stop()
        stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
