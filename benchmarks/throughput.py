"""Write throughput: rotsink against Spark's built-in file sink, same input, same session.

    python benchmarks/throughput.py --rows 2000000 --format parquet

Prints rows/s and MB/s (input bytes: the Parquet source's size) for both sinks and the
ratio of rotsink's wall time to the built-in sink's (lower is better; the first query of each
pair is a warm-up so both are measured warm).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def make_source(directory: Path, rows: int, files: int) -> int:
    directory.mkdir(parents=True)
    per_file = rows // files
    for f in range(files):
        ids = pa.array(range(f * per_file, (f + 1) * per_file), pa.int64())
        table = pa.table({"id": ids, "name": pa.compute.cast(ids, pa.string()),
                          "score": pa.compute.divide(pa.compute.cast(ids, pa.float64()), 7.0),
                          "grp": pa.compute.cast(pa.compute.bit_wise_and(ids, 7), pa.string())})
        pq.write_table(table, directory / f"src-{f:03d}.parquet")
    return sum(p.stat().st_size for p in directory.iterdir())


def run(spark, source: Path, out: Path, fmt: str, sink: str, batches: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    schema = spark.read.parquet(str(source)).schema
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger",
                                                max(1, len(list(source.iterdir())) // batches))
    df = df.parquet(str(source))
    writer = df.writeStream.option("checkpointLocation", str(out) + "-ck")
    writer = (writer.format("rotsink").option("format", fmt) if sink == "rotsink"
              else writer.format("json" if fmt == "jsonl" else fmt))
    started = time.perf_counter()
    writer.trigger(availableNow=True).start(str(out)).awaitTermination()
    elapsed = time.perf_counter() - started
    shutil.rmtree(str(out) + "-ck", ignore_errors=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--format", default="parquet", choices=["parquet", "jsonl", "csv"])
    parser.add_argument("--batches", type=int, default=2)
    args = parser.parse_args()
    from datasource.session import local_session

    root = Path(tempfile.mkdtemp(prefix="rotsink-bench-"))
    source_bytes = make_source(root / "src", args.rows, files=2 * args.batches)
    spark = local_session(app_name="rotsink-bench")
    spark.sparkContext.setLogLevel("ERROR")
    results = {}
    for sink in ("builtin", "rotsink"):
        run(spark, root / "src", root / f"warm-{sink}", args.format, sink, args.batches)
        results[sink] = run(spark, root / "src", root / sink, args.format, sink, args.batches)
        mb = source_bytes / 1e6
        print(f"{sink:>8} {args.format:>7}: {results[sink]:6.2f} s  "
              f"{args.rows / results[sink]:>12,.0f} rows/s  {mb / results[sink]:8.1f} MB/s (input)")
    print(f"ratio rotsink/builtin wall time: {results['rotsink'] / results['builtin']:.2f}x")
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
