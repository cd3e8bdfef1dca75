"""``rotation.rollOnIdle``: a micro-batch in which no task got a row (a heartbeat's) rolls
every in-progress file; one in which any task got rows rolls nothing extra."""

from __future__ import annotations

import pyarrow as pa
import pytest

from commit_protocol.formats import FORMATS
from tests.unit.test_task_writer import commit, config, run_task


def rows_of(start: int, n: int, group: str) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(start, start + n), pa.int64()),
                            "g": [group] * n})


def setup(tmp_path, fmt: str, *, roll_on_idle: bool = True):
    suffix = FORMATS[fmt].suffix
    return config(tmp_path, format=fmt, file_suffix=suffix, partition_by=("g",),
                  compression="zstd" if FORMATS[fmt].bulk else "none",
                  rotation={"roll_on_idle": roll_on_idle})


def run_partition(tmp_path, cfg, batch_id, partition, batches):
    from commit_protocol.task.task_writer import TaskWriter
    from tests.unit.test_task_writer import plan_for, storage_of

    return TaskWriter(storage_of(cfg), cfg, plan_for(tmp_path, cfg), batch_id=batch_id,
                      partition=partition, attempt=0, query_id="q").write(batches)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_idle_batch_rolls_every_file(tmp_path, fmt):
    cfg = setup(tmp_path, fmt)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows_of(0, 5, "a"), rows_of(5, 5, "b")]))
    idle = run_task(tmp_path, cfg, 1, [])  # the one empty task Spark runs for an idle batch
    result = commit(tmp_path, cfg, 1, idle)
    assert sorted(f.reason for f in result.finalized) == ["idle", "idle"]
    assert result.in_progress == 0
    # bulk formats: the empty task encoded them, the driver only publishes
    assert all(not f.rolled_by_driver for f in result.finalized) == FORMATS[fmt].bulk


def test_without_the_option_an_idle_batch_rolls_nothing(tmp_path):
    cfg = setup(tmp_path, "jsonl", roll_on_idle=False)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows_of(0, 5, "a")]))
    result = commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, []))
    assert result.finalized == [] and result.in_progress == 1


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_batch_with_rows_in_any_task_is_not_idle(tmp_path, fmt):
    """Task 1 got no rows and (bulk) encoded its partition's staged file for the idle rule;
    task 0 got rows, so nothing rolls and task 1's file stays in progress, unchanged."""
    cfg = setup(tmp_path, fmt)
    first = [run_partition(tmp_path, cfg, 0, 0, [rows_of(0, 5, "a")]),
             run_partition(tmp_path, cfg, 0, 1, [rows_of(5, 5, "b")])]
    commit(tmp_path, cfg, 0, *first)
    busy = run_partition(tmp_path, cfg, 1, 0, [rows_of(10, 5, "a")])
    empty = run_partition(tmp_path, cfg, 1, 1, [])
    assert [f.reason for f in empty.files] == (["idle"] if FORMATS[fmt].bulk else [])
    result = commit(tmp_path, cfg, 1, busy, empty)
    assert result.finalized == [] and result.in_progress == 2
