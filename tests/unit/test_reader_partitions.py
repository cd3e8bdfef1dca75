"""How the reader spreads committed files over Spark partitions (no Spark needed to plan)."""

from __future__ import annotations

import pytest

from commit_protocol.reading import CommittedFile
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary.errors import OptionError
from datasource.reading.reader import MIN_PARTITIONS, RotSinkReader, committed_schema
from tests.unit.test_task_writer import commit, config, plan_for, rows, storage_of


@pytest.fixture
def out(tmp_path):
    """Twelve finalized Parquet files of one batch (one per task), sizes 1x to 12x."""
    cfg = config(tmp_path, format="parquet", compression="none", file_suffix=".parquet")
    plan = plan_for(tmp_path, cfg)
    reports = [TaskWriter(storage_of(cfg), cfg, plan, batch_id=0, partition=p, attempt=0,
                          query_id="q").write([rows(0, 1000 * (p + 1))]) for p in range(12)]
    commit(tmp_path, cfg, 0, *reports)
    return str(tmp_path)


def reader(path: str, **options) -> RotSinkReader:
    options = {"path": path, **options}
    return RotSinkReader(options, committed_schema(options))


def test_a_small_output_is_read_by_one_task(out):
    """Each Python task costs about 40 ms to start: outputs under 4 MB get one."""
    (part,) = reader(out).partitions()
    assert sorted(s.file.path for s in part.splits) == sorted(f.path for f in reader(out).files)


def test_files_spread_over_partitions_balanced_by_bytes(out):
    # A mid-size output still uses MIN_PARTITIONS cores (Spark's default read plan did not,
    # with every file in one partition: a 2-core read ran on one core).
    planned = reader(out)
    planned.files = [CommittedFile(f"part-{i}.parquet", (i + 1) << 20, "", False)
                     for i in range(12)]  # 1 to 12 MB, 78 MB in all
    parts = planned.partitions()
    assert len(parts) == MIN_PARTITIONS
    # files over total / MIN_PARTITIONS are split (finished Parquet: by row group)
    assert {s.file.path for p in parts for s in p.splits} == {f.path for f in planned.files}
    sizes = [sum(s.size for s in p.splits) for p in parts]
    assert sum(sizes) == 78 << 20
    assert max(sizes) < 2 * min(sizes)


def test_num_partitions_option(out):
    assert len(reader(out, numPartitions="3").partitions()) == 3
    # files under maxPartitionBytes (and Spark's 4 MB open cost) are never split
    assert len(reader(out, numPartitions="50").partitions()) == 12
    with pytest.raises(OptionError, match=r"option numPartitions='0': expected an integer >= 1"):
        reader(out, numPartitions="0")
