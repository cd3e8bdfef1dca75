"""Stores that fail requests: what faults cost, who retried them, and 0 lost, 0 duplicated.

    python benchmarks/store_faults.py --batches 300 --share 0.05 [--stores s3,gcs,azure]
        [--tables plain,table] [--seed 7]

For each store (SeaweedFS for S3, fake-gcs-server, Azurite, on 127.0.0.1) and each output
(JSON lines, or Parquet with a table: Delta on S3 and Azure, Iceberg on Cloud Storage), two
runs of ``--batches`` micro-batches driven as Spark drives them, without Spark
(``tests/support/fault_run.py``): one through a proxy that forwards every request, one through
the same proxy failing ``--share`` of them at random, on every kind of request, with
``tests/support/faulty_proxy.py``'s ``FAULTS`` (500, 503, 429 on Cloud Storage only, a reset
before or after the store did the request, a slow answer, an outage longer than the clients
retry). An error that reaches rotsink aborts its batch, which is replayed, as Spark does.

Prints per run: micro-batches a second, the requests the store answered, the faults injected
by request kind and fault, how many reached rotsink (the rest the clients retried away: each
store's own client, and delta-rs's and pyiceberg's), the time ratio to the run without faults,
the peak memory of this process, and what the check found from outside afterwards: lost and
duplicated rows, the table against the finalized files, ``verify``. The anchor is the same
run without faults: no Spark sink runs under injected faults, so the ratio says what the faults
cost, not what rotsink costs (``benchmarks/store_commits.py`` compares with Spark's sink).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import own_memory_mb  # noqa: E402

from tests.support.fault_run import STORES, FaultOutcome, run_with_faults  # noqa: E402

SERVERS = {"s3": "tests.support.s3server:start_seaweedfs_server",
           "gcs": "tests.support.gcsserver:start_fake_gcs",
           "azure": "tests.support.azurite:start_azurite"}


def start(store: str):
    import importlib

    module, name = SERVERS[store].split(":")
    return getattr(importlib.import_module(module), name)()


def by_kind(injected: Counter) -> str:
    """``PUT 12 (503 4, reset 3, ...)``, one entry a request kind, most faults first."""
    kinds: Counter = Counter()
    for (operation, _), n in injected.items():
        kinds[operation] += n
    return "; ".join(
        f"{op} {n} (" + ", ".join(f"{fault} {m}" for (o, fault), m in
                                   sorted(injected.items(), key=lambda i: -i[1]) if o == op)
        + ")" for op, n in kinds.most_common())


def report(clean: FaultOutcome, faulty: FaultOutcome) -> str:
    rate = faulty.batches / faulty.seconds
    return "\n".join([
        faulty.line(),
        f"  {rate:.2f} batches/s with faults, {clean.batches / clean.seconds:.2f} without: "
        f"{faulty.seconds / clean.seconds:.2f}x the time; peak memory "
        f"{own_memory_mb()['hwm']:.0f} MB",
        f"  faults by request: {by_kind(faulty.injected)}",
        *[f"  reached rotsink: {kind}: {text[:300]}" for kind, text in faulty.examples.items()],
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--share", type=float, default=0.05)
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--tables", default="plain,table")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1",  # the loopback servers' dummies
                       "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"})
    exact = True
    for store in args.stores.split(","):
        endpoint, stop = start(store)
        try:
            for kind in args.tables.split(","):
                runs = [run_with_faults(store, endpoint, Path(tempfile.mkdtemp()),
                                        table=kind == "table", batches=args.batches,
                                        share=share, seed=args.seed)
                        for share in (0.0, args.share)]
                print(report(*runs), flush=True)
                exact = exact and all(run.exact for run in runs)
        finally:
            stop()
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
