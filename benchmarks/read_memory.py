"""Memory of a read task on one large file: the peak resident memory of the Python workers
that read it, above an idle worker, and how many tasks share the file.

    python benchmarks/read_memory.py                    # 1 GB each: Parquet, JSON lines, ...
    python benchmarks/read_memory.py --gb 0.25 --cases jsonl

Each case is one finished part file of about ``--gb`` GB written by rotsink's task writer
(no Spark: a file that size takes a while through a query), then read in full by
``spark.read.format("rotsink")`` into the ``noop`` sink (default split size 128 MB:
Parquet by row group, ORC by stripe, JSON lines at line boundaries; gzip and CSV are not
splittable and are read by one task, streamed). Before the measured read, a read of a small
file in several tasks warms every worker (their imports are loaded): the resident memory of a
worker then is its idle size. The line per case: file size, tasks, wall time, MB/s, and the
largest growth of a worker's peak resident memory above its idle size.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from common import _children, memory_mb, quiet_session, reset_peak_memory

CASES = {"parquet": {"format": "parquet", "compression": "snappy", "file_suffix": ".parquet"},
         "jsonl": {"format": "jsonl", "compression": "none", "file_suffix": ".jsonl"},
         "jsonl-gzip": {"format": "jsonl", "compression": "gzip",
                        "file_suffix": ".jsonl.gz"},
         "orc": {"format": "orc", "compression": "zstd", "file_suffix": ".orc"},
         "csv": {"format": "csv", "compression": "none", "file_suffix": ".csv"}}
ROWS_PER_CHUNK = 500_000


def chunk(start: int, rows: int) -> pa.RecordBatch:
    """Rows that compress little: a random double and a 32-character hex string each."""
    import numpy as np

    rng = np.random.default_rng(start)
    ids = pa.array(np.arange(start, start + rows, dtype=np.int64))
    tokens = pc.binary_join_element_wise(
        pc.cast(pa.array(rng.integers(0, 2**62, rows)), pa.string()),
        pc.cast(pa.array(rng.integers(0, 2**62, rows)), pa.string()), "-")
    return pa.RecordBatch.from_arrays(
        [ids, pa.array(rng.random(rows)), tokens], ["id", "score", "token"])


def rows_for(case: str, target_bytes: int) -> int:
    """Rows that make a file of about ``target_bytes`` in ``case``."""
    sample = chunk(0, 100_000)
    per_row = _encoded_bytes(sample, case) / sample.num_rows
    return max(1, round(target_bytes / per_row / ROWS_PER_CHUNK)) * ROWS_PER_CHUNK


def write_file(out: Path, case: str, rows: int) -> int:
    """One finished file of ``rows`` rows at ``out``; returns its size."""
    from commit_protocol.commit.committer import Committer
    from commit_protocol.records.config import RotationPolicy, SinkConfig
    from commit_protocol.records.plan import WritePlan
    from commit_protocol.storage import LocalStorage
    from commit_protocol.task.task_writer import TaskWriter

    sample = chunk(0, 10)
    config = SinkConfig(path=str(out), **CASES[case],  # type: ignore[arg-type]
                        rotation=RotationPolicy(max_bytes=1 << 40, max_records=rows,
                                                interval_ms=0, inactivity_ms=0))
    schema_json = _spark_schema_json(sample.schema)
    storage = LocalStorage(str(out))
    committer = Committer(storage, config, schema_json)
    plan = WritePlan.from_state(committer.latest_state(), storage.root_uri)
    writer = TaskWriter(storage, config, plan, batch_id=0, partition=0, attempt=0,
                        query_id="read-memory")
    report = writer.write(chunk(i, ROWS_PER_CHUNK) for i in range(0, rows, ROWS_PER_CHUNK))
    committer.commit(0, [report], now_ms=int(time.time() * 1000))
    (finished,) = [p for p in out.glob("part-*")]
    return finished.stat().st_size


def _encoded_bytes(batch: pa.RecordBatch, case: str) -> int:
    """Bytes ``batch`` takes in ``case``'s file (uncompressed JSON lines for gzip: gzip
    shrinks these rows little)."""
    import io

    import pyarrow.parquet as pq

    from commit_protocol.formats import encode_rows

    fmt = CASES[case]["format"]
    if fmt in ("parquet", "orc"):  # ORC stores these rows in about as many bytes
        sink = io.BytesIO()
        pq.write_table(pa.Table.from_batches([batch]), sink, compression="snappy")
        return sink.tell()
    return len(encode_rows(fmt, batch, with_header=False))


def _spark_schema_json(schema: pa.Schema) -> str:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema).json()


def worker_rss(spark) -> dict[int, float]:
    """Resident memory now of each Python worker process (daemons included), in MB."""
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    return {pid: memory_mb(pid)["rss"] for pid in _children(jvm)}


def measure(spark, out: Path, warm: Path) -> dict:
    """One full read of ``out`` after a warm-up read of ``warm`` in several tasks."""
    (spark.read.format("rotsink").option("maxPartitionBytes", "2mb").load(str(warm))
     .write.format("noop").mode("overwrite").save())
    idle = worker_rss(spark)
    df = spark.read.format("rotsink").load(str(out))
    tasks = df.rdd.getNumPartitions()
    reset_peak_memory(spark)
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - started
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    warm_size = max(idle.values(), default=0.0)
    growth = max((memory_mb(pid)["hwm"] - idle.get(pid, warm_size) for pid in _children(jvm)),
                 default=0.0)
    return {"tasks": tasks, "wall": wall, "growth": growth,
            "peak": max((memory_mb(pid)["hwm"] for pid in _children(jvm)), default=0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0, help="size of each file")
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rotsink-read-memory-"))
    spark = quiet_session("rotsink-read-memory")
    for case in args.cases.split(","):
        started = time.perf_counter()
        rows = rows_for(case, int(args.gb * 1e9))
        size = write_file(root / case, case, rows)
        write_file(root / f"{case}-warm", case, ROWS_PER_CHUNK)
        print(f"{case}: one file of {size / 1e6:,.0f} MB, {rows:,} rows (written in "
              f"{time.perf_counter() - started:.0f} s)", flush=True)
        for _ in range(args.repeats):
            m = measure(spark, root / case, root / f"{case}-warm")
            print(f"  read by {m['tasks']} tasks in {m['wall']:.1f} s "
                  f"({size / 1e6 / m['wall']:,.0f} MB/s, {rows / m['wall']:,.0f} rows/s): "
                  f"a worker's peak grew by at most {m['growth']:,.0f} MB above its idle "
                  f"size (target < 256 MB; largest worker {m['peak']:,.0f} MB)", flush=True)
        shutil.rmtree(root / case, ignore_errors=True)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
