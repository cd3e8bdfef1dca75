"""Bulk formats span micro-batches: rows staged as Arrow IPC, encoded into one file (Parquet
or ORC) at the roll."""

from __future__ import annotations

import pyarrow as pa
import pytest

from commit_protocol.formats import FORMATS
from tests.unit.test_task_writer import commit, committed_ids, config, rows, run_task

MINUTE = 60_000
BULK = pytest.mark.parametrize("fmt", ["parquet", "orc"])


def parquet(tmp_path, **rotation):
    return bulk(tmp_path, "parquet", **rotation)


def bulk(tmp_path, fmt, **rotation):
    return config(tmp_path, format=fmt, compression="zstd", file_suffix=f".{fmt}",
                  rotation=rotation)


def read_finished(path, fmt) -> pa.Table:
    return FORMATS[fmt].implementation().read_file(str(path))


@BULK
def test_a_commit_rule_encodes_only_the_committed_rows(tmp_path, fmt):
    """A slot no task touched rolls by inactivity at the commit; the driver encodes exactly
    its committed prefix, not what a zombie appended after it."""
    cfg = bulk(tmp_path, fmt, inactivity_ms=MINUTE)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 30)]))
    committed = committed_ids(tmp_path, cfg)
    assert committed == list(range(30))
    (temp,) = (tmp_path / "_rotsink" / "inprogress").glob(".*inprogress")
    with open(temp, "ab") as f:
        f.write(b"zombie bytes past the committed offset")
    from commit_protocol.commit.committer import Committer
    from tests.unit.test_task_writer import SCHEMA_JSON, storage_of

    result = Committer(storage_of(cfg), cfg, SCHEMA_JSON).commit(1, [], now_ms=MINUTE + 10**13)
    (rolled,) = result.finalized
    assert rolled.reason == "inactivity" and rolled.rolled_by_driver
    assert read_finished(tmp_path / rolled.name, fmt).column("id").to_pylist() == list(range(30))
    assert committed_ids(tmp_path, cfg) == list(range(30))


@BULK
def test_max_bytes_is_the_finished_files_size(tmp_path, fmt):
    limit = 128 << 10
    cfg = bulk(tmp_path, fmt, max_bytes=limit)
    text = pa.array([f"value {i % 997} of row {i}" for i in range(200_000)])
    report = run_task(tmp_path, cfg, 0, [rows(0, 200_000, s=text)])
    commit(tmp_path, cfg, 0, report)
    sizes = [f.final_size for f in report.files if f.closed]
    assert len(sizes) >= 3
    assert all(0.75 * limit <= size <= 1.25 * limit for size in sizes), sizes
    assert committed_ids(tmp_path, cfg) == list(range(200_000))


def test_a_committed_length_inside_a_staged_stream_is_a_loud_error(tmp_path):
    from commit_protocol.formats.ipc import encode
    from commit_protocol.task.conversion import staged_batches
    from commit_protocol.vocabulary.errors import TruncatedFileError
    from tests.unit.test_task_writer import storage_of

    cfg = parquet(tmp_path)
    storage = storage_of(cfg)
    data = encode(pa.table({"id": [1, 2, 3]})) + encode(pa.table({"id": [4]}))
    with storage.open_append("staged") as handle:
        handle.write(data)
    assert [b.num_rows for b in staged_batches(storage, "staged", len(data), cfg)] == [3, 1]
    with pytest.raises(TruncatedFileError, match="is not the end of a staged stream"):
        list(staged_batches(storage, "staged", len(data) - 5, cfg))


@BULK
def test_the_partitions_task_encodes_its_idle_due_slots_so_the_driver_only_publishes(tmp_path,
                                                                                     fmt):
    """A directory that gets no rows in a batch but is due by inactivity is encoded by the
    task of its partition (from the committed bytes only: a zombie's appended bytes never
    reach the finished file); the commit publishes it without encoding anything."""
    cfg = config(tmp_path, format=fmt, compression="zstd", file_suffix=f".{fmt}",
                 partition_by=("g",), rotation={"inactivity_ms": 1})
    first = pa.record_batch({"id": pa.array(range(20), pa.int64()), "g": ["a"] * 20})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [first]))
    (temp,) = (tmp_path / "_rotsink" / "inprogress").glob(".*inprogress")
    with open(temp, "ab") as f:
        f.write(b"zombie bytes past the committed offset")
    second = pa.record_batch({"id": pa.array(range(20, 25), pa.int64()), "g": ["b"] * 5})
    report = run_task(tmp_path, cfg, 1, [second])
    idle = [f for f in report.files if f.directory == "g=a"]
    assert len(idle) == 1 and idle[0].closed and idle[0].reason == "inactivity"
    assert idle[0].new_records == 0 and idle[0].final_temp is not None
    result = commit(tmp_path, cfg, 1, report)
    rolled = {f.name.split("/")[0]: f for f in result.finalized}
    assert not rolled["g=a"].rolled_by_driver  # the task encoded it
    assert read_finished(tmp_path / rolled["g=a"].name, fmt).column("id").to_pylist() == list(
        range(20))
    assert result.in_progress == 1  # g=b, staged


def test_a_finished_file_has_full_row_groups_and_one_remainder(tmp_path):
    """Staged appends do not cut the finished file into alternating full and small groups:
    every row group but the last holds about parquet.rowGroupBytes."""
    import dataclasses

    import pyarrow.parquet as pq

    cfg = dataclasses.replace(bulk(tmp_path, "parquet", max_batches=1), row_group_bytes=1 << 20)
    batches = [rows(i * 10_000, 10_000, s=pa.array([f"v{j}" for j in range(10_000)]))
               for i in range(30)]
    report = run_task(tmp_path, cfg, 0, batches)
    commit(tmp_path, cfg, 0, report)
    (finished,) = [f for f in report.files if f.closed]
    metadata = pq.ParquetFile(tmp_path / finished.name).metadata
    groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sum(groups) == 300_000 and len(groups) >= 3
    assert len(set(groups[:-1])) == 1 and groups[-1] <= groups[0], groups


def roll_in_one_task(tmp_path, cfg, batch_id, batches) -> tuple[list[str], pa.Table]:
    """Run a task on a storage that records the files it opens to read; commit its report;
    return those files and the rows of the one file it finished."""
    from typing import cast

    from commit_protocol.storage import Storage
    from commit_protocol.task.task_writer import TaskWriter
    from tests.unit.test_commit_basis import Watched
    from tests.unit.test_task_writer import plan_for, storage_of

    watched = Watched(storage_of(cfg))
    writer = TaskWriter(cast(Storage, watched), cfg, plan_for(tmp_path, cfg), batch_id=batch_id,
                        partition=0, attempt=0, query_id="q")
    report = writer.write(batches)
    assert writer.held.used == 0  # every file rolled: the rows it held are given back
    commit(tmp_path, cfg, batch_id, report)
    (finished,) = [f for f in report.files if f.closed]
    return watched.opened, read_finished(tmp_path / finished.name, cfg.format)


@BULK
def test_a_file_staged_and_rolled_in_one_task_is_encoded_from_its_rows(tmp_path, fmt):
    """maxBatches=1: the task still holds every row it staged, so the roll does not read
    the staged file back (a listing and a download per file on an object store)."""
    cfg = bulk(tmp_path, fmt, max_batches=1)
    opened, finished = roll_in_one_task(tmp_path, cfg, 0, [rows(0, 500), rows(500, 500)])
    assert opened == []
    assert not list((tmp_path / "_rotsink" / "inprogress").glob(".*inprogress"))  # never written
    assert finished.column("id").to_pylist() == list(range(1000))
    assert committed_ids(tmp_path, cfg) == list(range(1000))


@BULK
def test_a_file_staged_by_an_earlier_batch_is_read_back_at_its_roll(tmp_path, fmt):
    """Its committed staged prefix is read back; the rows of the task that rolls it are
    encoded from memory after them, their staged bytes never written."""
    cfg = bulk(tmp_path, fmt, max_batches=2)
    first = run_task(tmp_path, cfg, 0, [rows(0, 300)])
    commit(tmp_path, cfg, 0, first)
    (staged,) = first.files
    opened, finished = roll_in_one_task(tmp_path, cfg, 1, [rows(300, 200)])
    assert any(path.endswith(".inprogress") for path in opened), opened
    assert (tmp_path / staged.temp).stat().st_size == staged.end  # the prefix alone
    assert finished.column("id").to_pylist() == list(range(500))
    assert committed_ids(tmp_path, cfg) == list(range(500))


def test_rows_past_the_held_bound_are_read_back_at_the_roll(tmp_path, monkeypatch):
    """The rows a task holds for its roll are bounded (by the row group size, which the
    roll's encoding holds anyway, or KEPT_ROWS_BYTES when larger): past it, the roll reads
    the staged file back a batch at a time, and encodes the same rows."""
    import dataclasses

    from commit_protocol.task import bulk_files

    monkeypatch.setattr(bulk_files, "KEPT_ROWS_BYTES", 4_000)
    cfg = dataclasses.replace(parquet(tmp_path, max_batches=1), row_group_bytes=4_000)
    opened, finished = roll_in_one_task(tmp_path, cfg, 0, [rows(i * 400, 400) for i in range(5)])
    assert any(path.endswith(".inprogress") for path in opened), opened
    assert finished.column("id").to_pylist() == list(range(2000))


def test_a_file_given_back_under_max_open_files_writes_its_staged_rows(tmp_path):
    """maxOpenFiles=1 and rows for two directories in turn: each file is given back and
    taken again, its staged bytes written at each release; a file that stays in progress is
    committed from its staged bytes, the rolled ones encode exactly their rows."""
    import dataclasses

    from commit_protocol.task.conversion import staged_batches
    from tests.unit.test_task_writer import storage_of

    cfg = dataclasses.replace(config(tmp_path, format="parquet", compression="zstd",
                                     file_suffix=".parquet", partition_by=("g",),
                                     rotation={"max_records": 250}), max_open_files=1)
    batches = [rows(i * 100, 100, g=pa.array(["a" if i % 2 else "b"] * 100)) for i in range(8)]
    report = run_task(tmp_path, cfg, 0, batches)
    result = commit(tmp_path, cfg, 0, report)
    finished = [read_finished(tmp_path / f.name, "parquet") for f in result.finalized]
    open_files = [f for f in report.files if not f.closed]
    assert len(finished) == 2 and len(open_files) == 2
    assert all((tmp_path / f.temp).stat().st_size == f.end for f in open_files)
    staged = [b for f in open_files
              for b in staged_batches(storage_of(cfg), f.temp, f.end, cfg)]
    ids = [i for t in finished + staged for i in t.column("id").to_pylist()]
    assert sorted(ids) == list(range(800))


def test_only_a_file_near_its_byte_limit_pays_a_trial_encoding(tmp_path):
    """The finished/staged ratio (a trial Parquet encoding of up to 100,000 rows) is
    measured only once a file could come near rotation.maxBytes: a task's share of a
    micro-batch far below it costs none; files near it still roll by maxBytes."""
    from commit_protocol.task.task_writer import TaskWriter
    from tests.unit.test_task_writer import plan_for, storage_of

    def task(cfg):
        writer = TaskWriter(storage_of(cfg), cfg, plan_for(tmp_path, cfg), batch_id=0,
                            partition=0, attempt=0, query_id="q")
        return writer, writer.write([rows(i * 1000, 1000) for i in range(4)])

    far, report = task(parquet(tmp_path / "far"))  # 128 MB by default
    assert far.ratio.value == 0 and not any(f.closed for f in report.files)
    near, report = task(parquet(tmp_path / "near", max_bytes=2_000))
    assert near.ratio.value > 0
    assert sum(1 for f in report.files if f.closed) >= 2
