"""A task's overlap with Spark sending its rows (``commit_protocol.task.pipeline``): chunks are
written in order by one worker thread; an error on either side stops both and is raised in
the task's thread; no thread outlives the task; bytes are synced early and still all
synced at the end."""

from __future__ import annotations

import os
import threading

import pytest

from commit_protocol.task import pipeline
from commit_protocol.task.pipeline import ChunkPipeline, EarlySync
from tests.unit.test_task_writer import commit, committed_ids, config, rows, run_task


def test_chunks_are_written_in_order_by_one_worker_thread():
    written: list[tuple[int, str]] = []
    with ChunkPipeline(lambda c: written.append((c, threading.current_thread().name))) as p:
        p.feed(range(50))
    assert [c for c, _ in written] == list(range(50))
    assert {name for _, name in written} == {"rotsink-task-writer"}
    assert not [t for t in threading.enumerate() if t.name == "rotsink-task-writer"]


def test_a_worker_error_stops_the_feed_and_is_raised_in_the_tasks_thread():
    written: list[int] = []

    def write(chunk: int) -> None:
        if chunk == 3:
            raise OSError("disk full")
        written.append(chunk)

    fed: list[int] = []

    def chunks():
        for i in range(1000):
            fed.append(i)
            yield i

    with pytest.raises(OSError, match="disk full"), ChunkPipeline(write) as p:
        p.feed(chunks())
    assert written == [0, 1, 2]
    assert len(fed) < 10  # the feed stopped soon after: the queue holds one chunk
    assert not [t for t in threading.enumerate() if t.name == "rotsink-task-writer"]


def test_an_error_of_the_rows_source_stops_the_worker_and_is_raised():
    written: list[int] = []

    def chunks():
        yield 1
        yield 2
        raise RuntimeError("the JVM went away")

    with pytest.raises(RuntimeError, match="the JVM went away"), \
            ChunkPipeline(written.append) as p:
        p.feed(chunks())
    assert written in ([1, 2], [1])  # what was handed over before the error, at most
    assert not [t for t in threading.enumerate() if t.name == "rotsink-task-writer"]


class CountingStorage:
    """Records each sync; with ``gate``, a sync waits for it (a slow disk)."""

    def __init__(self, fail: bool = False, gate: threading.Event | None = None) -> None:
        self.synced: list[list[str]] = []
        self.fail = fail
        self.gate = gate
        self.finished = threading.Semaphore(0)

    def sync(self, paths):
        if self.gate is not None:
            self.gate.wait(timeout=30)
        try:
            if self.fail:
                raise OSError("EIO")
            self.synced.append(list(paths))
        finally:
            self.finished.release()


def test_early_sync_keeps_one_running_and_finish_waits_for_it(monkeypatch):
    monkeypatch.setattr(pipeline, "EARLY_SYNC_BYTES", 100)
    gate = threading.Event()
    storage = CountingStorage(gate=gate)
    early = EarlySync(storage, enabled=True)  # type: ignore[arg-type]
    early.note("a", 50)   # below the threshold
    early.note("a", 120)  # starts a sync, which waits on the slow disk
    early.note("a", 260)  # one is running: none queued behind it
    early.note("b", 99)
    gate.set()
    assert storage.finished.acquire(timeout=30)
    early.note("a", 300)  # 180 bytes since the last one: the next starts
    early.finish()
    assert storage.synced == [["a"], ["a"]]
    assert not [t for t in threading.enumerate() if t.name.startswith("rotsink-sync")]
    disabled = EarlySync(storage, enabled=False)  # type: ignore[arg-type]
    disabled.note("a", 10_000)
    disabled.finish()
    assert len(storage.synced) == 2


def test_an_early_sync_that_failed_stops_the_task_at_its_next_write(monkeypatch):
    monkeypatch.setattr(pipeline, "EARLY_SYNC_BYTES", 1)
    storage = CountingStorage(fail=True)
    early = EarlySync(storage, enabled=True)  # type: ignore[arg-type]
    early.note("a", 10)
    assert storage.finished.acquire(timeout=30)
    with pytest.raises(OSError, match="EIO"):
        early.note("a", 20)
    early.finish()


def test_an_early_sync_that_fails_fails_the_task(monkeypatch):
    monkeypatch.setattr(pipeline, "EARLY_SYNC_BYTES", 1)
    early = EarlySync(CountingStorage(fail=True), enabled=True)  # type: ignore[arg-type]
    early.note("a", 10)
    with pytest.raises(OSError, match="EIO"):
        early.finish()


def test_a_task_syncs_a_growing_file_early_and_commits_every_row(tmp_path, monkeypatch):
    """JSON lines past EARLY_SYNC_BYTES: an fsync while rows arrive (of a part of the
    file), then the task's own of the whole file before it reports; the rows are all
    committed, once. How many syncs run early depends on how fast the disk is (one at a
    time): at least one does."""
    from commit_protocol.storage.local import LocalStorage
    from commit_protocol.task import task_writer

    monkeypatch.setattr(pipeline, "EARLY_SYNC_BYTES", 2_000)
    monkeypatch.setattr(task_writer, "ROW_CHUNK_BYTES", 800)  # chunks of 100 rows
    synced: list[tuple[str, int]] = []  # (path, its size when its sync began)
    original = LocalStorage.sync

    def counted(self, paths):
        paths = list(paths)
        synced.extend((p, os.path.getsize(self._abs(p))) for p in paths)
        return original(self, paths)

    monkeypatch.setattr(LocalStorage, "sync", counted)
    cfg = config(tmp_path)
    report = run_task(tmp_path, cfg, 0, [rows(i * 100, 100) for i in range(20)])
    (f,) = report.files
    sizes = [size for path, size in synced if path == f.temp]
    assert min(sizes) < f.end, sizes  # one began while rows still arrived
    assert sizes[-1] == f.end, sizes  # and the last covers every byte the task reports
    commit(tmp_path, cfg, 0, report)
    assert committed_ids(tmp_path, cfg) == list(range(2000))
