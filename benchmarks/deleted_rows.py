"""Reading a finished Parquet file whose rows another writer deleted in place, without Spark.

    python benchmarks/deleted_rows.py                 # 2,000,000 rows; 0, 0.1, 1 and 10% deleted
    python benchmarks/deleted_rows.py --rows 200000 --shares 0,10 --repeats 1

rotsink's reader leaves out the rows a Delta deletion vector or an Iceberg position delete
removes (``commit_protocol/tables/row_deletes.py``): each read task drops those positions from
the row groups it decodes (``commit_protocol/reading/bulk.py``). This measures that path,
``commit_protocol.reading.read_batches`` (what each task of ``spark.read.format("rotsink")``
runs) over one file with ``--shares`` percent of its rows deleted at random positions, against
its floor, pyarrow reading the same row groups and filtering them with a mask numpy makes of
the positions (``pq.ParquetFile.iter_batches``, ``np.searchsorted``, ``RecordBatch.filter``),
and against rotsink's reader of the
file with nothing deleted. The rows: id long, a string of 1,024 distinct values, a double.

Every measurement runs in a fresh Python process; its peak memory is the process's ``VmHWM``
after the read minus its resident set just before (Linux only). Prints rows/s, MB/s (of the
file), peak memory and the ratios, medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import own_memory_mb, reset_own_peak  # noqa: E402

ROW_GROUP_ROWS = 250_000


def write_file(path: Path, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "name": pa.array([f"name-{i % 1024}" for i in range(rows)]),
                      "score": pa.array([i * 0.5 for i in range(rows)], pa.float64())})
    pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS, compression="snappy")


def deleted_positions(rows: int, share: float, seed: int = 7) -> list[int]:
    return sorted(random.Random(seed).sample(range(rows), int(rows * share / 100)))


def measure(case: str, path: str, rows: int, share: float) -> dict:
    """One read in this (fresh) process: seconds, rows returned, peak MB above the start."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from commit_protocol.reading import CommittedFile, ReadLayout, read_batches
    from commit_protocol.reading.files import packed
    from commit_protocol.storage import open_storage

    deleted = deleted_positions(rows, share)
    file = Path(path)
    layout = ReadLayout("parquet", "snappy", False, ())
    schema = pq.read_schema(file)
    storage = open_storage(str(file.parent))
    reset_own_peak()
    before = own_memory_mb()["rss"]
    started = time.perf_counter()
    returned = 0
    if case == "pyarrow":  # the floor: pyarrow decodes, numpy masks the positions out
        import numpy as np

        gone = np.array(deleted, dtype=np.int64)
        offset = 0
        for batch in pq.ParquetFile(file).iter_batches(batch_size=65_536):
            end = offset + batch.num_rows
            local = gone[np.searchsorted(gone, offset):np.searchsorted(gone, end)] - offset
            keep = np.ones(batch.num_rows, dtype=bool)
            keep[local] = False
            offset = end
            returned += batch.filter(pa.array(keep)).num_rows
    else:
        f = CommittedFile(file.name, file.stat().st_size, "", False,
                          deleted=packed(deleted) if case == "rotsink" else b"")
        for batch in read_batches(storage, f, state=layout, schema=schema):
            returned += batch.num_rows
    seconds = time.perf_counter() - started
    peak = own_memory_mb()["hwm"] - before
    return {"seconds": seconds, "rows": returned, "peak_mb": peak}


def run_case(case: str, path: Path, rows: int, share: float) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", case, str(path), str(rows),
                          str(share)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--shares", default="0,0.1,1,10", help="percent of rows deleted")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        case, path, rows, share = args.measure
        print(json.dumps(measure(case, path, int(rows), float(share))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "part-0.parquet"
        write_file(path, args.rows)
        mb = path.stat().st_size / 1e6
        print(f"{args.rows:,} rows, {mb:.1f} MB, row groups of {ROW_GROUP_ROWS:,} rows; "
              f"medians of {args.repeats}")
        plain = statistics.median(run_case("plain", path, args.rows, 0)["seconds"]
                                  for _ in range(args.repeats))
        print(f"nothing deleted: {plain:.3f} s, {args.rows / plain:,.0f} rows/s, "
              f"{mb / plain:.1f} MB/s")
        print("| deleted | rotsink s | rows/s | MB/s | peak MB | floor s | floor peak MB | "
              "rotsink/floor | rotsink/nothing deleted |")
        print("|---|---|---|---|---|---|---|---|---|")
        for share in (float(s) for s in args.shares.split(",")):
            ours = [run_case("rotsink", path, args.rows, share) for _ in range(args.repeats)]
            floor = [run_case("pyarrow", path, args.rows, share) for _ in range(args.repeats)]
            expected = args.rows - len(deleted_positions(args.rows, share))
            assert all(r["rows"] == expected for r in ours + floor), (ours, floor)
            s = statistics.median(r["seconds"] for r in ours)
            f = statistics.median(r["seconds"] for r in floor)
            print(f"| {share:g}% | {s:.3f} | {args.rows / s:,.0f} | {mb / s:.1f} | "
                  f"{statistics.median(r['peak_mb'] for r in ours):.1f} | {f:.3f} | "
                  f"{statistics.median(r['peak_mb'] for r in floor):.1f} | {s / f:.2f}x | "
                  f"{s / plain:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
