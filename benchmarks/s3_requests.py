"""S3 requests per micro-batch: what one batch's plan, task and commit send to the store.

    python benchmarks/s3_requests.py --batches 20 --rows 1000

Runs the protocol as Spark drives it (the driver plans from the log, one task writes, a
fresh committer commits) against a local S3 server (moto on 127.0.0.1) through a counting
proxy, without Spark, and prints requests per batch by kind: a batch that only appends,
one that also rolls a file, and a compaction batch.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers

from commit_protocol.committer import Committer  # noqa: E402
from commit_protocol.config import RotationPolicy, SinkConfig  # noqa: E402
from commit_protocol.plan import WritePlan  # noqa: E402
from commit_protocol.storage import open_storage  # noqa: E402
from commit_protocol.task_writer import TaskWriter  # noqa: E402
from tests.support.s3faults import FailingProxy  # noqa: E402
from tests.support.s3server import start_moto_server  # noqa: E402


def one_batch(cfg: SinkConfig, batch_id: int, rows: int) -> None:
    storage = open_storage(cfg.path, cfg.fs_options)
    state = Committer(storage, cfg, "{}").latest_state()  # streamWriter() on the driver
    plan = WritePlan.from_state(state, storage.root_uri)
    batch = pa.record_batch({"id": pa.array(range(batch_id * rows, (batch_id + 1) * rows))})
    report = TaskWriter(open_storage(cfg.path, cfg.fs_options), cfg, plan, batch_id=batch_id,
                        partition=0, attempt=0, query_id="bench").write([batch])
    Committer(open_storage(cfg.path, cfg.fs_options), cfg, "{}").commit(batch_id, [report])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    endpoint, stop = start_moto_server()
    proxy = FailingProxy(endpoint)
    import s3fs

    s3fs.S3FileSystem(endpoint_url=endpoint).mkdir("bench")
    cfg = SinkConfig(path="s3://bench/out", fs_options={"endpoint_url": proxy.endpoint},
                     rotation=RotationPolicy(max_batches=5, interval_ms=0, inactivity_ms=0))
    print(f"{'batch':>5} {'kind':<22} {'requests':>8}  by method")
    for batch_id in range(args.batches):
        before = len(proxy.seen)
        one_batch(cfg, batch_id, args.rows)
        sent = proxy.seen[before:]
        kind = ("compaction" if (batch_id + 1) % 10 == 0 else "") + \
            (" + roll" if (batch_id + 1) % 5 == 0 else "")
        methods = Counter(r.split()[0] for r in sent)
        print(f"{batch_id:>5} {kind.strip(' +') or 'append':<22} {len(sent):>8}  "
              f"{dict(sorted(methods.items()))}")
    proxy.stop()
    stop()


if __name__ == "__main__":
    main()
