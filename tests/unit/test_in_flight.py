"""A commit in flight against ``rotsink verify`` and ``--repair``: a live driver's commit is
never reported as a dead one's, and a repair that finishes a commit its driver then finishes
too (a driver stuck past the timeout) leaves exactly one committed batch."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.storage import LocalStorage
from commit_protocol.vocabulary import failpoints
from tests.unit.test_task_writer import (
    SCHEMA_JSON,
    commit,
    config,
    rows,
    run_task,
    storage_of,
)

GROUPS = ["a", "b", "c", "d"]
ROOT = Path(__file__).parents[2]


def batch_rows(batch_id: int) -> pa.RecordBatch:
    ids = range(batch_id * 8, (batch_id + 1) * 8)
    return rows(batch_id * 8, 8, grp=pa.array([GROUPS[i % 4] for i in ids]))


def committed_ids(cfg) -> list[int]:
    """Every committed row's id, read as rotsink's reader reads it."""
    from commit_protocol.reading import committed_files, open_committed, read_batches

    storage = storage_of(cfg)
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    schema = pa.schema([("id", pa.int64()), ("grp", pa.string())])
    return sorted(i for f in committed_files(log, latest, state, include_in_progress=True)
                  for batch in read_batches(storage, f, state=state, schema=schema)
                  for i in batch.column("id").to_pylist())


@pytest.fixture(params=["local", "memory", "s3"])
def output(request, tmp_path):
    """A config for an output path on each kind of storage (S3: the local moto server)."""
    options = {"partition_by": ("grp",), "rotation": {"max_batches": 1}}
    if request.param == "local":
        return config(tmp_path, **options)
    if request.param == "memory":
        return config(tmp_path, path=f"memory://in-flight-{tmp_path.name}", **options)
    endpoint, bucket = (request.getfixturevalue(f) for f in ("s3_endpoint", "s3_bucket"))
    return config(tmp_path, path=f"s3://{bucket}/in-flight-{tmp_path.name}",
                  fs_options={"endpoint_url": endpoint}, **options)


@pytest.mark.parametrize("seed", range(6))
def test_a_repair_racing_a_stuck_driver_leaves_one_commit(tmp_path, monkeypatch, output, seed):
    """The driver stages batch 1's intent and stalls; ``verify --repair`` (timeout 0: the
    driver looks dead) finishes the commit while the driver wakes and finishes it too, both
    interleaved at random at every step. Neither fails; every row is committed once."""
    cfg = output
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [batch_rows(0)]))
    report = run_task(tmp_path, cfg, 1, [batch_rows(1)])
    staged, rng = threading.Event(), random.Random(seed)
    real_hit = failpoints.hit

    def interleaved(name: str) -> None:
        if name == "driver.after_stage" and threading.current_thread().name == "driver":
            staged.set()
        time.sleep(rng.random() * 0.004)  # each step of each finisher, shuffled
        real_hit(name)

    monkeypatch.setattr(failpoints, "hit", interleaved)
    errors: list[BaseException] = []
    results: dict[str, object] = {}

    def driver() -> None:
        try:
            results["driver"] = commit(tmp_path, cfg, 1, report)
        except BaseException as e:  # noqa: B036 -- reported by the assertion below
            errors.append(e)

    thread = threading.Thread(target=driver, name="driver")
    thread.start()
    assert staged.wait(30)
    repaired = verify_output(storage_of(cfg), repair=True, commit_timeout_s=0)
    thread.join(30)
    assert not errors, errors
    assert repaired.ok, repaired.problems
    assert repaired.latest == 1 and repaired.repaired in ([1], [])  # the driver may win
    assert committed_ids(cfg) == list(range(16))
    assert verify_output(storage_of(cfg)).ok


def test_recover_finishes_only_the_batches_it_is_given(tmp_path, monkeypatch):
    """``--repair`` names the stalled batches: a newer intent (a live driver's next commit,
    staged after the check) is left to its driver."""
    from commit_protocol.commit.committer import Committer

    cfg = config(tmp_path, rotation={"max_batches": 1})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 2)]))
    report = run_task(tmp_path, cfg, 1, [rows(2, 2)])
    monkeypatch.setenv(failpoints.ENV_VAR, "driver.after_stage=raise")
    with pytest.raises(failpoints.FailpointError):
        commit(tmp_path, cfg, 1, report)
    monkeypatch.delenv(failpoints.ENV_VAR)
    committer = Committer(storage_of(cfg), cfg, SCHEMA_JSON)
    assert committer.recover(only={2}) == 0  # batch 1's intent is not among them
    assert committer.recover(only={1}) == 1


# -- beside a committing driver, both cores busy ----------------------------------------------
RUNS = int(os.environ.get("ROTSINK_VERIFY_RUNS", "200"))  # the long run: 5000


def start_driver(out: Path, batches: int, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.support.committing_driver", str(out),
                             str(batches)], stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, cwd=ROOT, env={**os.environ, **env})


def test_verify_beside_a_committing_driver_reports_no_false_problem(tmp_path, shown):
    """``RUNS`` verifications while a driver commits back to back (rolls every other batch,
    compacts every third, cleans up at once) and a busy loop takes the other core: none
    reports a problem, and some of them met a commit in flight and waited for it. Then a
    driver killed after staging its intent: verify reports it once it stalls."""
    out = tmp_path / "out"
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    driver = start_driver(out, 1_000_000)
    try:
        assert driver.stdout is not None and driver.stdout.readline().startswith("COMMITTED")
        waited: list[int] = []
        problems = []
        for _ in range(RUNS):  # paced to spread the runs over many commits
            result = verify_output(LocalStorage(str(out)), on_wait=lambda i: waited.append(1))
            problems += result.problems
            time.sleep(random.random() * 0.04)
    finally:
        for process in (driver, burner):
            process.kill()
            process.wait()
    latest = verify_output(LocalStorage(str(out)), commit_timeout_s=0, repair=True).latest
    shown(f"verify beside a committing driver: {RUNS} runs over {latest} batches, "
          f"{len(waited)} waited for a commit in flight, {len(problems)} problems")
    assert problems == []
    assert waited, "no verification met a commit in flight: the test did not test it"

    # two batches: one of them rolls files, so its commit stages an intent, then dies
    dead = start_driver(out, 2, ROTSINK_FAILPOINTS="driver.before_rename=kill")
    assert dead.wait(60) == 137
    found = verify_output(LocalStorage(str(out)), commit_timeout_s=1)
    assert len(found.pending) == 1 and "was decided 1 s ago but not published" in \
        found.problems[0], found.problems
    assert verify_output(LocalStorage(str(out)), commit_timeout_s=1, repair=True).ok
