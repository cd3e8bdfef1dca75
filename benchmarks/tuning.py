"""The settings that keep a Python sink's Arrow path at its best (README, Tuning).

    python benchmarks/tuning.py                       # Parquet, 6M rows, every setting below
    python benchmarks/tuning.py --rows 3000000 --format jsonl --repeats 3

Each setting is one run of ``benchmarks/throughput.py`` (warm cell: the built-in sink, the
floor and rotsink, interleaved, medians, without Spark's Arrow size check as rotsink's
queries run) in a fresh JVM, since the driver's memory is fixed
when the JVM starts. Local mode runs the executors in the driver's JVM, so
``spark.driver.memory`` is the executors' heap too. Prints, per setting, each side's median
wall time with its spread and rotsink's ratios; what to conclude is in the README.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# name -> the --conf settings of its run (and its micro-batch count)
SETTINGS: dict[str, tuple[tuple[str, ...], int]] = {
    "driver memory 1g (Spark's default)": (("spark.driver.memory=1g",), 2),
    "driver memory 2g (rotsink's local_session)": (("spark.driver.memory=2g",), 2),
    "driver memory 4g": (("spark.driver.memory=4g",), 2),
    "4g, Arrow batches of 50,000 rows": (("spark.driver.memory=4g",
                                          "spark.sql.execution.arrow.maxRecordsPerBatch=50000"),
                                         2),
    "4g, 8 micro-batches instead of 2": (("spark.driver.memory=4g",), 8),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=6_000_000)
    parser.add_argument("--format", default="parquet")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", help="run only settings whose name contains this")
    args = parser.parse_args()
    rows: list[str] = []
    for name, (conf, batches) in SETTINGS.items():
        if args.only and args.only not in name:
            continue
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [sys.executable, str(HERE / "throughput.py"), "--rows", str(args.rows),
                       "--formats", args.format, "--variants", "plain", "--no-cold",
                       "--repeats", str(args.repeats), "--batches", str(batches),
                       "--arrow-size-check", "off", "--json", out.name,
                       *(f"--conf={c}" for c in conf)]
            print(f"== {name}: {' '.join(command[2:])}", flush=True)
            done = subprocess.run(command, text=True, capture_output=True)
            print(done.stdout, flush=True)
            if done.returncode:
                print(done.stderr[-2000:], flush=True)
                rows.append(f"  {name:<44} failed")
                continue
            cell = json.loads(Path(out.name).read_text())[
                f"{args.format} plain warm, size check off"]
        wall = {side: cell[side] for side in ("builtin", "floor", "rotsink")}
        rows.append(f"  {name:<44} " + ", ".join(
            f"{side} {r['wall']:.2f} s ({r['wall_min']:.2f}-{r['wall_max']:.2f})"
            for side, r in wall.items())
            + f"; rotsink/floor {wall['rotsink']['wall'] / wall['floor']['wall']:.2f}x, "
              f"rotsink/built-in {wall['rotsink']['wall'] / wall['builtin']['wall']:.2f}x")
    print(f"summary, {args.rows:,} rows of {args.format}, warm medians of {args.repeats} "
          "(min-max):")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
