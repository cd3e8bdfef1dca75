"""What ``errors.mode=quarantine`` costs: a query with no bad row, and with some.

    python benchmarks/quarantine.py                 # 2,000,000 rows, 3 repeats
    python benchmarks/quarantine.py --rows 500000 --repeats 5 --bad 0,0.1,1

Input: Parquet files of one string column (``v<id>-<padding>``, about 40 bytes), read as a
stream of ``--batches`` micro-batches (``availableNow``); a cell with ``bad`` = 1 (percent)
gives that share of the values a line break, which ``format text`` refuses. In one session,
in alternation, ``--repeats`` times after a warm-up each:

- ``builtin``: Spark's own text sink (the anchor; it writes the line breaks as they are);
- ``floor``: the do-nothing Python stream writer (``benchmarks/floors.py``);
- ``fail``: rotsink, ``format text``, ``errors.mode=fail`` (input without bad values only:
  that mode fails the batch on the first one);
- ``quarantine``: rotsink, ``format text``, ``errors.mode=quarantine``, at each share of bad
  values, files finished at each batch (``rotation.maxBatches=1``) for every rotsink side.

Prints the median wall time, rows/s, MB/s (input bytes), peak resident memory of the JVM and
the Python workers, and each side over the built-in sink, the floor and ``fail``: the price of
the mode on a clean stream (quarantine at 0% over fail), and of keeping bad rows aside.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floors  # noqa: E402
from common import peak_memory_mb, quiet_session, reset_peak_memory  # noqa: E402


def make_source(directory: Path, rows: int, files: int, bad_percent: float) -> int:
    """``files`` Parquet files of ``rows`` values, ``bad_percent`` of them with a line break
    (every ``100 / bad_percent``-th); returns their size in bytes."""
    directory.mkdir(parents=True)
    every = round(100 / bad_percent) if bad_percent else 0
    per_file = rows // files
    for f in range(files):
        ids = pa.array(range(f * per_file, (f + 1) * per_file), pa.int64())
        values = pc.binary_join_element_wise("v", pc.cast(ids, pa.string()),
                                             "-padding-to-forty-bytes-of-text", "")
        if every:
            # ids % every == 0 (no remainder kernel before pyarrow 26; divide truncates)
            bad = pc.equal(pc.subtract(ids, pc.multiply(pc.divide(ids, every), every)), 0)
            values = pc.if_else(bad, pc.binary_join_element_wise(values, "\nsecond", ""), values)
        pq.write_table(pa.table({"value": values}), directory / f"src-{f:03d}.parquet")
    return sum(p.stat().st_size for p in directory.iterdir())


def run(spark, source: Path, out: Path, side: str, batches: int) -> dict:
    """One availableNow query of ``side``; its wall time and peak memory."""
    shutil.rmtree(out, ignore_errors=True)
    files = len(list(source.iterdir()))
    df = (spark.readStream.schema("value STRING")
          .option("maxFilesPerTrigger", max(1, files // batches)).parquet(str(source)))
    writer = df.writeStream.option("checkpointLocation", f"{out}-ck")
    if side == "builtin":
        writer = writer.format("text")
    elif side == "floor":
        writer = writer.format("floor")
    else:
        writer = (writer.format("rotsink").option("format", "text")
                  .option("rotation.maxBatches", "1").option("errors.mode", side))
    reset_peak_memory(spark)
    started = time.perf_counter()
    writer.trigger(availableNow=True).start(str(out)).awaitTermination()
    wall = time.perf_counter() - started
    memory = peak_memory_mb(spark)
    quarantined = 0
    if side == "quarantine" and (out / "_quarantine").exists():
        quarantined = spark.read.json(str(out / "_quarantine")).count()
    shutil.rmtree(f"{out}-ck", ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return {"wall": wall, "jvm_mb": memory["jvm"], "workers_mb": memory["workers"],
            "quarantined": quarantined}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bad", default="0,0.1,1", help="shares of bad values, in percent")
    args = parser.parse_args()
    spark = quiet_session("rotsink-quarantine-benchmark")
    floors.register(spark)
    root = Path(tempfile.mkdtemp(prefix="rotsink-quarantine-"))
    try:
        for bad in (float(b) for b in args.bad.split(",")):
            source = root / f"src-{bad}"
            size = make_source(source, args.rows, args.files, bad)
            sides = ["builtin", "floor", "quarantine"] + (["fail"] if not bad else [])
            runs: dict[str, list[dict]] = {side: [] for side in sides}
            for repeat in range(args.repeats + 1):  # the first round warms up
                for side in sides:
                    result = run(spark, source, root / "out", side, args.batches)
                    if repeat:
                        runs[side].append(result)
            print(f"\n{bad}% of {args.rows:,} values with a line break ({size / 1e6:.1f} MB of "
                  f"Parquet, {args.batches} batches, medians of {args.repeats}):", flush=True)
            wall = {s: statistics.median(r["wall"] for r in rs) for s, rs in runs.items()}
            for side, rs in runs.items():
                kept = f", {rs[-1]['quarantined']:,} quarantined" if side == "quarantine" else ""
                print(f"  {side:<11} {wall[side]:6.2f} s {args.rows / wall[side]:>11,.0f} rows/s "
                      f"{size / 1e6 / wall[side]:6.1f} MB/s  peak RSS jvm "
                      f"{max(r['jvm_mb'] for r in rs):,.0f} MB, python workers "
                      f"{max(r['workers_mb'] for r in rs):,.0f} MB{kept}", flush=True)
            for side in ("quarantine", "fail"):
                if side in wall:
                    print(f"  {side}/built-in {wall[side] / wall['builtin']:.2f}x, "
                          f"{side}/floor {wall[side] / wall['floor']:.2f}x"
                          + (f", quarantine/fail {wall['quarantine'] / wall['fail']:.2f}x"
                             if side == "fail" else ""), flush=True)
            shutil.rmtree(source)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
