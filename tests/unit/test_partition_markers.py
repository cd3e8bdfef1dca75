"""``partition.commitDelay``: a directory with no in-progress file and no new row for the delay
gets its ``_SUCCESS`` marker at a commit, once, decided in the log's state (a roll-forward
writes exactly it, a replay never)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pyarrow as pa
import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.records.state import SinkState, StateHead
from commit_protocol.vocabulary import failpoints
from tests.unit.test_task_writer import SCHEMA_JSON, config, run_task, storage_of

DELAY = 1_000


def rows_in(group: str, start: int, n: int = 3) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(start, start + n), pa.int64()),
                            "g": [group] * n})


def setup(tmp_path, **rotation):
    return config(tmp_path, partition_by=("g",), partition_commit_delay_ms=DELAY,
                  rotation={"max_batches": 1, **rotation})


def commit_at(cfg, batch_id, now_ms, *reports):
    return Committer(storage_of(cfg), cfg, SCHEMA_JSON).commit(batch_id, list(reports),
                                                              now_ms=now_ms)


def state_of(cfg, batch_id) -> SinkState:
    from commit_protocol.log import MetadataLog

    return MetadataLog(storage_of(cfg), compact_interval=cfg.compact_interval).read_state(
        batch_id)


def test_a_quiet_finished_directory_gets_its_marker_once_after_the_delay(tmp_path):
    cfg = setup(tmp_path)
    commit_at(cfg, 0, 0, run_task(tmp_path, cfg, 0, [rows_in("a", 0), rows_in("b", 3)]))
    commit_at(cfg, 1, DELAY - 1, run_task(tmp_path, cfg, 1, [rows_in("b", 6)]))
    assert not list(tmp_path.rglob("_SUCCESS"))  # too early for a, b just got rows
    commit_at(cfg, 2, DELAY, run_task(tmp_path, cfg, 2, []))
    assert sorted(p.parent.name for p in tmp_path.rglob("_SUCCESS")) == ["g=a"]
    assert state_of(cfg, 2).markers == ("g=a",)
    assert state_of(cfg, 2).open_partitions == (("g=b", DELAY - 1),)
    commit_at(cfg, 3, 2 * DELAY, run_task(tmp_path, cfg, 3, []))
    assert sorted(p.parent.name for p in tmp_path.rglob("_SUCCESS")) == ["g=a", "g=b"]
    assert state_of(cfg, 3).markers == ("g=b",) and state_of(cfg, 3).open_partitions == ()


def test_a_directory_with_a_file_in_progress_is_not_complete(tmp_path):
    cfg = setup(tmp_path, max_batches=0)
    commit_at(cfg, 0, 0, run_task(tmp_path, cfg, 0, [rows_in("a", 0)]))
    commit_at(cfg, 1, 10 * DELAY, run_task(tmp_path, cfg, 1, []))
    assert not list(tmp_path.rglob("_SUCCESS"))
    assert state_of(cfg, 1).open_partitions == (("g=a", 0),)


def test_a_replayed_batch_never_writes_a_marker(tmp_path):
    cfg = setup(tmp_path)
    commit_at(cfg, 0, 0, run_task(tmp_path, cfg, 0, [rows_in("a", 0)]))
    idle = run_task(tmp_path, cfg, 1, [])
    commit_at(cfg, 1, DELAY, idle)
    marker = tmp_path / "g=a" / "_SUCCESS"
    os.remove(marker)  # to see whether the replay writes it (it must not: batch 1 is done)
    result = commit_at(cfg, 1, 5 * DELAY, idle)
    assert not result.committed and not marker.exists()


@pytest.mark.parametrize("point", ["driver.before_mark", "driver.after_mark"])
def test_a_commit_cut_short_at_its_marker_is_finished_by_the_next_driver(tmp_path, monkeypatch,
                                                                        point):
    """Killed before the marker, or between the marker and the log file: the next driver
    finishes the commit, the marker exists once, and nothing else is marked."""
    cfg = setup(tmp_path)
    commit_at(cfg, 0, 0, run_task(tmp_path, cfg, 0, [rows_in("a", 0)]))
    monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_at(cfg, 1, DELAY, run_task(tmp_path, cfg, 1, []))
    monkeypatch.delenv(failpoints.ENV_VAR)
    marker = tmp_path / "g=a" / "_SUCCESS"
    assert marker.exists() == (point == "driver.after_mark")
    assert not (tmp_path / "_spark_metadata" / "1").exists()  # not committed yet
    assert Committer(storage_of(cfg), cfg, SCHEMA_JSON).recover() == 1  # rolled forward
    assert marker.exists() and marker.stat().st_size == 0
    assert sorted(p.parent.name for p in tmp_path.rglob("_SUCCESS")) == ["g=a"]


def test_late_rows_are_committed_and_the_marker_is_never_rewritten(tmp_path):
    cfg = setup(tmp_path)
    commit_at(cfg, 0, 0, run_task(tmp_path, cfg, 0, [rows_in("a", 0)]))
    commit_at(cfg, 1, DELAY, run_task(tmp_path, cfg, 1, []))
    marker = tmp_path / "g=a" / "_SUCCESS"
    first = marker.stat().st_mtime_ns
    result = commit_at(cfg, 2, 2 * DELAY, run_task(tmp_path, cfg, 2, [rows_in("a", 3)]))
    assert [f.records for f in result.finalized] == [3]  # the late rows, committed
    assert state_of(cfg, 2).open_partitions == (("g=a", 2 * DELAY),)
    commit_at(cfg, 3, 3 * DELAY, run_task(tmp_path, cfg, 3, []))
    assert state_of(cfg, 3).markers == ("g=a",) and marker.stat().st_mtime_ns == first


def test_state_round_trips_partitions():
    before = SinkState(batch_id=2, query_id="q", schema_json="{}", format="jsonl",
                       compression="none", partition_by=("g",), compact_interval=10,
                       open_partitions=(("g=a", 5), ("g=c", 6)), state_id="s2")
    state = replace(before, batch_id=3, open_partitions=(("g=b", 7), ("g=c", 6)),
                    markers=("g=a",), state_id="s3")
    head = StateHead.from_json(json.loads(json.dumps(state.head_json(before))))
    assert head.state.open_partitions == (("g=b", 7),) and head.closed == ("g=a",)
    assert head.applied_to(before) == state
    whole = head.with_snapshot(json.loads(json.dumps(state.snapshot_json())))
    assert whole == state


def test_inspect_lists_complete_and_awaiting_partitions(tmp_path, capsys):
    from datasource.commands.cli import main

    cfg = setup(tmp_path)
    commit_at(cfg, 0, 0, run_task(tmp_path, cfg, 0, [rows_in("a", 0), rows_in("b", 3)]))
    commit_at(cfg, 1, DELAY - 1, run_task(tmp_path, cfg, 1, [rows_in("b", 6)]))
    commit_at(cfg, 2, DELAY, run_task(tmp_path, cfg, 2, []))
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert ("batch     2: finalized 0 file(s), 0 in progress; 1 task(s) appended 0 "
            "row(s), 0 byte(s)\n    * g=a complete") in out
    assert "complete partitions (1): g=a\n" in out
    assert "partitions awaiting partition.commitDelay (1): g=b\n" in out


def test_verify_names_a_missing_marker_of_the_latest_batch(tmp_path):
    from commit_protocol.checks.verification import verify_output

    cfg = setup(tmp_path)
    commit_at(cfg, 0, 0, run_task(tmp_path, cfg, 0, [rows_in("a", 0)]))
    commit_at(cfg, 1, DELAY, run_task(tmp_path, cfg, 1, []))
    assert verify_output(storage_of(cfg)).problems == []
    os.remove(tmp_path / "g=a" / "_SUCCESS")
    assert verify_output(storage_of(cfg)).problems == [
        "g=a/_SUCCESS: the log's batch 1 completed partition g=a but its marker is missing"]
