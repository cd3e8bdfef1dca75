"""The metadata log: Spark's format, batch-id arithmetic, corrupt files named in errors."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator

import pytest

from commit_protocol.log import MetadataLog
from commit_protocol.log.files import log_file_name
from commit_protocol.log.lines import OWN_ENTRY, dumps, file_entry
from commit_protocol.records.state import SinkState
from commit_protocol.storage import LocalStorage
from commit_protocol.vocabulary.errors import CorruptLogError


def state(batch_id: int) -> SinkState:
    return SinkState(batch_id=batch_id, query_id="q", schema_json="{}", format="jsonl",
                     compression="none", partition_by=(), compact_interval=3)


def commit(log: MetadataLog, batch_id: int, names: list[str], now_ms: int = 1000) -> None:
    entries = [file_entry(f"{log.storage.root_uri}/{n}", 10, now_ms) for n in names]
    previous = None if batch_id == 0 else log.read_state(batch_id - 1)
    log.stage(state(batch_id), entries, previous=previous, now_ms=now_ms, retention_ms=None)
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
    assert entries[1]["isDir"] is True and "rotsink_snapshot" in entries[1]  # a compaction's
    files = entries[2:]
    assert [e["path"].rsplit("/", 1)[-1] for e in files] == ["f0", "f1", "f2"]
    assert all(set(e) == {"path", "size", "isDir", "modificationTime", "blockReplication",
                          "blockSize", "action"} and e["action"] == "add" for e in files)
    assert listed(log, 3) == ["f0", "f1", "f2", "f3"]


def test_publish_never_overwrites(log, tmp_path):
    commit(log, 0, ["a"])
    data = log.stage(state(0), [], previous=None, now_ms=1, retention_ms=None, intent=False)
    assert log.publish(0, data) is False
    assert listed(log, 0) == ["a"]


def test_compaction_drops_entries_older_than_retention(log):
    commit(log, 0, ["old"], now_ms=1_000)
    commit(log, 1, ["new"], now_ms=9_000)
    entries = [file_entry(f"{log.storage.root_uri}/cur", 10, 10_000)]
    log.stage(state(2), entries, previous=log.read_state(1), now_ms=10_000, retention_ms=5_000)
    log.publish(2)
    assert listed(log, 2) == ["cur", "new"]


def test_delete_expired_keeps_two_compactions(log, tmp_path):
    for b in range(9):
        commit(log, b, [f"f{b}"])
    deleted = log.delete_expired(log.expired(latest=8, now_ms=10**15, delay_ms=0))
    # newest compaction 8, the one before it 5: everything older goes
    assert sorted(p.rsplit("/", 1)[-1] for p in deleted) == ["0", "1", "2.compact", "3", "4"]
    assert sorted(p.name for p in (tmp_path / "_spark_metadata").iterdir()) == \
        ["5.compact", "6", "7", "8.compact"]
    assert listed(log, 8) == [f"f{b}" for b in range(9)]


def test_a_compaction_and_its_deltas_expire_together(log, tmp_path):
    """A clean-up whose cut by age falls inside a group (5.compact and 6 old, 7 young)
    deletes none of it: 7's state and listing are read through 5.compact and 6, and the
    next clean-up reads the state of each file it deletes (to keep it for change feeds)."""
    from commit_protocol.log import STATES

    for b in range(12):
        commit(log, b, [f"f{b}"])
    meta = tmp_path / "_spark_metadata"
    for path in meta.iterdir():
        os.utime(path, (100, 100))  # 100 s after the epoch: old
    os.utime(meta / "7", (10**6, 10**6))  # written after the cut
    expired = log.expired(latest=11, now_ms=500_000, delay_ms=0)
    assert sorted(expired) == [0, 1, 2, 3, 4]
    log.delete_expired(expired)
    STATES.clear()  # another process: nothing remembered
    fresh = MetadataLog(LocalStorage(str(tmp_path)), compact_interval=3)
    assert fresh.read_state(7).batch_id == 7
    assert listed(fresh, 7) == [f"f{b}" for b in range(8)]
    os.utime(meta / "7", (100, 100))  # the whole group old: it goes at once
    assert sorted(fresh.expired(latest=11, now_ms=500_000, delay_ms=0)) == [5, 6, 7]


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
    log.delete_expired(log.expired(latest=7, now_ms=10, delay_ms=0))  # keeps 2.compact on
    committed = open_committed(log.storage)
    assert committed is not None
    opened, latest, state = committed
    files = committed_files(opened, latest, state, include_in_progress=False)
    assert (latest, opened.interval) == (7, 3)
    assert sorted(f.path for f in files) == [f"f{b}" for b in range(8)]


# Lines a compaction meets besides its own, each with why it must be parsed, not copied.
FOREIGN_LINES = [
    ("spaced", b'{"path": "file:///x/a", "size": 3, "isDir": false, "action": "add"}\n',
     "another writer's spacing"),
    ("escaped-path", dumps(file_entry('file:///x/a"b\\c\u00e9', 3, 1000)),
     "escapes: the path is not the raw bytes"),
    ("no-newline", dumps(file_entry("file:///x/last", 3, 1000)).rstrip(b"\n"),
     "a hand edit that cut the final newline"),
    ("crlf", dumps(file_entry("file:///x/crlf", 3, 1000)).replace(b"\n", b"\r\n"),
     "an editor's line ends"),
]


@pytest.mark.parametrize("line, why", [f[1:] for f in FOREIGN_LINES],
                         ids=[f[0] for f in FOREIGN_LINES])
def test_compaction_copies_own_lines_and_rewrites_others(log, tmp_path, line, why):
    commit(log, 0, ["a", "b"])
    commit(log, 1, ["c"])
    delta = tmp_path / "_spark_metadata" / "1"
    delta.write_bytes(delta.read_bytes() + line)
    own = delta.read_bytes().splitlines(keepends=True)[2]
    commit(log, 2, ["d"])
    lines = (tmp_path / "_spark_metadata" / "2.compact").read_bytes().splitlines(keepends=True)
    assert own in lines  # the sink's own line, byte for byte
    rewritten = dumps(json.loads(line))
    assert lines.count(rewritten) == 1, why
    assert listed(log, 2) == sorted(["a", "b", "c", "d",
                                     json.loads(line)["path"].rsplit("/", 1)[-1]])


def test_fast_path_entries_equal_parsed_ones(log, tmp_path):
    """Own lines are read without the JSON parser: they must come out exactly as parsed."""
    commit(log, 0, ["a b", "c%2Fd", "x" * 300])
    raw = (tmp_path / "_spark_metadata" / "0").read_bytes().splitlines(keepends=True)[2:]
    assert [json.loads(r) for r in raw] == list(log.finalized_entries(0))
    assert all(OWN_ENTRY.fullmatch(r) for r in raw)


@pytest.mark.parametrize("bad", [
    b'{"path":"file:///x/a","size":-1,"isDir":false,"modificationTime":1,'
    b'"blockReplication":1,"blockSize":1,"action":"add"}\n',
    b'{"path":"file:///x/a","size":"3","isDir":false,"modificationTime":1,'
    b'"blockReplication":1,"blockSize":1,"action":"add"}\n',
    b'{"path":"file:///x/a\\q","size":3,"isDir":false,"modificationTime":1,'
    b'"blockReplication":1,"blockSize":1,"action":"add"}\n',
], ids=["negative-size", "size-a-string", "bad-escape"])
def test_compaction_still_refuses_a_bad_line_that_looks_like_its_own(log, tmp_path, bad):
    commit(log, 0, ["a"])
    commit(log, 1, ["b"])
    delta = tmp_path / "_spark_metadata" / "1"
    delta.write_bytes(delta.read_bytes() + bad)
    with pytest.raises(CorruptLogError, match=r"metadata log file _spark_metadata/1 line 4"):
        commit(log, 2, ["c"])


def test_large_compaction_is_written_in_chunks_with_retention(log, tmp_path, monkeypatch):
    writes: list[int] = []
    original = log.storage.write_exclusive

    def counted(chunks: Iterable[bytes]) -> Iterator[bytes]:
        for c in chunks:
            writes.append(len(c))
            yield c

    monkeypatch.setattr(log.storage, "write_exclusive",
                        lambda path, chunks: original(path, counted(chunks)))
    # no larger log file is kept
    monkeypatch.setattr("commit_protocol.log.metadata_log.KEPT_BYTES", 100_000)
    commit(log, 0, [f"old{i:05d}" for i in range(3000)], now_ms=1_000)
    commit(log, 1, [f"new{i:05d}" for i in range(3000)], now_ms=9_000)
    writes.clear()
    kept = log.stage(state(2), [file_entry(f"{log.storage.root_uri}/cur", 10, 10_000)],
                     previous=log.read_state(1), now_ms=10_000, retention_ms=5_000)
    assert kept is None  # streamed to the intent, published from it
    assert log.publish(2)
    assert 2 < len(writes) < 10  # about 1 MB each, not one write per line
    assert listed(log, 2) == sorted(["cur"] + [f"new{i:05d}" for i in range(3000)])


def test_compaction_over_many_blocks_copies_exactly_and_numbers_bad_lines(log, tmp_path):
    names = [f"f{i:05d}-{'x' * 150}" for i in range(8000)]  # about 1.6 MB: two blocks
    commit(log, 0, names)
    commit(log, 1, ["g"])
    commit(log, 2, ["h"])
    meta = tmp_path / "_spark_metadata"
    entries = [f.read_bytes().splitlines(keepends=True)[2:] for f in (meta / "0", meta / "1")]
    compact = (meta / "2.compact").read_bytes().splitlines(keepends=True)
    assert compact[3:] == entries[0] + entries[1] + [compact[-1]]  # after head and snapshot
    assert listed(log, 2) == sorted(names + ["g", "h"])

    log2 = MetadataLog(LocalStorage(str(tmp_path / "other")), compact_interval=3)
    commit(log2, 0, names)
    lines = (tmp_path / "other" / "_spark_metadata" / "0").read_bytes().splitlines(keepends=True)
    lines[6002] = lines[6002].replace(b'"size":10', b'"size":"10"')  # entry 6000: line 6003
    (tmp_path / "other" / "_spark_metadata" / "0").write_bytes(b"".join(lines))
    commit(log2, 1, ["g"])
    with pytest.raises(CorruptLogError, match=r"_spark_metadata/0 line 6003: expected an entry"):
        commit(log2, 2, ["h"])
