"""A driver that commits micro-batches back to back, for ``rotsink verify`` to run beside.

    python -m tests.support.committing_driver OUT BATCHES [JITTER_MS] [TABLE_FORMAT]

Each batch is what Spark drives (the plan read on the driver, one task writing rows into four
partition directories, the commit) through rotsink's own ``TaskWriter`` and ``Committer``;
files roll every other batch and the log compacts every third, with clean-up at once
(``log.cleanupDelay 0``), so every kind of commit step happens all the time. Each step of a
commit is slowed by up to ``JITTER_MS`` (default 20), as a loaded machine or an object store
slows it, which widens the window between an intent and its log file. With
``TABLE_FORMAT`` (``delta``) the files are Parquet and a table follows the log.

The failpoints of ``ROTSINK_FAILPOINTS`` apply (``driver.after_stage=kill`` leaves a really
dead driver's intent). Prints ``COMMITTED <batch>`` after each batch.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import replace

import pyarrow as pa

from commit_protocol.commit.committer import Committer
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import LocalStorage
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary import failpoints

SCHEMA_JSON = ('{"type":"struct","fields":['
               '{"name":"id","type":"long","nullable":true,"metadata":{}},'
               '{"name":"grp","type":"string","nullable":true,"metadata":{}}]}')
ROWS = 40


def config(out: str, table_format: str | None = None) -> SinkConfig:
    plain = SinkConfig(path=out, partition_by=("grp",), compact_interval=3, cleanup_delay_ms=0,
                       rotation=RotationPolicy(max_batches=2, interval_ms=0, inactivity_ms=0))
    if table_format is None:
        return plain
    return replace(plain, format="parquet", compression="snappy", file_suffix=".parquet",
                   table_format=table_format)


def commit_one(cfg: SinkConfig, batch_id: int) -> None:
    storage = LocalStorage(cfg.path)
    plan = WritePlan.from_state(Committer(storage, cfg, SCHEMA_JSON).latest_state(),
                                storage.root_uri)
    ids = range(batch_id * ROWS, (batch_id + 1) * ROWS)
    rows = pa.record_batch({"id": pa.array(ids, pa.int64()),
                            "grp": pa.array([f"g{i % 4}" for i in ids])})
    report = TaskWriter(storage, cfg, plan, batch_id=batch_id, partition=0, attempt=0,
                        query_id="q").write([rows])
    Committer(storage, cfg, SCHEMA_JSON).commit(batch_id, [report])


def main(out: str, batches: str, jitter_ms: str = "20", table_format: str = "") -> int:
    cfg = config(out, table_format or None)
    latest = Committer(LocalStorage(out), cfg, SCHEMA_JSON).recover()
    jitter = int(jitter_ms) / 1000
    real_hit = failpoints.hit

    def slowed(name: str) -> None:
        if name.startswith("driver."):
            time.sleep(random.random() * jitter)
        real_hit(name)

    failpoints.hit = slowed  # type: ignore[assignment]  # the harness's own process only
    first = 0 if latest is None else latest + 1
    for batch_id in range(first, first + int(batches)):
        commit_one(cfg, batch_id)
        print(f"COMMITTED {batch_id}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
