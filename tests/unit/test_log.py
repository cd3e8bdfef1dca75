"""The metadata log: Spark's format, batch-id arithmetic, corrupt files named in errors."""

from __future__ import annotations

import json

import pytest

from commit_protocol.errors import CorruptLogError
from commit_protocol.log import MetadataLog, file_entry, log_file_name
from commit_protocol.state import SinkState
from commit_protocol.storage import LocalStorage


def state(batch_id: int) -> SinkState:
    return SinkState(batch_id=batch_id, query_id="q", schema_json="{}", format="jsonl",
                     compression="none", partition_by=(), compact_interval=3)


def commit(log: MetadataLog, batch_id: int, names: list[str], now_ms: int = 1000) -> None:
    entries = [file_entry(f"{log.storage.root_uri}/{n}", 10, now_ms) for n in names]
    log.stage(state(batch_id), entries, now_ms=now_ms, retention_ms=None)
    assert log.publish(batch_id)


@pytest.fixture
def log(tmp_path) -> MetadataLog:
    return MetadataLog(LocalStorage(str(tmp_path)), compact_interval=3)


def listed(log: MetadataLog, batch_id: int) -> list[str]:
    return sorted(e["path"].rsplit("/", 1)[-1] for e in log.finalized_entries(batch_id))


def test_files_follow_spark_naming_and_format(log, tmp_path):
    for b in range(4):
        commit(log, b, [f"f{b}"])
    assert sorted(p.name for p in (tmp_path / "_spark_metadata").iterdir()) == \
        ["0", "1", "2.compact", "3"]
    lines = (tmp_path / "_spark_metadata" / "2.compact").read_text().splitlines()
    assert lines[0] == "v1"
    entries = [json.loads(line) for line in lines[1:]]
    assert entries[0]["isDir"] is True and "rotsink" in entries[0]
    files = entries[1:]
    assert [e["path"].rsplit("/", 1)[-1] for e in files] == ["f0", "f1", "f2"]
    assert all(set(e) == {"path", "size", "isDir", "modificationTime", "blockReplication",
                          "blockSize", "action"} and e["action"] == "add" for e in files)
    assert listed(log, 3) == ["f0", "f1", "f2", "f3"]


def test_publish_never_overwrites(log, tmp_path):
    commit(log, 0, ["a"])
    log.stage(state(0), [], now_ms=1, retention_ms=None)
    assert log.publish(0) is False
    assert listed(log, 0) == ["a"]


def test_compaction_drops_entries_older_than_retention(log):
    commit(log, 0, ["old"], now_ms=1_000)
    commit(log, 1, ["new"], now_ms=9_000)
    entries = [file_entry(f"{log.storage.root_uri}/cur", 10, 10_000)]
    log.stage(state(2), entries, now_ms=10_000, retention_ms=5_000)
    log.publish(2)
    assert listed(log, 2) == ["cur", "new"]


def test_delete_expired_keeps_two_compactions(log, tmp_path):
    for b in range(9):
        commit(log, b, [f"f{b}"])
    deleted = log.delete_expired(latest=8, now_ms=10**15, delay_ms=0)
    # newest compaction 8, the one before it 5: everything older goes
    assert sorted(p.rsplit("/", 1)[-1] for p in deleted) == ["0", "1", "2.compact", "3", "4"]
    assert sorted(p.name for p in (tmp_path / "_spark_metadata").iterdir()) == \
        ["5.compact", "6", "7", "8.compact"]
    assert listed(log, 8) == [f"f{b}" for b in range(9)]


@pytest.mark.parametrize("content, message", [
    (b"", "expected version line 'v1', found ''"),
    (b"v2\n{}\n", "expected version line 'v1', found 'v2'"),
    (b"v1\n{\"path\": \"x\", \"si", "line 2 is not JSON"),
    (b"v1\n[1, 2]\n", "line 2: expected an entry"),
], ids=["empty", "future-version", "truncated-line", "not-an-entry"])
def test_corrupt_log_file_is_named(log, tmp_path, content, message):
    commit(log, 0, ["a"])
    (tmp_path / "_spark_metadata" / "0").write_bytes(content)
    with pytest.raises(CorruptLogError, match=message) as info:
        log.read_state(0)
    assert "_spark_metadata/0" in str(info.value)


def test_log_file_name_examples():
    assert [log_file_name(b, 10) for b in (0, 9, 10, 19)] == ["0", "9.compact", "10", "19.compact"]


def test_readers_take_the_interval_the_path_was_written_with(log):
    """Interval 3, not the default 10: with 10 a reader would read 0..7 as deltas (listing
    the files of 2.compact twice) or fail on the deleted ones."""
    from commit_protocol.reading import committed_files, open_committed

    for b in range(8):
        commit(log, b, [f"f{b}"], now_ms=0)
    log.delete_expired(latest=7, now_ms=10, delay_ms=0)  # keeps 2.compact onwards
    opened, latest, state = open_committed(log.storage)
    files = committed_files(opened, latest, state, include_in_progress=False)
    assert (latest, opened.interval) == (7, 3)
    assert sorted(f.path for f in files) == [f"f{b}" for b in range(8)]
