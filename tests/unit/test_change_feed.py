"""The change feed without Spark: a reader that follows the sink batch by batch (or in jumps)
returns every committed row exactly once, across task and driver rolls, compaction, staged
files encoded at their roll, compression and encryption."""

from __future__ import annotations

import base64
import gzip
import os
import random
from collections import Counter

import pyarrow as pa
import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.formats import FORMATS
from commit_protocol.log import MetadataLog
from commit_protocol.log.feed_states import FEED_DIR
from commit_protocol.reading.change_feed import (
    FeedBehindError,
    FeedPosition,
    batches_within,
    feed_state,
    piece_batches,
    plan,
)
from commit_protocol.records.messages import TaskReport
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary.errors import CorruptLogError
from tests.unit.test_task_writer import SCHEMA_JSON, config, plan_for, storage_of

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("g", pa.string())])


def rows(start: int, n: int) -> pa.RecordBatch:
    ids = list(range(start, start + n))
    return pa.record_batch({"id": pa.array(ids, pa.int64()),
                            "name": [f'row "{i}", ü\\' for i in ids],
                            "g": [f"g{i % 2}" for i in ids]}, schema=SCHEMA)


def write_batch(tmp_path, cfg, batch_id: int, start: int, n: int, *, now_ms: int) -> None:
    reports: list[TaskReport | None] = []
    for partition, part in enumerate((rows(start, n // 2), rows(start + n // 2, n - n // 2))):
        writer = TaskWriter(storage_of(cfg), cfg, plan_for(tmp_path, cfg), batch_id=batch_id,
                            partition=partition, attempt=0, query_id="q")
        reports.append(writer.write([part] if part.num_rows else []))
    Committer(storage_of(cfg), cfg, SCHEMA_JSON).commit(batch_id, reports, now_ms=now_ms)


def feed(cfg, position: FeedPosition, end: int, ring=None) -> tuple[list[int], FeedPosition]:
    storage = storage_of(cfg)
    log = MetadataLog(storage, compact_interval=cfg.compact_interval)
    state = feed_state(log, end)
    pieces, after = plan(log, position, end, bulk=FORMATS[cfg.format].bulk)
    ids = [i for p in pieces
           for b in piece_batches(storage, p, state=state, schema=SCHEMA, ring=ring)
           for i in b.column("id").to_pylist()]
    return ids, after


CASES: dict[str, dict[str, object]] = {
    "jsonl": {},
    "csv": {"format": "csv", "file_suffix": ".csv"},
    "jsonl-zstd-encrypted": {"compression": "zstd", "encrypted": True},
    "csv-gzip": {"format": "csv", "file_suffix": ".csv.gz", "compression": "gzip"},
    "parquet": {"format": "parquet", "file_suffix": ".parquet", "compression": "zstd"},
    "parquet-encrypted": {"format": "parquet", "file_suffix": ".parquet",
                          "compression": "snappy", "encrypted": True},
    "orc": {"format": "orc", "file_suffix": ".orc", "compression": "zstd"},
    "avro-encrypted": {"format": "avro", "file_suffix": ".avro.enc", "compression": "deflate",
                       "encrypted": True},
}


def case_config(tmp_path, monkeypatch, case: str, **extra):
    options: dict = dict(CASES[case])
    ring = None
    if options.pop("encrypted", False):
        monkeypatch.setenv("FEED_KEY", base64.b64encode(os.urandom(32)).decode())
        options["keys"] = KeyRefs("env:FEED_KEY")
        ring = KeyRefs(read_refs=("env:FEED_KEY",)).ring()
    cfg = config(tmp_path, partition_by=("g",), compact_interval=3,
                 rotation={"max_records": 25, "max_batches": 4}, **options, **extra)
    return cfg, ring


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_row_exactly_once_following_batch_by_batch_or_in_jumps(tmp_path, monkeypatch,
                                                                     case):
    cfg, ring = case_config(tmp_path, monkeypatch, case)
    rng = random.Random(case)
    position, jumps = FeedPosition(-1), FeedPosition(-1)
    seen: Counter[int] = Counter()
    jumped: Counter[int] = Counter()
    total = 0
    for batch in range(12):
        n = rng.randrange(0, 30)
        write_batch(tmp_path, cfg, batch, total, n, now_ms=batch)
        total += n
        ids, position = feed(cfg, position, batch, ring)
        seen.update(ids)
        assert sorted(seen) == list(range(total)), f"after batch {batch}"
        if batch % 5 == 4:  # another reader, several batches per micro-batch
            ids, jumps = feed(cfg, jumps, batch, ring)
            jumped.update(ids)
    ids, jumps = feed(cfg, jumps, 11, ring)
    jumped.update(ids)
    for counts in (seen, jumped):
        assert set(counts) == set(range(total)) and max(counts.values()) == 1


def test_a_position_round_trips_through_json():
    position = FeedPosition(7, (("g=a/part-00000-000003-000.jsonl", 120, 4),))
    assert FeedPosition.from_json(position.to_json()) == position


def test_a_feed_behind_the_log_clean_up_fails_naming_the_setting(tmp_path):
    cfg = config(tmp_path, compact_interval=2, cleanup_delay_ms=0, rotation={"max_batches": 1})
    for batch in range(8):  # clean-up compares file times with the commit's clock
        write_batch(tmp_path, cfg, batch, batch * 4, 4, now_ms=10**13 + batch)
    log = MetadataLog(storage_of(cfg), compact_interval=2)
    with pytest.raises(FeedBehindError, match=r"needs sink batch 1, whose metadata log file "
                                              r"_spark_metadata/1.compact was deleted .*"
                                              r"log.cleanupDelay and feed.retention"):
        plan(log, FeedPosition(0), 7, bulk=False)


@pytest.mark.parametrize("case", ["jsonl", "parquet", "orc", "jsonl-zstd-encrypted"])
def test_a_feed_paused_past_the_log_clean_up_reads_every_row_once_from_kept_states(
        tmp_path, monkeypatch, case):
    """With ``feed.retention``, the clean-up keeps the states of the batches whose log files
    it deletes: a feed that paused through 20 batches and their clean-ups (their log files
    gone) reads every row once, in one micro-batch or batch by batch."""
    cfg, ring = case_config(tmp_path, monkeypatch, case, cleanup_delay_ms=0,
                            feed_retention_ms=7 * 24 * 3600 * 1000)
    rng = random.Random(case)
    total = 0
    for batch in range(20):  # clean-up compares file times with the commit's clock
        n = rng.randrange(1, 30)
        write_batch(tmp_path, cfg, batch, total, n, now_ms=10**13 + batch)
        total += n
    storage = storage_of(cfg)
    assert not storage.exists("_spark_metadata/0"), "the clean-up deleted the early log files"
    assert storage.list(FEED_DIR), "and kept their states"
    at_once, _ = feed(cfg, FeedPosition(-1), 19, ring)
    one_by_one: list[int] = []
    position = FeedPosition(-1)
    for batch in range(20):
        ids, position = feed(cfg, position, batch, ring)
        one_by_one += ids
    for ids in (at_once, one_by_one):
        assert sorted(ids) == list(range(total))


def test_kept_states_expire_after_the_retention_and_the_feed_then_says_so(tmp_path):
    """Segments older than ``feed.retention`` are deleted by a later clean-up (their number
    stays bounded by the retention); a feed needing one of their states fails naming the
    setting."""
    hour = 3600 * 1000
    cfg = config(tmp_path, compact_interval=2, cleanup_delay_ms=0, feed_retention_ms=hour,
                 rotation={"max_batches": 1})
    storage = storage_of(cfg)
    counts = []
    for batch in range(40):  # a batch every 6 minutes: the retention holds 10 of them
        write_batch(tmp_path, cfg, batch, batch * 4, 4, now_ms=10**13 + batch * hour // 10)
        counts.append(len(storage.list(FEED_DIR)))
    assert max(counts[20:]) <= 7, counts
    print(counts)  # a segment per clean-up (2 batches), for an hour
    log = MetadataLog(storage, compact_interval=2)
    ids, _ = feed(cfg, FeedPosition.of(feed_state(log, 29)), 39)
    assert sorted(ids) == list(range(30 * 4, 40 * 4))
    with pytest.raises(FeedBehindError, match="needs sink batch 1, .*feed.retention"):
        plan(log, FeedPosition(0), 39, bulk=False)


def test_a_clean_up_cut_short_while_deleting_log_files_never_fails_a_later_batch(
        tmp_path, monkeypatch, caplog):
    """A driver killed after the first DELETE of a group's log files (its compaction
    gone, its deltas left): every later clean-up skips the states it cannot read (kept
    before any delete) and the query goes on, where reading them failed every compaction
    batch after; a feed paused through it all reads every row once."""
    import logging

    from commit_protocol.log import STATES
    from commit_protocol.storage import LocalStorage
    from commit_protocol.vocabulary.failpoints import FailpointError

    cfg = config(tmp_path, compact_interval=2, cleanup_delay_ms=0,
                 feed_retention_ms=3_600_000, rotation={"max_batches": 1})
    for batch in range(7):
        write_batch(tmp_path, cfg, batch, batch * 4, 4, now_ms=10**13 + batch)
    real = LocalStorage.delete_all
    failed: list[str] = []

    def cut_short(self, files):
        files = sorted(files, key=lambda f: f.path)
        logs = [f for f in files if f.path.startswith("_spark_metadata/")]
        if logs and not failed:  # the group's compaction first, then the store fails
            compaction = next(f for f in logs if f.path.endswith(".compact"))
            real(self, [compaction])
            failed.append(compaction.path)
            raise FailpointError("killed")
        real(self, files)

    monkeypatch.setattr(LocalStorage, "delete_all", cut_short)
    with pytest.raises(FailpointError):  # batch 7: a compaction, and its clean-up
        write_batch(tmp_path, cfg, 7, 7 * 4, 4, now_ms=10**13 + 7)
    assert failed, "killed mid-delete"
    STATES.clear()  # the next driver remembers nothing
    with caplog.at_level(logging.WARNING, logger="rotsink.commit"):
        for batch in range(8, 14):
            write_batch(tmp_path, cfg, batch, batch * 4, 4, now_ms=10**13 + batch)
    assert "is not kept for change feeds" in caplog.text
    ids, _ = feed(cfg, FeedPosition(-1), 13)
    assert sorted(ids) == list(range(14 * 4))


def test_admission_limits_take_whole_sink_batches_and_never_stall(tmp_path):
    cfg = config(tmp_path, rotation={"max_batches": 1})
    for batch in range(6):
        write_batch(tmp_path, cfg, batch, batch * 10, 10, now_ms=batch)
    log = MetadataLog(storage_of(cfg), compact_interval=cfg.compact_interval)
    start = FeedPosition(-1)
    assert batches_within(log, start, 5, max_batches=2, max_files=0, max_bytes=0) == 1
    assert batches_within(log, start, 5, max_batches=0, max_files=4, max_bytes=0) == 1
    assert batches_within(log, start, 5, max_batches=0, max_files=1, max_bytes=0) == 0
    assert batches_within(log, start, 5, max_batches=0, max_files=0, max_bytes=1) == 0
    assert batches_within(log, start, 5, max_batches=0, max_files=0, max_bytes=0) == 5


def test_a_damaged_segment_is_named(tmp_path):
    cfg = config(tmp_path, compact_interval=2, cleanup_delay_ms=0,
                 feed_retention_ms=3_600_000, rotation={"max_batches": 1})
    for batch in range(8):
        write_batch(tmp_path, cfg, batch, batch * 4, 4, now_ms=10**13 + batch)
    storage = storage_of(cfg)
    segment = min(info.path for info in storage.list(FEED_DIR))
    (tmp_path / segment).write_bytes(gzip.compress(b'{"version": 1, "batch_id": 0}\n'))
    log = MetadataLog(storage, compact_interval=2)
    with pytest.raises(CorruptLogError, match=f"change-feed segment {segment}, line 1: "):
        plan(log, FeedPosition(-1), 7, bulk=False)
