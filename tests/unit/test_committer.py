"""The driver's commit, with hand-made task reports: replays, crashes, bad reports."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.log import MetadataLog
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.records.messages import FileReport, TaskReport
from commit_protocol.storage import LocalStorage
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import (
    CommitError,
    ConcurrentWriterError,
    TruncatedFileError,
    UnsupportedQueryError,
)

MINUTE = 60_000


def make(tmp_path: Path, **rotation) -> Committer:
    policy = RotationPolicy(**{"interval_ms": 0, "inactivity_ms": 0, **rotation})
    config = SinkConfig(path=str(tmp_path), rotation=policy, compact_interval=10)
    return Committer(LocalStorage(str(tmp_path)), config, '{"type":"struct","fields":[]}')


def task_file(tmp_path: Path, temp: str, data: bytes, *, name: str = "part-00000-000000-000.jsonl",
              start: int = 0, records: int = 1, closed: bool = False, **kw) -> FileReport:
    path = tmp_path / temp
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(data)
    return FileReport(partition=0, directory="", name=name, temp=temp, start=start,
                      end=start + len(data), records=records, new_records=1, closed=closed, **kw)


def report(batch_id: int, *files: FileReport, query_id: str = "q1") -> TaskReport:
    return TaskReport(batch_id=batch_id, partition=0, attempt=0, query_id=query_id, files=files)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def finalized(committer: Committer) -> list[str]:
    log = MetadataLog(committer.storage, compact_interval=10)
    latest = log.latest_batch_id()
    assert latest is not None
    return [e["path"].rsplit("/", 1)[-1] for e in log.finalized_entries(latest)]


def test_replayed_batch_changes_nothing(tmp_path):
    c = make(tmp_path, max_batches=1)
    f = task_file(tmp_path, "_rotsink/inprogress/.a", b'{"id":1}\n')
    assert c.commit(0, [report(0, f)], now_ms=0).committed
    before = snapshot(tmp_path)
    again = c.commit(0, [report(0, f)], now_ms=5)
    assert again.committed is False and snapshot(tmp_path) == before
    assert (tmp_path / "part-00000-000000-000.jsonl").read_bytes() == b'{"id":1}\n'


def test_in_progress_file_continues_then_rolls_by_batch_count(tmp_path):
    c = make(tmp_path, max_batches=2)
    first = task_file(tmp_path, "_rotsink/inprogress/.a", b"1\n")
    assert c.commit(0, [report(0, first)], now_ms=0).in_progress == 1
    second = task_file(tmp_path, "_rotsink/inprogress/.a", b"2\n", start=2, records=2)
    result = c.commit(1, [report(1, second)], now_ms=1)
    assert [(f.name, f.reason) for f in result.finalized] == \
        [("part-00000-000000-000.jsonl", "maxBatches")]
    assert (tmp_path / "part-00000-000000-000.jsonl").read_bytes() == b"1\n2\n"


def test_untouched_slots_roll_by_inactivity(tmp_path):
    c = make(tmp_path, inactivity_ms=MINUTE)
    c.commit(0, [report(0, task_file(tmp_path, "_rotsink/inprogress/.a", b"1\n"))], now_ms=0)
    assert c.commit(1, [report(1)], now_ms=MINUTE - 1).finalized == []
    rolled = c.commit(2, [report(2)], now_ms=MINUTE)
    assert [f.reason for f in rolled.finalized] == ["inactivity"]
    assert finalized(c) == ["part-00000-000000-000.jsonl"]


def test_driver_dying_between_rename_and_log_write_is_rolled_forward(tmp_path, monkeypatch):
    c = make(tmp_path, max_batches=1)
    f = task_file(tmp_path, "_rotsink/inprogress/.a", b"1\n")
    monkeypatch.setenv(failpoints.ENV_VAR, "driver.before_log_write=raise")
    with pytest.raises(failpoints.FailpointError):
        c.commit(0, [report(0, f)], now_ms=0)
    monkeypatch.delenv(failpoints.ENV_VAR)
    assert (tmp_path / "part-00000-000000-000.jsonl").exists()  # renamed, not yet logged
    assert not (tmp_path / "_spark_metadata" / "0").exists()
    assert make(tmp_path, max_batches=1).recover() == 0  # the next plan or commit finishes it
    assert finalized(c) == ["part-00000-000000-000.jsonl"]
    assert c.commit(0, [report(0, f)], now_ms=1).committed is False


def test_driver_dying_mid_renames_is_rolled_forward(tmp_path, monkeypatch):
    c = make(tmp_path, max_records=1)
    files = [task_file(tmp_path, f"_rotsink/inprogress/.{i}", b"x\n", closed=True,
                       name=f"part-00000-000000-00{i}.jsonl") for i in range(3)]
    monkeypatch.setenv(failpoints.ENV_VAR, "driver.after_rename=raise:1")
    with pytest.raises(failpoints.FailpointError):
        c.commit(0, [report(0, *files)], now_ms=0)
    monkeypatch.delenv(failpoints.ENV_VAR)
    assert c.recover() == 0
    assert finalized(c) == [f"part-00000-000000-00{i}.jsonl" for i in range(3)]


def test_shorter_file_than_reported_is_a_loud_error(tmp_path):
    c = make(tmp_path)
    f = task_file(tmp_path, "_rotsink/inprogress/.a", b"12345\n")
    (tmp_path / f.temp).write_bytes(b"12")
    with pytest.raises(TruncatedFileError, match=r"holds 2 bytes; the task reported 6"):
        c.commit(0, [report(0, f)], now_ms=0)
    assert not (tmp_path / "_spark_metadata").exists()


def test_report_not_starting_at_committed_offset_is_refused(tmp_path):
    c = make(tmp_path)
    c.commit(0, [report(0, task_file(tmp_path, "_rotsink/inprogress/.a", b"1\n"))], now_ms=0)
    stale = task_file(tmp_path, "_rotsink/inprogress/.a", b"2\n", start=0)
    with pytest.raises(CommitError,
                       match="expected the task to start at committed offset 2, found 0"):
        c.commit(1, [report(1, stale)], now_ms=1)


def test_publishing_never_overwrites_a_foreign_file(tmp_path):
    c = make(tmp_path, max_batches=1)
    (tmp_path / "part-00000-000000-000.jsonl").write_bytes(b"someone else's")
    f = task_file(tmp_path, "_rotsink/inprogress/.a", b"1\n")
    with pytest.raises(CommitError, match="refusing to overwrite part-00000-000000-000.jsonl"):
        c.commit(0, [report(0, f)], now_ms=0)
    assert (tmp_path / "part-00000-000000-000.jsonl").read_bytes() == b"someone else's"


def test_continuous_trigger_is_refused(tmp_path):
    with pytest.raises(UnsupportedQueryError, match="continuous triggers are not supported"):
        make(tmp_path).commit(0, [None, None], now_ms=0)


def test_second_query_on_same_path_is_refused(tmp_path):
    c = make(tmp_path)
    c.commit(0, [report(0, query_id="q1")], now_ms=0)
    with pytest.raises(ConcurrentWriterError, match="written by query q1 .* this is query q2"):
        c.commit(1, [report(1, query_id="q2")], now_ms=1)


def test_missing_log_with_a_later_batch_is_refused(tmp_path):
    with pytest.raises(CommitError, match="no metadata log but the query is at batch 7"):
        make(tmp_path).commit(7, [report(7)], now_ms=0)


def test_orphans_are_deleted_only_after_the_cleanup_delay(tmp_path):
    from dataclasses import replace

    c = make(tmp_path)
    c.config = replace(c.config, compact_interval=2, cleanup_delay_ms=MINUTE)
    c.log.interval = 2
    live = task_file(tmp_path, "_rotsink/inprogress/.live", b"1\n")
    c.commit(0, [report(0, live)], now_ms=0)
    old = tmp_path / "_rotsink/inprogress/.zombie-old"
    young = tmp_path / "_rotsink/inprogress/.zombie-young"
    old.write_bytes(b"x")
    young.write_bytes(b"y")
    os.utime(old, (1, 1))  # written long ago
    c.commit(1, [report(1)], now_ms=int(time.time() * 1000))  # compaction batch: housekeeping
    assert not old.exists() and young.exists() and (tmp_path / live.temp).exists()
