"""Cost of compression and encryption: each codec, with and without encryption, against
writing the same rows uncompressed, in one run, on the executor path without Spark.

    python benchmarks/filters.py --rows 1000000 --format jsonl

Each case runs a real task (Arrow batches -> encode -> compress -> seal -> append) and the
driver's commit, as a micro-batch would. MB/s counts the *uncompressed* encoded bytes (the
same for every case), so the numbers compare directly; "ratio" is the case's wall time over
the uncompressed, unencrypted case's (lower is better); "size" is the bytes on disk.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.commit.committer import Committer
from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.formats import encode_rows
from commit_protocol.formats.codecs import ROW_CODEC_SUFFIX
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import LocalStorage
from commit_protocol.task.task_writer import TaskWriter

BATCH_ROWS = 65_536


def make_batches(rows: int) -> list[pa.RecordBatch]:
    ids = pa.array(range(rows), pa.int64())
    table = pa.table({"id": ids, "name": pc.cast(ids, pa.string()),
                      "score": pc.divide(pc.cast(ids, pa.float64()), 7.0),
                      "grp": pc.cast(pc.bit_wise_and(ids, 7), pa.string())})
    return table.to_batches(max_chunksize=BATCH_ROWS)


def run_case(root: Path, batches: list[pa.RecordBatch], fmt: str, codec: str,
             keys: KeyRefs | None) -> tuple[float, int]:
    """Seconds for one task plus its commit, and the bytes written."""
    shutil.rmtree(root, ignore_errors=True)
    storage = LocalStorage(str(root))
    config = SinkConfig(path=str(root), format=fmt, compression=codec, keys=keys,
                        rotation=RotationPolicy(max_bytes=1 << 40, max_batches=1))
    committer = Committer(storage, config, '{"type":"struct","fields":[]}')
    started = time.perf_counter()
    writer = TaskWriter(storage, config, WritePlan(latest_batch_id=None, root_uri=storage.root_uri),
                        batch_id=0, partition=0, attempt=0, query_id="bench")
    committer.commit(0, [writer.write(batches)])
    elapsed = time.perf_counter() - started
    written = sum(p.stat().st_size for p in root.glob("part-*"))
    return elapsed, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--format", default="jsonl", choices=["jsonl", "csv"])
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per case")
    args = parser.parse_args()
    os.environ["ROTSINK_BENCH_KEY"] = base64.b64encode(os.urandom(32)).decode()
    batches = make_batches(args.rows)
    plain_bytes = sum(len(encode_rows(args.format, b, with_header=False)) for b in batches)
    root = Path(tempfile.mkdtemp(prefix="rotsink-bench-filters-"))
    baseline = None
    print(f"{args.rows:,} rows, {plain_bytes / 1e6:.1f} MB of {args.format} before compression")
    for encrypted in (False, True):
        keys = KeyRefs("env:ROTSINK_BENCH_KEY") if encrypted else None
        for codec in ROW_CODEC_SUFFIX:
            runs = [run_case(root / "out", batches, args.format, codec, keys)
                    for _ in range(args.repeat)]
            seconds, size = min(r[0] for r in runs), runs[0][1]
            baseline = baseline or seconds
            label = f"{codec}{' + aes-gcm' if encrypted else ''}"
            print(f"{label:>16}: {seconds:6.2f} s {args.rows / seconds:>12,.0f} rows/s "
                  f"{plain_bytes / 1e6 / seconds:8.1f} MB/s  size {size / 1e6:7.1f} MB  "
                  f"ratio {seconds / baseline:5.2f}x")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
