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
    from commit_protocol.committer import Committer
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
    from commit_protocol.conversion import staged_batches
    from commit_protocol.errors import TruncatedFileError
    from commit_protocol.formats.ipc import encode
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
