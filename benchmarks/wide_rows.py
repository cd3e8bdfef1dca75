"""Memory of the Arrow path into a Python sink with wide rows, with and without Spark's
per-row size check (``datasource/writing/arrow_transfer.py``).

    python benchmarks/wide_rows.py                       # every case, every setting
    python benchmarks/wide_rows.py --cases strings --mb 400

Without the check (``spark.sql.execution.arrow.maxBytesPerBatch=2147483647``, as rotsink's
queries run) a batch into a Python task holds ``spark.sql.execution.arrow.maxRecordsPerBatch``
rows (10,000 by default) whatever their size; with it, Spark cuts a batch at 64 MB (256 MB on
4.0). Cases, each about ``--mb`` MB of Parquet-encoded input in one micro-batch of two tasks:

- ``strings``: an id and one 100 kB string per row (a 10,000-row batch is 1 GB);
- ``columns``: an id and 1,000 double columns (8 kB a row);
- ``nested``: an id and an array of 100 structs (a string and a double) per row (~4 kB).

Spark's file source cuts its input into splits of ``spark.sql.files.maxPartitionBytes``
(128 MB by default), which bounds a batch as much as the byte check does; ``--split`` (1 GB
by default) gives each task a share as large as a Kafka source's task often gets (its
partition's whole offset range of the micro-batch).

Settings: the check on (Spark's default); off with Spark's default 10,000 rows a batch; off
with ``maxRecordsPerBatch`` by the README's rule (64 MB of Arrow a batch: ``64 MB / row
bytes``). Each runs the floor (a Python sink that only counts its batches) and rotsink
(Parquet, files finished in the batch) in a fresh session, each after a warm-up query on one
input file, and prints wall time, rows/s,
MB/s, the peak resident memory of the JVM and of the Python workers, the JVM heap's peak
and the largest Arrow batch a task got. A run that fails says how (a JVM out of memory, a
Python worker killed).
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

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import (  # noqa: E402
    jvm_heap_peak_mb,
    peak_memory_mb,
    quiet_session,
    reset_jvm_heap_peak,
    reset_peak_memory,
)

from datasource.writing.arrow_transfer import KEY, UNCHECKED  # noqa: E402

RULE_BATCH_BYTES = 64 << 20  # the README's rule: about 64 MB of Arrow a batch
RECORDS_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"


def case_rows(case: str, start: int, rows: int) -> pa.Table:
    """``rows`` rows of ``case`` from id ``start``; they compress little."""
    import numpy as np

    rng = np.random.default_rng(start)
    ids = pa.array(np.arange(start, start + rows, dtype=np.int64))
    if case == "strings":
        blob = rng.integers(0, 2**63, 100_000 // 16 * rows, dtype=np.uint64)
        text = pc.cast(pa.array(blob), pa.string())
        # 100,000 characters a row: one row's tokens joined, cut to length
        joined = pa.array(["".join(text[i * 6250:(i + 1) * 6250].to_pylist())[:100_000]
                           for i in range(rows)])
        return pa.table({"id": ids, "payload": joined})
    if case == "columns":
        return pa.table({"id": ids, **{f"c{i:04d}": pa.array(rng.random(rows))
                                       for i in range(1000)}})
    values = pa.StructArray.from_arrays(
        [pc.cast(pa.array(rng.integers(0, 2**62, rows * 100)), pa.string()),
         pa.array(rng.random(rows * 100))], names=["key", "value"])
    offsets = pa.array(np.arange(0, rows * 100 + 1, 100, dtype=np.int32))
    return pa.table({"id": ids, "items": pa.ListArray.from_arrays(offsets, values)})


def make_input(directory: Path, case: str, target_mb: float) -> tuple[int, int, float]:
    """Parquet files of about ``target_mb`` MB; returns rows, input bytes and Arrow bytes a
    row."""
    directory.mkdir(parents=True)
    sample = case_rows(case, 0, 200)
    per_row = sample.nbytes / sample.num_rows
    rows = max(2, int(target_mb * 1e6 / per_row))
    written, chunk = 0, max(1, int(32e6 / per_row))
    for n, start in enumerate(range(0, rows, chunk)):
        pq.write_table(case_rows(case, start, min(chunk, rows - start)),
                       directory / f"in-{n:04d}.parquet", compression="none")
        written += (directory / f"in-{n:04d}.parquet").stat().st_size
    (directory.parent / "warm").mkdir()
    shutil.copy(directory / "in-0000.parquet", directory.parent / "warm" / "in-0000.parquet")
    return rows, written, per_row


SETTINGS = {
    "check on (Spark's default)": lambda per_row: {},
    "check off, 10,000 rows a batch": lambda per_row: {KEY: UNCHECKED},
    "check off, rows by the rule": lambda per_row: {
        KEY: UNCHECKED, RECORDS_KEY: str(max(1, int(RULE_BATCH_BYTES // per_row)))},
}


def run_one(args) -> dict:
    """In a subprocess: one session, a warm-up query, then the measured one per side."""
    import floors

    conf = json.loads(args.conf_json)
    spark = quiet_session("rotsink-wide-rows", {
        **conf, "spark.driver.memory": args.memory,
        "spark.sql.files.maxPartitionBytes": args.split})
    if KEY not in conf:  # the check on: Spark's default, set (a rotsink query would run
        # without it when the session leaves it unset)
        spark.conf.set(KEY, spark._jvm.org.apache.spark.sql.internal.SQLConf
                       .ARROW_EXECUTION_MAX_BYTES_PER_BATCH().defaultValueString())
    floors.register(spark)
    root = Path(args.root)
    schema = spark.read.parquet(str(root / "src")).schema
    result = {}
    for side in ("floor", "rotsink"):
        # a warm-up on one input file: the JVM compiles its code for this schema once
        write(spark, schema, root / "warm", root / f"warm-{side}", side)
        reset_peak_memory(spark)
        reset_jvm_heap_peak(spark)
        started = time.perf_counter()
        write(spark, schema, root / "src", root / f"out-{side}", side)
        wall = time.perf_counter() - started
        memory = peak_memory_mb(spark)
        result[side] = {"wall": wall, "jvm_mb": memory["jvm"], "workers_mb": memory["workers"],
                        "heap_mb": jvm_heap_peak_mb(spark)}
    spark.stop()
    return result


def write(spark, schema, source: Path, out: Path, side: str) -> None:
    """An availableNow query of ``side`` from ``source`` into ``out`` (removed after)."""
    writer = (spark.readStream.schema(schema).parquet(str(source)).writeStream
              .option("checkpointLocation", f"{out}-ck").trigger(availableNow=True))
    writer = (writer.format("floor") if side == "floor" else
              writer.format("rotsink").option("format", "parquet")
              .option("rotation.maxBatches", "1"))
    writer.start(str(out)).awaitTermination()
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(f"{out}-ck", ignore_errors=True)


def measure(root: Path, conf: dict[str, str], args) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--one", "--root", str(root), "--memory", args.memory,
         "--split", args.split, "--conf-json", json.dumps(conf)], capture_output=True,
        text=True, timeout=1800)
    if done.returncode:
        text = done.stderr + done.stdout
        lines = text.splitlines()
        why = next((line.strip() for line in lines if "OutOfMemory" in line
                    or "OutOfDirectMemory" in line or "exited unexpectedly" in line),
                   next((line.strip() for line in reversed(lines)
                         if "Error" in line or "Exception" in line), "no output"))
        return {"failed": why[:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="strings,columns,nested")
    parser.add_argument("--mb", type=float, default=300, help="Arrow MB of input per case")
    parser.add_argument("--memory", default="2g", help="spark.driver.memory (the JVM's heap)")
    parser.add_argument("--split", default="1g",
                        help="spark.sql.files.maxPartitionBytes: the input a task gets (a "
                             "task of a Kafka source gets its partition's offset range)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--conf-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args)))
        return
    lines = []
    for case in args.cases.split(","):
        root = Path(tempfile.mkdtemp(prefix=f"rotsink-wide-{case}-"))
        rows, input_bytes, per_row = make_input(root / "src", case, args.mb)
        print(f"{case}: {rows:,} rows, {per_row / 1e3:,.1f} kB of Arrow a row, "
              f"{input_bytes / 1e6:,.0f} MB of Parquet input; driver memory {args.memory}, "
              f"splits of {args.split}", flush=True)
        for setting, settings_of in SETTINGS.items():
            conf = settings_of(per_row)
            batch = int(conf.get(RECORDS_KEY, "10000"))
            largest = min(batch, rows) * per_row if KEY in conf else \
                min(batch * per_row, 64e6 + per_row)
            result = measure(root, conf, args)
            if "failed" in result:
                line = f"  {setting:<32} FAILED: {result['failed']}"
            else:
                line = f"  {setting:<32} largest batch ~{largest / 1e6:,.0f} MB; " + "; ".join(
                    f"{side} {r['wall']:.1f} s, {rows / r['wall']:,.0f} rows/s, "
                    f"{input_bytes / 1e6 / r['wall']:,.0f} MB/s, peak RSS jvm "
                    f"{r['jvm_mb']:,.0f} MB (heap {r['heap_mb']:,.0f}), workers "
                    f"{r['workers_mb']:,.0f} MB" for side, r in result.items())
            print(line, flush=True)
            lines.append(f"{case}: {line.strip()}")
        shutil.rmtree(root, ignore_errors=True)
    print("summary:")
    print("\n".join(f"  {line}" for line in lines))


if __name__ == "__main__":
    main()
