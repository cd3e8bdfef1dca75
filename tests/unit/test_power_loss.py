"""Power loss on a local disk: the commit protocol under the model of ``tests/support/power_loss``.

A micro-batch (two tasks, then the driver's commit) runs on a storage that cuts the power at
its k-th operation, for every k the batch has; the disk then holds only what was made durable
(and, per directory and file, maybe more), a restarted query replays the batches Spark had not
recorded as done, and every committed row must be there exactly once, the log must not have
lost a batch whose commit returned, and ``rotsink verify --deep`` must find nothing wrong.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.commit.committer import Committer
from commit_protocol.log import open_committed
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import TaskReport
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import LocalStorage, Storage
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary.naming import INTENT_DIR
from tests.support.power_loss import (
    Keep,
    PowerCut,
    PowerLossStorage,
    keep_at_random,
    keep_everything,
    keep_nothing,
)
from tests.unit.test_task_writer import SCHEMA_JSON, config

TASKS, ROWS_PER_TASK = 2, 10
ROWS_PER_BATCH = TASKS * ROWS_PER_TASK


def workload(path: Path, **kw) -> SinkConfig:
    """Rolls in tasks (maxRecords) and on the driver (maxBatches), a compaction every three
    batches, partition markers: every step of the commit has something to do."""
    return config(path, partition_by=("g",), compact_interval=3, partition_commit_delay_ms=0,
                  rotation={"max_records": 7, "max_batches": 2}, **kw)


def rows_of(batch: int, task: int) -> pa.RecordBatch:
    first = batch * ROWS_PER_BATCH + task * ROWS_PER_TASK
    ids = list(range(first, first + ROWS_PER_TASK))
    return pa.record_batch({"id": pa.array(ids, pa.int64()),
                            "g": ["a" if i % 3 else "b" for i in ids]})


def committed_ids(root: Path) -> list[int]:
    """Every committed row's id, finalized and in progress, as rotsink's reader reads them."""
    from commit_protocol.reading import committed_files, read_batches

    storage = LocalStorage(str(root))
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    schema = pa.schema([("id", pa.int64()), ("g", pa.string())])
    return sorted(i for f in committed_files(log, latest, state, include_in_progress=True)
                  for batch in read_batches(storage, f, state=state, schema=schema)
                  for i in batch.column("id").to_pylist())


@dataclass
class Query:
    """The query's side of a run: the batch Spark last recorded as done (its commit log is
    written after the sink's commit returns, so a batch is never replayed after that)."""

    cfg: SinkConfig
    done: int = -1

    def run(self, storage: Storage, until: int) -> None:
        for batch in range(self.done + 1, until + 1):
            plan = WritePlan.from_state(Committer(storage, self.cfg, SCHEMA_JSON).latest_state(),
                                        storage.root_uri)
            reports: list[TaskReport | None] = [
                TaskWriter(storage, self.cfg, plan, batch_id=batch, partition=task, attempt=0,
                           query_id="q").write([rows_of(batch, task)])
                for task in range(TASKS)]
            Committer(storage, self.cfg, SCHEMA_JSON).commit(batch, reports,
                                                             now_ms=batch * 1000)
            self.done = batch


def cut_and_recover(root: Path, query: Query, until: int, cut_at: int | None,
                    keep: Keep) -> PowerCut | None:
    """Run ``query`` on ``root`` until batch ``until`` or the cut; then replace ``root`` with
    what its disk holds after the cut (the log names files by absolute URI: the restarted
    query finds the disk where it left it)."""
    storage = PowerLossStorage(str(root), cut_at=cut_at)
    cut = None
    try:
        query.run(storage, until)
    except PowerCut as e:
        cut = e
    after = root.with_name(root.name + ".after")
    storage.image(after, keep)
    storage.close()
    shutil.rmtree(root)
    after.rename(root)
    return cut


def check(root: Path, query: Query, until: int) -> None:
    """After the loss: the log has every batch whose commit returned, ``verify`` finds
    nothing wrong; after the restart, every row of batches ``0..until`` is read once."""
    storage = LocalStorage(str(root))
    committed = open_committed(storage)
    latest = -1 if committed is None else committed[1]
    assert latest >= query.done, \
        f"batch {query.done}'s commit returned, but the log ends at batch {latest}"
    found = verify_output(storage, deep=True, commit_timeout_s=0)  # the machine died
    # a commit decided but cut short is the only thing to report: the restart finishes it
    damage = [p for p in found.problems if not p.startswith(f"{INTENT_DIR}/")]
    assert not damage, damage
    query.run(storage, until)
    assert committed_ids(root) == list(range((until + 1) * ROWS_PER_BATCH))
    found = verify_output(storage, deep=True)
    assert found.ok, found.problems


def operations_of_one_batch(root: Path, warm: Path) -> int:
    shutil.copytree(warm, root)
    storage = PowerLossStorage(str(root))
    Query(workload(root), done=2).run(storage, 3)
    storage.close()
    shutil.rmtree(root)
    return storage.operations


@pytest.fixture
def warm(tmp_path) -> tuple[Path, Path]:
    """``(root, saved)``: a path with three committed batches (one of them a compaction)
    written at ``root`` and kept at ``saved``, to be put back at ``root`` before each run."""
    root, saved = tmp_path / "out", tmp_path / "saved"
    Query(workload(root)).run(LocalStorage(str(root)), 2)
    root.rename(saved)
    return root, saved


KEEPS = {"nothing": keep_nothing, "everything": keep_everything,
         **{f"random{seed}": keep_at_random(seed) for seed in range(3)}}


@pytest.mark.parametrize("keep", sorted(KEEPS))
def test_a_power_cut_at_every_operation_of_a_micro_batch_loses_nothing(warm, keep):
    root, saved = warm
    operations = operations_of_one_batch(root, saved)
    assert operations > 20  # tasks' appends and syncs, the intent, renames, markers, the log
    for cut_at in range(1, operations + 2):
        shutil.copytree(saved, root)
        query = Query(workload(root), done=2)
        cut = cut_and_recover(root, query, 3, cut_at, KEEPS[keep])
        assert (cut is None) == (cut_at > operations)
        check(root, query, until=5)
        shutil.rmtree(root)


@pytest.mark.parametrize("seed", range(4))
def test_power_cuts_at_random_points_of_a_long_run(tmp_path, seed):
    """Power losses at random operations over twenty micro-batches (about four batches
    apart), each recovered from the disk the one before left."""
    rng = random.Random(seed)
    root = tmp_path / "out"
    query = Query(workload(root))
    cuts = 0
    while query.done < 19:
        cut = cut_and_recover(root, query, 19, rng.randrange(1, 150),
                              keep_at_random(rng.randrange(1 << 30)))
        cuts += cut is not None
        check(root, query, until=min(query.done + 1, 19))
    assert cuts >= 3
    assert committed_ids(root) == list(range(20 * ROWS_PER_BATCH))


def test_without_fsync_a_power_cut_loses_committed_batches(warm):
    """``commit.fsync=false`` trades durability away, and the model sees it: the cut after
    a micro-batch's commit returned takes that batch's log file back."""
    root, saved = warm
    shutil.copytree(saved, root)
    query = Query(workload(root, fsync=False), done=2)
    assert cut_and_recover(root, query, 3, None, keep_nothing) is None and query.done == 3
    committed = open_committed(LocalStorage(str(root)))
    assert committed is not None and committed[1] == 2  # batch 3 returned, and is gone
