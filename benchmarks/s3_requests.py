"""S3 requests per micro-batch: what one batch's plan, task and commit send to the store.

    python benchmarks/s3_requests.py --batches 20 --rows 1000 [--server moto|seaweedfs|both]
        [--latency-ms 20]

Runs the protocol as Spark drives it (the driver plans from the log, one task writes, a
fresh committer commits from the task's report) against local S3 servers on 127.0.0.1
(moto, and SeaweedFS, a real server) through the recording proxy, without Spark, and prints
requests per batch by kind, one column per server: a batch that only appends, one that also
rolls a file, and a compaction batch; after the slash, the *sequential* requests (the
longest chain that ran one after another: the round trips the batch waited for). The counts
are the protocol's, so they should match; a server that answers differently (a retry, an
error) shows as a difference. ``benchmarks/store_commits.py`` measures the same through Spark,
against Spark's own sink.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers

from commit_protocol.commit.committer import Committer  # noqa: E402
from commit_protocol.records.config import RotationPolicy, SinkConfig  # noqa: E402
from commit_protocol.records.plan import WritePlan  # noqa: E402
from commit_protocol.storage import open_storage  # noqa: E402
from commit_protocol.task.task_writer import TaskWriter  # noqa: E402
from tests.support.faulty_proxy import FailingProxy, Sent, sequential  # noqa: E402
from tests.support.s3server import (  # noqa: E402
    DUMMY_CREDENTIALS,
    SERVERS,
    create_bucket,
    start_moto_server,
    start_seaweedfs_server,
)

STARTERS: dict[str, Callable[[], tuple[str, Callable[[], None]]]] = {
    "moto": start_moto_server, "seaweedfs": start_seaweedfs_server}


def one_batch(cfg: SinkConfig, batch_id: int, rows: int) -> None:
    storage = open_storage(cfg.path, cfg.fs_options)
    state = Committer(storage, cfg, "{}").latest_state()  # streamWriter() on the driver
    plan = WritePlan.from_state(state, storage.root_uri)
    batch = pa.record_batch({"id": pa.array(range(batch_id * rows, (batch_id + 1) * rows))})
    report = TaskWriter(open_storage(cfg.path, cfg.fs_options), cfg, plan, batch_id=batch_id,
                        partition=0, attempt=0, query_id="bench").write([batch])
    Committer(open_storage(cfg.path, cfg.fs_options), cfg, "{}").commit(batch_id, [report])


def batch_kind(batch_id: int) -> str:
    kind = ("compaction" if (batch_id + 1) % 10 == 0 else "") + \
        (" + roll" if (batch_id + 1) % 5 == 0 else "")
    return kind.strip(" +") or "append"


def count_requests(server: str, batches: int, rows: int,
                   latency_s: float) -> tuple[list[list[Sent]], float]:
    """The requests of each batch, against a fresh ``server``, and the batches' wall time
    in seconds."""
    endpoint, stop = STARTERS[server]()
    proxy = FailingProxy(endpoint, latency_s=latency_s)
    try:
        create_bucket(endpoint, "bench")
        cfg = SinkConfig(path="s3://bench/out", fs_options={"endpoint_url": proxy.endpoint},
                         rotation=RotationPolicy(max_batches=5, interval_ms=0,
                                                 inactivity_ms=0))
        sent = []
        started = time.monotonic()
        for batch_id in range(batches):
            before = len(proxy.requests)
            one_batch(cfg, batch_id, rows)
            sent.append(proxy.requests[before:])
        return sent, time.monotonic() - started
    finally:
        proxy.stop()
        stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--server", choices=(*SERVERS, "both"), default="both")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="delay every request by this much (S3 answers in 10-30 ms)")
    args = parser.parse_args()
    os.environ.update(DUMMY_CREDENTIALS)
    servers = SERVERS if args.server == "both" else (args.server,)
    results = {server: count_requests(server, args.batches, args.rows, args.latency_ms / 1000)
               for server in servers}
    print(f"{'batch':>5} {'kind':<18} " + " ".join(f"{s:>11}" for s in servers)
          + "  by operation")
    for batch_id in range(args.batches):
        batches = [results[s][0][batch_id] for s in servers]
        ops = [dict(sorted(Counter(r.operation for r in b).items())) for b in batches]
        shown = ops[0] if all(o == ops[0] for o in ops) else \
            "; ".join(f"{s}: {o}" for s, o in zip(servers, ops, strict=True))
        print(f"{batch_id:>5} {batch_kind(batch_id):<18} "
              + " ".join(f"{len(b):>6} / {sequential(b):<2}" for b in batches) + f"  {shown}")
    print(f"{'':>5} {'wall time, s':<18} "
          + " ".join(f"{results[s][1]:>9.1f}" for s in servers)
          + "  (through the proxy; moto serialises its requests)")


if __name__ == "__main__":
    main()
