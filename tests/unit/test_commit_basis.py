"""The commit continues the state its batch was planned from, and writes an intent only when
it renames files: what it reads and leaves behind (each request is 10-30 ms on S3)."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.log import STATES
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import ConcurrentWriterError
from commit_protocol.vocabulary.naming import INTENT_DIR, LOG_DIR
from tests.unit.test_task_writer import (
    SCHEMA_JSON,
    commit,
    committed_ids,
    config,
    plan_for,
    rows,
    run_task,
    storage_of,
)


class Watched:
    """A storage that records which directories it listed and which files it read."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.listed: list[str] = []
        self.opened: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def names(self, directory):
        self.listed.append(directory)
        return self.inner.names(directory)

    def list(self, directory):
        self.listed.append(directory)
        return self.inner.list(directory)

    def open_read(self, path):
        self.opened.append(path)
        return self.inner.open_read(path)

    def open_input(self, path, length):
        self.opened.append(path)
        return self.inner.open_input(path, length)

    def committer(self, cfg) -> Committer:
        return Committer(cast(Storage, self), cfg, SCHEMA_JSON)


def intents(tmp_path) -> list[str]:
    folder = tmp_path / INTENT_DIR
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_commit_from_planned_reports_neither_lists_nor_reads_the_log(tmp_path):
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    report = run_task(tmp_path, cfg, 1, [rows(3, 3)])
    assert report.basis is not None and report.basis.latest_batch_id == 0
    watched = Watched(storage_of(cfg))
    result = watched.committer(cfg).commit(1, [report], now_ms=1)
    assert result.committed
    assert LOG_DIR not in watched.listed and INTENT_DIR not in watched.listed
    assert watched.opened == []  # the state of batch 0 is this process's, by the basis's id
    assert committed_ids(tmp_path, cfg) == list(range(6))


def test_a_state_the_cache_lost_is_read_once_by_its_log_file(tmp_path):
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    report = run_task(tmp_path, cfg, 1, [rows(3, 3)])
    STATES.clear()  # another process commits: Spark's commit worker was restarted
    watched = Watched(storage_of(cfg))
    assert watched.committer(cfg).commit(1, [report], now_ms=1).committed
    assert watched.opened == [f"{LOG_DIR}/0"] and LOG_DIR not in watched.listed


def test_a_log_changed_since_planning_is_another_writer(tmp_path):
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    report = run_task(tmp_path, cfg, 1, [rows(3, 3)])
    assert report.basis is not None
    stale = replace(report, basis=replace(report.basis, state_id="a-state-nobody-wrote"))
    STATES.clear()
    with pytest.raises(ConcurrentWriterError, match="changed while batch 1 ran"):
        commit(tmp_path, cfg, 1, stale)
    assert committed_ids(tmp_path, cfg) == list(range(3))


def test_a_replay_the_planning_saw_committed_reads_and_writes_nothing(tmp_path):
    cfg = config(tmp_path)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    replayed = run_task(tmp_path, cfg, 0, [rows(0, 3)])  # planned after batch 0 committed
    assert replayed.skipped
    watched = Watched(storage_of(cfg))
    assert not watched.committer(cfg).commit(0, [replayed], now_ms=9).committed
    assert watched.listed == [] and watched.opened == []


def test_only_a_batch_that_renames_files_stages_an_intent(tmp_path):
    cfg = config(tmp_path, rotation={"max_records": 4})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    assert intents(tmp_path) == []  # appended only: its log file is written directly
    commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(3, 3)]))  # rolls at 4 rows
    assert intents(tmp_path) == ["1"]
    assert committed_ids(tmp_path, cfg) == list(range(6))


def test_a_commit_repeated_from_stale_reports_changes_nothing(tmp_path):
    """Reports planned before batch 1 committed, committed again (a driver that hung past
    its batch): the kept intent refuses a second staging, and nothing changes."""
    cfg = config(tmp_path, rotation={"max_batches": 1})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    stale = run_task(tmp_path, cfg, 1, [rows(3, 3)])
    commit(tmp_path, cfg, 1, stale)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert not commit(tmp_path, cfg, 1, stale).committed
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_clean_up_keeps_the_intents_of_the_last_interval(tmp_path):
    cfg = config(tmp_path, rotation={"max_batches": 1}, compact_interval=3)
    for batch in range(9):
        commit(tmp_path, cfg, batch, run_task(tmp_path, cfg, batch, [rows(batch * 2, 2)]))
    # batch 8 (a compaction) deleted the intents of batches up to 5; the planning ignores
    # the others (their log files exist)
    assert intents(tmp_path) == ["6", "7", "8.compact"]
    assert plan_for(tmp_path, cfg).latest_batch_id == 8
    assert committed_ids(tmp_path, cfg) == list(range(18))
