"""Zombies and concurrency, interleaved deterministically (generators and hooks, no threads):
a task still writing after its batch was committed or aborted, two attempts of one task at
once, two queries committing to one path at once. Each leaves the committed output exact or
fails with a clear error."""

from __future__ import annotations

import time

import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.task import task_writer
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import ConcurrentWriterError
from commit_protocol.vocabulary.naming import partition_claim
from tests.unit.test_task_writer import (
    SCHEMA_JSON,
    commit,
    committed_ids,
    config,
    plan_for,
    rows,
    run_task,
    storage_of,
)


class _PausingHandle:
    def __init__(self, handle, before_write) -> None:
        self.handle, self.before_write = handle, before_write

    def write(self, data) -> int:
        if self.before_write is not None:
            pause, self.before_write = self.before_write, None
            pause()
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


class PausingStorage:
    """A storage whose first append pauses between opening the file and writing to it, and
    runs ``meanwhile``: a task preempted with its file descriptor open, as a zombie can be."""

    def __init__(self, inner, meanwhile) -> None:
        self.inner, self.meanwhile = inner, meanwhile

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def open_append(self, path: str, *, at: int | None = None):
        meanwhile, self.meanwhile = self.meanwhile, None
        return _PausingHandle(self.inner.open_append(path, at=at), meanwhile)


def test_zombie_holding_its_file_open_cannot_change_a_file_the_driver_rolls(tmp_path):
    """The committed attempt of batch 1 has no rows for the slot, so the commit rolls the
    slot's file by inactivity, while a zombie of batch 1 holds that file open. Publishing it
    in place would let the zombie's bytes into a finalized file; the commit's claim fences it."""
    cfg = config(tmp_path, rotation={"inactivity_ms": 1})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    plan = plan_for(tmp_path, cfg)
    committed_attempt = run_task(tmp_path, cfg, 1, [], attempt=1, plan=plan)
    result = []

    def commit_meanwhile() -> None:
        result.append(commit(tmp_path, cfg, 1, committed_attempt))

    zombie = TaskWriter(PausingStorage(storage_of(cfg), commit_meanwhile), cfg, plan,
                        batch_id=1, partition=0, attempt=0, query_id="q")
    zombie.write([rows(100, 2)])
    (rolled,) = result[0].finalized
    assert rolled.reason == "inactivity"
    assert (tmp_path / rolled.name).stat().st_size == rolled.size  # the zombie's bytes: not here
    assert committed_ids(tmp_path, cfg) == [0, 1, 2]
    commit(tmp_path, cfg, 2, run_task(tmp_path, cfg, 2, [rows(3, 2)]))
    assert committed_ids(tmp_path, cfg) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("committed", ["claim holder", "fenced copy"],
                         ids=["commit-the-attempt-appending-in-place",
                              "commit-the-attempt-writing-a-copy"])
def test_two_attempts_of_one_task_at_once(tmp_path, monkeypatch, committed):
    """Attempt 0 wins the claim and appends in place; attempt 1 runs whole while attempt 0 is
    between two batches. Whichever report Spark commits, the other's bytes stay invisible."""
    # every batch its own append, as batches of ROW_CHUNK_BYTES each would be
    monkeypatch.setattr(task_writer, "ROW_CHUNK_BYTES", 1)
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    plan = plan_for(tmp_path, cfg)
    reports = {}

    def attempt_0_batches():
        yield rows(3, 2)
        # the task writes on its pipeline's thread (commit_protocol.task.pipeline): attempt 0 has
        # resumed its file, and taken the claim, once that thread has its first rows
        deadline = time.monotonic() + 30
        while not storage_of(cfg).exists(partition_claim(1, 0)):
            assert time.monotonic() < deadline, "attempt 0 never took the claim"
            time.sleep(0.01)
        reports["fenced copy"] = run_task(tmp_path, cfg, 1, [rows(3, 2), rows(5, 2)],
                                          attempt=1, plan=plan)
        yield rows(5, 2)

    reports["claim holder"] = run_task(tmp_path, cfg, 1, attempt_0_batches(), plan=plan)
    (holder,), (copy,) = reports["claim holder"].files, reports["fenced copy"].files
    assert holder.fenced_from is None and copy.fenced_from == holder.temp
    commit(tmp_path, cfg, 1, reports[committed])
    assert committed_ids(tmp_path, cfg) == list(range(7))
    commit(tmp_path, cfg, 2, run_task(tmp_path, cfg, 2, [rows(7, 1)]))
    assert committed_ids(tmp_path, cfg) == list(range(8))


def test_task_writing_after_its_batch_was_aborted_changes_nothing(tmp_path):
    """The query stops: Spark aborts batch 1 without the running task's message, and the task
    keeps writing. The restarted query runs batch 1 again; the late bytes never appear."""
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    plan = plan_for(tmp_path, cfg)

    def late_task_batches():
        yield rows(3, 2)
        Committer(storage_of(cfg), cfg, SCHEMA_JSON).abort(1, [None])
        yield rows(100, 2)  # written after the abort

    late = run_task(tmp_path, cfg, 1, late_task_batches(), plan=plan)
    assert committed_ids(tmp_path, cfg) == [0, 1, 2]
    restarted = run_task(tmp_path, cfg, 1, [rows(3, 4)])
    assert restarted.files[0].fenced_from == late.files[0].temp  # the late task held the claim
    commit(tmp_path, cfg, 1, restarted)
    with open(tmp_path / late.files[0].temp, "ab") as f:
        f.write(b'{"id":999}\n')  # and it is still writing
    assert committed_ids(tmp_path, cfg) == list(range(7))


# Where query q1's commit of batch 0 is when query q2 (another checkpoint, same path)
# commits its own batch 0 in full, and who must win.
RACES = [
    ("driver.before_stage", "q2", "q2 publishes first; q1's renames then find q2's files"),
    ("driver.after_stage", "q1", "q2's recovery finishes q1's staged commit, then refuses q2"),
    ("driver.before_log_write", "q1", "q1 renamed its files; q2 finishes q1's commit"),
]


@pytest.mark.parametrize("point, winner, reason", RACES, ids=[r[0] for r in RACES])
def test_two_queries_committing_the_same_path_at_once(tmp_path, monkeypatch, point, winner,
                                                      reason):
    cfg = config(tmp_path, rotation={"max_batches": 1})
    batches = {"q1": rows(0, 3), "q2": rows(100, 3)}
    reports = {q: run_task(tmp_path, cfg, 0, [b], query_id=q) for q, b in batches.items()}
    errors: dict[str, str] = {}

    def commit_as(query: str) -> None:
        try:
            commit(tmp_path, cfg, 0, reports[query])
        except ConcurrentWriterError as e:
            errors[query] = str(e)

    real_hit = failpoints.hit
    raced = False

    def hit(name: str) -> None:
        nonlocal raced
        if name == point and "q2" not in errors and not raced:
            raced = True
            commit_as("q2")
        real_hit(name)

    monkeypatch.setattr(failpoints, "hit", hit)
    commit_as("q1")
    loser = "q2" if winner == "q1" else "q1"
    assert set(errors) == {loser}, reason
    assert f"by query {winner}" in errors[loser] or f"written by query {winner}" in errors[loser]
    assert committed_ids(tmp_path, cfg) == batches[winner].column(0).to_pylist()
