"""A read planned from one committed state returns exactly that state's rows, whatever later
commits do to the files it planned (roll and publish, fence, orphan clean-up), on local
disk and on an object store (``memory://``: publishing composes and deletes segments)."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from commit_protocol.commit.housekeeping import delete_orphans
from commit_protocol.reading import CommittedFile, committed_files, open_committed, read_batches
from commit_protocol.vocabulary.errors import TruncatedFileError
from tests.unit.test_task_writer import commit, config, plan_for, rows, run_task, storage_of

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture(params=["local", "memory", "s3"])
def cfg_for(request, tmp_path):
    """``cfg_for(**options)``: a config on local disk, a fresh ``memory://`` path, or a fresh
    prefix on the local S3 server."""
    fs: dict[str, str] = {}
    if request.param == "local":
        path = str(tmp_path)
    elif request.param == "memory":
        path = f"memory://snap-{uuid.uuid4().hex}"
    else:
        path = f"s3://{request.getfixturevalue('s3_bucket')}/{uuid.uuid4().hex}"
        fs = {"endpoint_url": request.getfixturevalue("s3_endpoint")}

    def make(**kw):
        return config(tmp_path, path=path, fs_options=fs, **kw)

    yield make
    if request.param == "memory":
        storage_of(config(tmp_path, path=path)).delete_tree("")  # the store is process-wide


def plan_read(cfg) -> tuple[list[CommittedFile], object]:
    """What the reader's driver does: one committed state, its files and prefixes."""
    committed = open_committed(storage_of(cfg))
    assert committed is not None
    log, latest, state = committed
    return committed_files(log, latest, state, include_in_progress=True), state


def run_read(cfg, planned: list[CommittedFile], state) -> list[int]:
    """What the reader's tasks do, later: decode each planned file's committed bytes."""
    storage = storage_of(cfg)
    return sorted(i for f in planned
                  for batch in read_batches(storage, f, state=state, schema=SCHEMA)
                  for i in batch.column("id").to_pylist())


def test_a_file_rolled_after_planning_is_read_from_its_final_name(tmp_path, cfg_for):
    cfg = cfg_for(rotation={"max_batches": 2})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 5)]))
    planned, state = plan_read(cfg)
    assert [f.in_progress for f in planned] == [True]
    result = commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(5, 5)]))
    assert [f.reason for f in result.finalized] == ["maxBatches"]
    assert not storage_of(cfg).exists(planned[0].path)  # published: the temp is gone
    assert run_read(cfg, planned, state) == list(range(5))  # the planned state, no more


def test_a_file_fenced_after_planning_is_read_from_its_newest_temp(tmp_path, cfg_for):
    """A retry that lost the claim continues from a copy; the old temp becomes an orphan
    and is deleted by clean-up while the read still runs."""
    cfg = cfg_for()
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    planned, state = plan_read(cfg)
    plan = plan_for(tmp_path, cfg)
    run_task(tmp_path, cfg, 1, [rows(100, 3)], plan=plan)  # a zombie holds the claim
    retry = run_task(tmp_path, cfg, 1, [rows(3, 3)], attempt=1, plan=plan)
    commit(tmp_path, cfg, 1, retry)
    committed = open_committed(storage_of(cfg))
    assert committed is not None
    _, _, newest = committed
    assert delete_orphans(storage_of(cfg), newest, expired_before=2**62) == [planned[0].path]
    assert run_read(cfg, planned, state) == [0, 1, 2]


def test_several_commits_roll_and_fence_while_an_old_plan_waits(tmp_path, cfg_for):
    cfg = cfg_for(rotation={"max_records": 4})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 2)]))
    plans = [plan_read(cfg)]
    for batch in range(1, 6):
        commit(tmp_path, cfg, batch, run_task(tmp_path, cfg, batch, [rows(2 * batch, 2)]))
        plans.append(plan_read(cfg))
    for batch, (planned, state) in enumerate(plans):
        assert run_read(cfg, planned, state) == list(range(2 * batch + 2)), batch


def test_a_file_deleted_by_hand_stays_a_loud_error(tmp_path, cfg_for):
    cfg = cfg_for()
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    planned, state = plan_read(cfg)
    storage_of(cfg).delete(planned[0].path)
    with pytest.raises(TruncatedFileError, match=(
            rf"in-progress file {planned[0].path} is missing \(and no later commit published it "
            rf"as {planned[0].final}\): the log lists it with \d+ committed bytes; deleted by "
            r"hand")):
        run_read(cfg, planned, state)


def test_a_staged_parquet_file_rolled_and_cleaned_up_is_read_from_its_finished_file(
        tmp_path, cfg_for):
    """Parquet's staged rows are encoded (not renamed) at the roll; once clean-up deleted the
    staged bytes, a read planned before the roll takes the first rows of the finished file."""
    cfg = cfg_for(format="parquet", compression="snappy", file_suffix=".parquet",
                  rotation={"max_batches": 2})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 5)]))
    planned, state = plan_read(cfg)
    assert [f.staged for f in planned] == [True]
    commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(5, 5)]))
    committed = open_committed(storage_of(cfg))
    assert committed is not None
    newest = committed[2]
    assert run_read(cfg, planned, state) == list(range(5))  # the staged bytes are still there
    assert delete_orphans(storage_of(cfg), newest, expired_before=2**62) == [planned[0].path]
    assert run_read(cfg, planned, state) == list(range(5))
