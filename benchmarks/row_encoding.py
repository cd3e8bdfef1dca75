"""CPU time of a row format's executor path, without Spark: encode alone, and a whole task.

    python benchmarks/row_encoding.py --rows 500000 --formats jsonl,csv --repeats 7

Spark hands a task 10,000-row Arrow batches (``spark.sql.execution.arrow.maxRecordsPerBatch``);
this feeds the same batches of two tables to the same code: ``throughput`` (id long, name
string, score double, grp string: the rows of ``throughput.py``) and ``events`` (id long, a
derived long, a 1,024-value string, a UTC timestamp: ``conversion.py``'s without the double).

Per format and table it prints the medians (and min-max) of ``--repeats`` runs of:

* ``encode``: ``encode_rows`` on each chunk the task writer would encode (the batches
  coalesced as ``TaskWriter`` does), no file;
* ``task``: a whole ``TaskWriter.write`` into a fresh directory (coalescing, encoding,
  compression with ``--compression``, the appends), the files deleted after each run.

Times are process CPU seconds (``time.process_time``: every thread, user and system), which
other work on a shared machine disturbs far less than wall time; polars' writers may use
more than one thread, and their CPU counts in full.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from commit_protocol.formats import encode_rows  # noqa: E402
from commit_protocol.formats.arrow import coalesce  # noqa: E402
from commit_protocol.records.config import SinkConfig  # noqa: E402
from commit_protocol.records.plan import WritePlan  # noqa: E402
from commit_protocol.storage import LocalStorage  # noqa: E402
from commit_protocol.task.task_writer import ROW_CHUNK_BYTES, TaskWriter  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conversion import make_rows  # noqa: E402

SPARK_BATCH_ROWS = 10_000


def throughput_rows(n: int) -> pa.Table:
    ids = pa.array(range(n), pa.int64())
    return pa.table({"id": ids, "name": pc.cast(ids, pa.string()),
                     "score": pc.divide(pc.cast(ids, pa.float64()), 7.0),
                     "grp": pc.cast(pc.bit_wise_and(ids, 7), pa.string())})


def event_rows(n: int) -> pa.Table:
    """The issue's workload: id, a derived long, a string, a timestamp (conversion.py's
    event table without its double)."""
    return make_rows(n).drop_columns(["score"])


TABLES: dict[str, Callable[[int], pa.Table]] = {"throughput": throughput_rows,
                                                "events": event_rows}


def cpu_runs(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up: imports, polars' thread pool
    runs = []
    for _ in range(repeats):
        started = time.process_time()
        fn()
        runs.append(time.process_time() - started)
    return runs


def encode_chunks(chunks: list[pa.RecordBatch], fmt: str) -> list[bytes]:
    return [encode_rows(fmt, c, with_header=i == 0) for i, c in enumerate(chunks)]


def task(batches: list[pa.RecordBatch], fmt: str, compression: str) -> None:
    root = tempfile.mkdtemp(prefix="rotsink-row-encoding-")
    try:
        storage = LocalStorage(root)
        config = SinkConfig(path=root, format=fmt, compression=compression)
        writer = TaskWriter(storage, config,
                            WritePlan(latest_batch_id=None, root_uri=storage.root_uri),
                            batch_id=0, partition=0, attempt=0, query_id="bench")
        writer.write(iter(batches))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def show(label: str, runs: list[float], rows: int) -> None:
    median = statistics.median(runs)
    print(f"  {label:<8} {median * 1e3:8.1f} ms CPU (min {min(runs) * 1e3:.1f}, max "
          f"{max(runs) * 1e3:.1f}), {median * 1e9 / rows:6.1f} ns/row", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--formats", default="jsonl,csv")
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--compression", default="none")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for name in args.tables.split(","):
        batches = TABLES[name](args.rows).to_batches(max_chunksize=SPARK_BATCH_ROWS)
        chunks = list(coalesce(batches, ROW_CHUNK_BYTES))
        for fmt in args.formats.split(","):
            print(f"{fmt}, {name} table: {args.rows:,} rows in {len(batches)} batches, "
                  f"{len(chunks)} chunks of ~{chunks[0].num_rows:,} rows; compression "
                  f"{args.compression}; medians of {args.repeats}", flush=True)
            show("encode", cpu_runs(partial(encode_chunks, chunks, fmt), args.repeats),
                 args.rows)
            show("task", cpu_runs(partial(task, batches, fmt, args.compression), args.repeats),
                 args.rows)


if __name__ == "__main__":
    main()
