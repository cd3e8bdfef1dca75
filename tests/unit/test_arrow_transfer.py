"""Spark's per-row size check on the Arrow path into rotsink
(``datasource.writing.arrow_transfer``): a rotsink query starts without it unless the application
set the key, and a task that runs with it says so once per JVM."""

from __future__ import annotations

import logging

import pytest

from datasource.writing import arrow_transfer
from datasource.writing.arrow_transfer import KEY, UNCHECKED, start_unchecked
from tests.unit.test_heap_check import fake_proc


class FakeConf:
    def __init__(self, **settings: str) -> None:
        self.settings = dict(settings)

    def get(self, key, default=None):
        return self.settings.get(key, default)

    def set(self, key, value):
        self.settings[key] = value

    def unset(self, key):
        self.settings.pop(key, None)


class FakeSession:
    def __init__(self, **settings: str) -> None:
        self.conf = FakeConf(**settings)


def test_a_query_starts_without_the_check_and_the_session_is_left_as_it_was():
    session = FakeSession()
    seen = start_unchecked(session, lambda: session.conf.get(KEY))
    assert seen == UNCHECKED and session.conf.settings == {}


def test_the_applications_own_value_is_kept():
    session = FakeSession(**{KEY: "32m"})
    assert start_unchecked(session, lambda: session.conf.get(KEY)) == "32m"
    assert session.conf.settings == {KEY: "32m"}


def test_a_start_that_fails_leaves_the_session_as_it_was():
    session = FakeSession()

    def start():
        raise RuntimeError("no such path")

    with pytest.raises(RuntimeError, match="no such path"):
        start_unchecked(session, start)
    assert session.conf.settings == {}


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """A Python worker (pid 300) under a JVM (pid 100), and a fresh process."""
    monkeypatch.setattr(arrow_transfer, "_checked", False)
    monkeypatch.setattr(arrow_transfer.os, "getpid", lambda: 300)
    proc = fake_proc(tmp_path / "proc", {300: (200, ["python3", "-m", "pyspark.worker"]),
                                         200: (100, ["python3", "-m", "pyspark.daemon"]),
                                         100: (1, ["java", "-Xmx4g", "SparkSubmit"])})
    markers = tmp_path / "markers"
    markers.mkdir()
    return proc, markers


@pytest.mark.parametrize("value, shown", [
    (None, f"{KEY} at Spark's default"), ("67108864b", f"{KEY}=67108864b")],
    ids=["Spark's default", "the application's"])
def test_a_task_with_the_check_warns_once_per_jvm(worker, monkeypatch, caplog, value, shown):
    proc, markers = worker
    with caplog.at_level(logging.WARNING, logger="rotsink"):
        assert arrow_transfer.warn_once_if_checked(value, proc, markers)
        assert not arrow_transfer.warn_once_if_checked(value, proc, markers)  # this process
        monkeypatch.setattr(arrow_transfer, "_checked", False)  # another worker of the JVM
        assert not arrow_transfer.warn_once_if_checked(value, proc, markers)
    (record,) = caplog.records
    message = record.getMessage()
    assert f"with {shown}:" in message and f"Set {KEY}={UNCHECKED}" in message
    assert f"on a 16-core executor rotsink took {arrow_transfer.MEASURED}" in message


@pytest.mark.parametrize("page", ["README.md", "docs/performance.md"])
def test_the_docs_quote_the_warnings_figures(page):
    """One set of figures for the check's cost: the warning's, quoted where users read."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / page).read_text()
    assert arrow_transfer.MEASURED in re.sub(r"\s+", " ", text)


def test_a_task_without_the_check_says_nothing(worker, caplog):
    proc, markers = worker
    with caplog.at_level(logging.WARNING, logger="rotsink"):
        assert not arrow_transfer.warn_once_if_checked(UNCHECKED, proc, markers)
    assert not caplog.records and not list(markers.iterdir())


def test_a_task_that_gets_a_large_batch_says_so_once_per_jvm_with_the_rule(
        worker, monkeypatch, caplog):
    """Without the check, only maxRecordsPerBatch bounds a batch: the first larger than
    LARGE_BATCH_BYTES names its size and the rows a batch that would keep it near 64 MB."""
    import pyarrow as pa

    proc, markers = worker
    monkeypatch.setattr(arrow_transfer, "_large_warned", False)
    monkeypatch.setattr(arrow_transfer, "LARGE_BATCH_BYTES", 1_000_000)
    small = pa.record_batch({"payload": ["x" * 10] * 10})
    large = pa.record_batch({"payload": ["y" * 100_000] * 20})  # 2 MB, 100 kB a row
    with caplog.at_level(logging.WARNING, logger="rotsink"):
        seen = list(arrow_transfer.BatchWatch(proc, markers).watch([small, large, large]))
        monkeypatch.setattr(arrow_transfer, "_large_warned", False)  # another worker
        list(arrow_transfer.BatchWatch(proc, markers).watch([large]))
    assert seen == [small, large, large]
    (record,) = caplog.records
    message = record.getMessage()
    assert "an Arrow batch of 1 MB (20 rows of 100.0 kB)" in message
    assert "spark.sql.execution.arrow.maxRecordsPerBatch=671 (about 64 MB a batch" in message
