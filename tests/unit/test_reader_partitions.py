"""How the reader spreads committed files over Spark partitions (no Spark needed to plan)."""

from __future__ import annotations

import pytest

from commit_protocol.errors import OptionError
from commit_protocol.task_writer import TaskWriter
from datasource.reader import MIN_PARTITIONS, RotSinkReader, committed_schema
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


def test_files_spread_over_partitions_balanced_by_bytes(out):
    # A small output still uses MIN_PARTITIONS cores (Spark's default read plan did not,
    # with every file in one partition: a 2-core read ran on one core).
    parts = reader(out).partitions()
    assert len(parts) == MIN_PARTITIONS
    assert sorted(s.file.path for p in parts for s in p.splits) == sorted(
        f.path for f in reader(out).files)
    sizes = [sum(s.size for s in p.splits) for p in parts]
    assert max(sizes) < 2 * min(sizes)


def test_num_partitions_option(out):
    assert len(reader(out, numPartitions="3").partitions()) == 3
    # files under maxPartitionBytes (and Spark's 4 MB open cost) are never split
    assert len(reader(out, numPartitions="50").partitions()) == 12
    with pytest.raises(OptionError, match=r"option numPartitions='0': expected an integer >= 1"):
        reader(out, numPartitions="0")
