"""The state in the log: a head of changes per batch, a snapshot per compaction, read back
whole from the cache, the snapshot or the chain of heads, and damage named."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from commit_protocol.log import STATES, MetadataLog, open_committed
from commit_protocol.records.state import InProgressFile, SinkState
from commit_protocol.storage import LocalStorage
from commit_protocol.vocabulary.errors import CorruptLogError

INTERVAL = 10


def file(partition: int, directory: str, size: int = 100, batch: int = 0) -> InProgressFile:
    name = f"{directory}/part-{partition:05d}-{batch:06d}-000.jsonl"
    temp = f"_rotsink/inprogress/.{partition}.{directory}"
    return InProgressFile(partition, directory, name, temp, size, size // 10, 1, batch * 1000,
                          batch * 1000)


def start(files: int) -> SinkState:
    return SinkState(batch_id=-1, query_id="q", schema_json="{}", format="jsonl",
                     compression="none", partition_by=("d",), compact_interval=INTERVAL,
                     in_progress=tuple(file(p % 200, f"d={p // 200}") for p in range(files)))


def appended(state: SinkState, batch: int, every: int) -> SinkState:
    """Batch ``batch``: every ``every``-th file grows, one file rolls and a new one opens."""
    files = [replace(f, size=f.size + 10, records=f.records + 1, last_append_ms=batch * 1000)
             if i % every == batch % every else f for i, f in enumerate(state.in_progress)]
    files = files[1:] + [file(999, f"d=new{batch}", batch=batch)]
    return replace(state.with_batch(batch, files), state_id=f"id{batch}",
                   open_partitions=((f"d=new{batch}", batch * 1000),))


def commit(log: MetadataLog, state: SinkState, previous: SinkState | None) -> None:
    log.stage(state, [], previous=previous, now_ms=state.batch_id, retention_ms=None)
    assert log.publish(state.batch_id)


def run(tmp_path: Path, batches: int, files: int = 2000, every: int = 100) -> list[SinkState]:
    log = MetadataLog(LocalStorage(str(tmp_path)), compact_interval=INTERVAL)
    states, previous = [], None
    state = start(files)
    for batch in range(batches):
        state = appended(state if batch else replace(state, batch_id=0), batch, every)
        commit(log, state, previous)
        states.append(state)
        previous = state
    return states


def log_bytes(tmp_path: Path, name: str) -> int:
    return (tmp_path / "_spark_metadata" / name).stat().st_size


def test_a_log_file_holds_what_changed_and_a_compaction_the_whole_state(tmp_path):
    run(tmp_path, 12)  # 2,000 files in progress, 1% appended per batch
    whole = log_bytes(tmp_path, "9.compact")
    deltas = [log_bytes(tmp_path, str(b)) for b in (3, 4, 5, 10, 11)]
    assert whole > 150_000  # 2,000 files, whole
    assert max(deltas) < 8_000, deltas  # 20 appended + a roll + an opened file


@pytest.mark.parametrize("cached", [True, False])
def test_every_batch_reads_back_whole(tmp_path, cached):
    states = run(tmp_path, 23)
    if not cached:
        STATES.clear()  # a new process: from the snapshot and the heads after it
    log = MetadataLog(LocalStorage(str(tmp_path)), compact_interval=INTERVAL)
    for state in reversed(states):
        assert log.read_state(state.batch_id) == state
    committed = open_committed(LocalStorage(str(tmp_path)))
    assert committed is not None and committed[2] == states[-1]


def test_a_cold_read_reads_the_snapshot_and_the_heads_after_it(tmp_path, monkeypatch):
    states = run(tmp_path, 15)
    STATES.clear()
    storage = LocalStorage(str(tmp_path))
    opened: list[str] = []
    original = storage.open_read

    def open_read(path: str):
        opened.append(path)
        return original(path)

    monkeypatch.setattr(storage, "open_read", open_read)
    assert MetadataLog(storage, compact_interval=INTERVAL).read_state(14) == states[14]
    assert sorted(set(opened)) == [f"_spark_metadata/{b}" for b in (10, 11, 12, 13, 14)] + \
        ["_spark_metadata/9.compact"]
    opened.clear()  # warm: the batch before is cached, one head is read
    commit(MetadataLog(storage, compact_interval=INTERVAL), appended(states[14], 15, 100),
           states[14])
    STATES.clear()
    MetadataLog(storage, compact_interval=INTERVAL).read_state(14)
    opened.clear()
    assert MetadataLog(storage, compact_interval=INTERVAL).read_state(15).batch_id == 15
    assert opened == ["_spark_metadata/15"]


def test_a_log_file_from_another_chain_is_named(tmp_path):
    run(tmp_path / "a", 5)
    run(tmp_path / "b", 5)
    meta = tmp_path / "a" / "_spark_metadata"
    body = (tmp_path / "b" / "_spark_metadata" / "2").read_text()
    entry = json.loads(body.splitlines()[1])
    entry["rotsink"]["id"] = "someone-else"
    (meta / "2").write_text("v1\n" + json.dumps(entry) + "\n")
    STATES.clear()
    with pytest.raises(CorruptLogError, match=r"_spark_metadata/3 follows the state 'id2', but "
                       r"_spark_metadata/2 holds the state 'someone-else'"):
        MetadataLog(LocalStorage(str(tmp_path / "a")), compact_interval=INTERVAL).read_state(4)


def test_a_compaction_without_its_snapshot_is_named(tmp_path):
    run(tmp_path, 11)
    path = tmp_path / "_spark_metadata" / "9.compact"
    version, head, _snapshot, *files = path.read_text().splitlines(keepends=True)
    path.write_text(version + head + "".join(files))
    STATES.clear()
    with pytest.raises(CorruptLogError, match=r"_spark_metadata/9.compact: expected "
                       r"rotsink's state snapshot on line 3, found the end of the file"):
        MetadataLog(LocalStorage(str(tmp_path)), compact_interval=INTERVAL).read_state(10)


def test_a_path_rewritten_in_the_same_process_is_read_again(tmp_path):
    first = run(tmp_path, 3)
    log = MetadataLog(LocalStorage(str(tmp_path)), compact_interval=INTERVAL)
    assert log.read_state(2) == first[2]
    for f in [*(tmp_path / "_spark_metadata").iterdir(), *(tmp_path / "_rotsink/intent").iterdir()]:
        f.unlink()
    second = [replace(s, query_id="other", state_id=f"other{s.batch_id}") for s in first]
    for before, state in zip([None, *second], second, strict=False):
        commit(log, state, before)
    assert log.read_state(2) == second[2]
