"""The executor side without Spark: rolls, partitions, fencing of zombie attempts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.formats import decode_rows
from commit_protocol.formats.arrow import coalesce
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.records.messages import TaskReport
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import open_storage
from commit_protocol.task.part_files import Deferred, RowPartFile
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary.errors import ConcurrentWriterError, TruncatedFileError

SCHEMA_JSON = '{"type":"struct","fields":[]}'


def config(tmp_path: Path, **kw) -> SinkConfig:
    """A config for ``tmp_path``, or for ``path=`` (any storage URL) with ``fs_options=``."""
    rotation = RotationPolicy(**{"interval_ms": 0, "inactivity_ms": 0, **kw.pop("rotation", {})})
    return SinkConfig(**{"path": str(tmp_path), **kw}, rotation=rotation)


def storage_of(cfg: SinkConfig):
    return open_storage(cfg.path, cfg.fs_options)


def rows(start: int, n: int, **extra) -> pa.RecordBatch:
    columns = {"id": pa.array(range(start, start + n), pa.int64()), **extra}
    return pa.RecordBatch.from_pydict(columns)


def plan_for(tmp_path: Path, cfg: SinkConfig) -> WritePlan:
    storage = storage_of(cfg)
    state = Committer(storage, cfg, SCHEMA_JSON).latest_state()
    return WritePlan.from_state(state, storage.root_uri)


def run_task(tmp_path, cfg, batch_id, batches, *, attempt=0, plan=None, query_id="q"):
    storage = storage_of(cfg)
    writer = TaskWriter(storage, cfg, plan or plan_for(tmp_path, cfg), batch_id=batch_id,
                        partition=0, attempt=attempt, query_id=query_id)
    return writer.write(batches)


def commit(tmp_path, cfg, batch_id, *reports):
    return Committer(storage_of(cfg), cfg, SCHEMA_JSON).commit(
        batch_id, list(reports), now_ms=batch_id)


def committed_ids(tmp_path: Path, cfg: SinkConfig) -> list[int]:
    from commit_protocol.reading import committed_files, open_committed, read_batches

    storage = storage_of(cfg)
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    files = committed_files(log, latest, state, include_in_progress=True)
    schema = pa.schema([("id", pa.int64())])
    ring = cfg.keys.ring() if cfg.keys is not None and cfg.encrypted else None
    return sorted(i for f in files
                  for batch in read_batches(storage, f, state=state, schema=schema, ring=ring)
                  for i in batch.column("id").to_pylist())


def test_max_records_rolls_at_exactly_the_limit(tmp_path):
    cfg = config(tmp_path, rotation={"max_records": 4})
    report = run_task(tmp_path, cfg, 0, [rows(0, 5), rows(5, 5)])
    assert [(f.records, f.closed) for f in report.files] == [(4, True), (4, True), (2, False)]
    result = commit(tmp_path, cfg, 0, report)
    assert committed_ids(tmp_path, cfg) == list(range(10))
    assert roll_reasons(result) == ["maxRecords", "maxRecords"]


def test_max_bytes_rolls_near_the_limit(tmp_path):
    cfg = config(tmp_path, rotation={"max_bytes": 205})  # 20 rows of 10 bytes fit, 21 do not
    report = run_task(tmp_path, cfg, 0, [rows(0, 100)])
    closed = [f for f in report.files if f.closed]
    assert len(closed) >= 3 and all(150 <= f.end <= 200 for f in closed)
    # rolled below the limit because the next row would not fit: still the byte limit's roll
    assert roll_reasons(commit(tmp_path, cfg, 0, report)) == ["maxBytes"] * len(closed)


def roll_reasons(result) -> list[str]:
    """Why each file the commit finalized was rolled (the log keeps it for ``rotsink inspect``)."""
    return [f.reason for f in result.finalized]


def test_coalesce_keeps_order_and_copies_only_small_batches():
    small = [rows(i * 10, 10) for i in range(7)]  # 80 bytes each
    chunks = list(coalesce(small, 200))
    assert [c.num_rows for c in chunks] == [30, 30, 10]
    assert pa.Table.from_batches(chunks).column("id").to_pylist() == list(range(70))
    big = rows(0, 100)
    assert next(coalesce([big], 200)) is big
    assert list(coalesce([], 200)) == []


def test_row_formats_append_small_batches_as_one_chunk(tmp_path):
    """Spark's 10,000-row Arrow batches are encoded together (and so make one gzip member,
    not one per batch), while rotation by records still cuts at the exact row."""
    gzip_cfg = config(tmp_path / "gz", compression="gzip")
    (f,) = run_task(tmp_path / "gz", gzip_cfg, 0, [rows(i * 100, 100) for i in range(30)]).files
    data = (tmp_path / "gz" / f.temp).read_bytes()
    assert data.count(b"\x1f\x8b\x08") == 1 and f.records == 3000
    cfg = config(tmp_path / "roll", rotation={"max_records": 2500})
    report = run_task(tmp_path / "roll", cfg, 0, [rows(i * 100, 100) for i in range(30)])
    assert [fi.records for fi in report.files] == [2500, 500]
    commit(tmp_path / "roll", cfg, 0, report)
    assert committed_ids(tmp_path / "roll", cfg) == list(range(3000))


def test_small_max_bytes_encodes_each_row_a_bounded_number_of_times(tmp_path, monkeypatch):
    """A chunk many files long is not re-encoded whole for every file it fills."""
    encoded: list[int] = []
    encode = RowPartFile.encode

    def counted_encode(self: RowPartFile, batch: pa.RecordBatch) -> bytes | Deferred:
        encoded.append(batch.num_rows)
        return encode(self, batch)

    monkeypatch.setattr(RowPartFile, "encode", counted_encode)
    cfg = config(tmp_path, rotation={"max_bytes": 200})
    report = run_task(tmp_path, cfg, 0, [rows(i * 100, 100) for i in range(30)])
    closed = [f for f in report.files if f.closed]
    assert len(closed) > 100 and all(150 <= f.end <= 200 for f in closed)
    # the whole chunk once (no size per row known yet), then about two encodings per file;
    # re-encoding what is left of the chunk for every file would be ~80 times each row
    assert sum(encoded) <= 4 * 3000
    commit(tmp_path, cfg, 0, report)
    assert committed_ids(tmp_path, cfg) == list(range(3000))


def test_row_files_continue_across_batches(tmp_path):
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    second = run_task(tmp_path, cfg, 1, [rows(3, 3)])
    (f,) = second.files
    assert f.start > 0 and f.fenced_from is None
    commit(tmp_path, cfg, 1, second)
    assert committed_ids(tmp_path, cfg) == list(range(6))


def test_losing_the_claim_copies_the_committed_prefix(tmp_path):
    """A zombie (or retry) of batch 1 and a new attempt both write; only one file is shared."""
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    plan = plan_for(tmp_path, cfg)
    zombie = run_task(tmp_path, cfg, 1, [rows(100, 3)], plan=plan)  # wins the claim
    retry = run_task(tmp_path, cfg, 1, [rows(3, 3)], attempt=1, plan=plan)
    (z,), (r,) = zombie.files, retry.files
    assert z.fenced_from is None and r.fenced_from == z.temp and r.temp != z.temp
    commit(tmp_path, cfg, 1, retry)
    assert committed_ids(tmp_path, cfg) == list(range(6))
    # The zombie keeps writing to its file after the commit: nothing committed changes.
    with open(tmp_path / z.temp, "ab") as f:
        f.write(b'{"id":999}\n')
    assert committed_ids(tmp_path, cfg) == list(range(6))


def test_bytes_past_the_committed_offset_are_fenced_off(tmp_path):
    cfg = config(tmp_path)
    first = run_task(tmp_path, cfg, 0, [rows(0, 3)])
    commit(tmp_path, cfg, 0, first)
    with open(tmp_path / first.files[0].temp, "ab") as f:  # a failed attempt's partial write
        f.write(b'{"id":12')
    (f,) = run_task(tmp_path, cfg, 1, [rows(3, 2)]).files
    assert f.fenced_from == first.files[0].temp


def test_shortened_in_progress_file_is_a_loud_error(tmp_path):
    cfg = config(tmp_path)
    first = run_task(tmp_path, cfg, 0, [rows(0, 3)])
    commit(tmp_path, cfg, 0, first)
    (tmp_path / first.files[0].temp).write_bytes(b"{")
    with pytest.raises(TruncatedFileError, match="holds 1 bytes; the log commits"):
        run_task(tmp_path, cfg, 1, [rows(3, 1)])


def test_replayed_batch_writes_nothing(tmp_path):
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    replay = run_task(tmp_path, cfg, 0, [rows(0, 3)])
    assert replay.skipped and replay.files == ()


def test_other_query_is_refused_before_writing(tmp_path):
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    with pytest.raises(ConcurrentWriterError, match="this is query other"):
        run_task(tmp_path, cfg, 1, [rows(3, 1)], query_id="other")


def test_partition_values_are_escaped_and_stay_inside_their_directory(tmp_path):
    cfg = config(tmp_path, partition_by=("k",), rotation={"max_batches": 1})
    keys = pa.array(["../x", "a/b", "", None, "ü=1"])
    report = run_task(tmp_path, cfg, 0, [rows(0, 5, k=keys)])
    commit(tmp_path, cfg, 0, report)
    dirs = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("k="))
    assert dirs == ["k=..%2Fx", "k=__HIVE_DEFAULT_PARTITION__", "k=a%2Fb", "k=ü%3D1"]


def test_max_open_files_releases_least_recently_used(tmp_path):
    cfg = config(tmp_path, partition_by=("k",), max_open_files=1)
    keys = pa.array(["a", "b", "a", "b"])
    report = run_task(tmp_path, cfg, 0, [rows(0, 4, k=keys), rows(4, 4, k=keys)])
    # Each directory's file was released and reopened, not rolled: one file each, 4 rows each.
    assert sorted((f.directory, f.records, f.closed) for f in report.files) == \
        [("k=a", 4, False), ("k=b", 4, False)]
    for f in report.files:
        data = (tmp_path / f.temp).read_bytes()
        assert decode_rows("jsonl", data, pa.schema([("id", pa.int64())])).num_rows == 4


def test_parquet_rows_are_staged_across_batches_and_encoded_at_the_roll(tmp_path):
    import pyarrow.parquet as pq

    cfg = config(tmp_path, format="parquet", compression="snappy", file_suffix=".parquet",
                 rotation={"max_batches": 2})
    first = run_task(tmp_path, cfg, 0, [rows(0, 10)])
    assert [(f.closed, f.final_temp) for f in first.files] == [(False, None)]
    commit(tmp_path, cfg, 0, first)
    assert committed_ids(tmp_path, cfg) == list(range(10))  # read from the staged file
    assert not list(tmp_path.glob("*.parquet"))
    (second,) = run_task(tmp_path, cfg, 1, [rows(10, 10)]).files
    assert second.closed and second.reason == "maxBatches" and second.final_temp
    result = commit(tmp_path, cfg, 1, TaskReport(1, 0, 0, "q", (second,)))
    assert [(f.name, f.reason) for f in result.finalized] == [(second.name, "maxBatches")]
    assert pq.read_table(tmp_path / second.name).column("id").to_pylist() == list(range(20))
    assert committed_ids(tmp_path, cfg) == list(range(20))


def finished(tmp_path: Path, report) -> list:
    """The Parquet metadata of the files the report's task encoded."""
    import pyarrow.parquet as pq

    return [pq.ParquetFile(tmp_path / f.final_temp).metadata for f in report.files
            if f.final_temp]


def test_parquet_row_groups_of_row_group_bytes(tmp_path):
    # Spark hands a task 10,000-row Arrow batches: one row group each would be small.
    cfg = config(tmp_path, format="parquet", compression="snappy", file_suffix=".parquet",
                 row_group_bytes=100 * 8 * 3, rotation={"max_batches": 1})
    report = run_task(tmp_path, cfg, 0, [rows(i * 100, 100) for i in range(7)])
    (metadata,) = finished(tmp_path, report)
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == \
        [300, 300, 100]
    commit(tmp_path, cfg, 0, report)
    assert committed_ids(tmp_path, cfg) == list(range(700))


def test_parquet_dictionary_only_for_columns_that_repeat(tmp_path):
    # Spark's writer drops a dictionary that does not pay; pyarrow's default would encode
    # the distinct ids through one (2-3x larger files under zstd, slower to write).
    cfg = config(tmp_path, format="parquet", compression="zstd", file_suffix=".parquet",
                 rotation={"max_batches": 1})
    batch = rows(0, 1000, grp=pa.array([str(i % 4) for i in range(1000)]),
                 tags=pa.array([["x", "y"]] * 1000))
    (metadata,) = finished(tmp_path, run_task(tmp_path, cfg, 0, [batch]))
    chunk = metadata.row_group(0)
    dictionary = {chunk.column(i).path_in_schema: "RLE_DICTIONARY" in chunk.column(i).encodings
                  for i in range(chunk.num_columns)}
    assert dictionary == {"id": False, "grp": True, "tags.list.element": True}
