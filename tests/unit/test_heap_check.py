"""The one-time warning about a task JVM's small heap (README, Tuning)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from datasource.writing import heap_check


def fake_proc(root: Path, processes: dict[int, tuple[int, list[str]]]) -> Path:
    """A /proc with ``pid: (ppid, argv)`` entries (stat's comm holds a space and a paren)."""
    for pid, (ppid, argv) in processes.items():
        entry = root / str(pid)
        entry.mkdir(parents=True)
        # 19 fields after the state; the last is the start time (field 22), here 1000 + pid
        fields = [str(ppid)] + ["0"] * 17 + [str(1000 + pid)]
        (entry / "stat").write_text(f"{pid} (python3 (x) y) S {' '.join(fields)} 0 0")
        (entry / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    return root


@pytest.fixture(autouse=True)
def fresh_check(monkeypatch):
    monkeypatch.setattr(heap_check, "_checked", False)


def test_a_worker_under_a_1g_jvm_warns_once_per_jvm(tmp_path, monkeypatch, caplog):
    proc = fake_proc(tmp_path / "proc", {
        300: (200, ["python3", "-m", "pyspark.worker"]),
        200: (100, ["python3", "-m", "pyspark.daemon"]),
        100: (1, ["/usr/lib/jvm/bin/java", "-cp", "jars/*", "-Xmx1g", "SparkSubmit"]),
    })
    monkeypatch.setattr(heap_check.os, "getpid", lambda: 300)
    markers = tmp_path / "markers"
    markers.mkdir()
    with caplog.at_level(logging.WARNING, logger="rotsink"):
        assert heap_check.warn_once_if_heap_is_small(proc, markers)
        assert not heap_check.warn_once_if_heap_is_small(proc, markers)  # this process: done
        monkeypatch.setattr(heap_check, "_checked", False)  # another worker of the same JVM
        assert not heap_check.warn_once_if_heap_is_small(proc, markers)
    (record,) = caplog.records
    assert "has a 1024 MB heap" in record.getMessage()
    assert "spark.driver.memory" in record.getMessage()


@pytest.mark.parametrize("argv", [
    ["java", "-Xmx2g", "SparkSubmit"],      # enough
    ["java", "SparkSubmit"],                # the JVM's own default: not Spark's 1g, say nothing
])
def test_no_warning_with_enough_or_unknown_heap(tmp_path, monkeypatch, argv):
    proc = fake_proc(tmp_path / "proc", {20: (10, ["python3"]), 10: (1, argv)})
    monkeypatch.setattr(heap_check.os, "getpid", lambda: 20)
    assert not heap_check.warn_once_if_heap_is_small(proc, tmp_path)


def test_no_jvm_among_the_ancestors_says_nothing(tmp_path, monkeypatch):
    proc = fake_proc(tmp_path / "proc", {20: (10, ["python3"]), 10: (1, ["bash"])})
    monkeypatch.setattr(heap_check.os, "getpid", lambda: 20)
    assert not heap_check.warn_once_if_heap_is_small(proc, tmp_path)
    assert heap_check.jvm_ancestor(20, tmp_path / "nowhere") is None


def test_a_reused_pid_warns_again_and_markers_of_gone_jvms_are_removed(tmp_path, monkeypatch):
    """Markers are named by pid and start time: a new JVM that got an old JVM's pid warns,
    and the markers of JVMs no longer running do not pile up in the temp directory."""
    proc = fake_proc(tmp_path / "proc", {20: (10, ["python3"]), 10: (1, ["java", "-Xmx1g"])})
    monkeypatch.setattr(heap_check.os, "getpid", lambda: 20)
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "rotsink-small-heap-warned-10-777").touch()  # pid 10, an earlier JVM
    (markers / "rotsink-small-heap-warned-4242-5").touch()  # a JVM gone
    assert heap_check.warn_once_if_heap_is_small(proc, markers)
    assert sorted(p.name for p in markers.iterdir()) == ["rotsink-small-heap-warned-10-1010"]
