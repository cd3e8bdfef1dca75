"""Reads as streams: a large file read by several tasks (splits), in memory bounded by a
block or a unit, units skipped by their statistics, and a file the protocol moves in the
middle of a read."""

from __future__ import annotations

import base64
import random
import subprocess
import sys
import textwrap
import uuid
from collections import Counter

import pyarrow as pa
import pytest

from commit_protocol.commit.housekeeping import delete_orphans
from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.reading import (
    FileSplit,
    TaskFilters,
    committed_files,
    open_committed,
    read_batches,
)
from commit_protocol.reading.bulk import finished_batches
from commit_protocol.reading.predicates import GT, IN, IS_NULL, LT, Predicate
from commit_protocol.reading.rows import row_batches
from tests.unit.test_task_writer import commit, config, rows, run_task, storage_of

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])


def strings(start: int, n: int) -> pa.Array:
    return pa.array([f"row {i}, \"q\" \\ ü" for i in range(start, start + n)])


def write(tmp_path, n: int = 60_000, *, batches: int = 6, **kw):
    """One file of ``n`` rows (ids 0..n-1) in ``batches`` appends, finished (rolled) unless
    ``rotation`` says otherwise; returns the config."""
    cfg = config(tmp_path, **{"rotation": {"max_records": n}, **kw})
    step = n // batches
    report = run_task(tmp_path, cfg, 0, [rows(i, step, s=strings(i, step))
                                         for i in range(0, n, step)])
    commit(tmp_path, cfg, 0, report)
    return cfg


def planned(cfg):
    committed = open_committed(storage_of(cfg))
    assert committed is not None
    log, latest, state = committed
    return committed_files(log, latest, state), state


def ids_of(cfg, items, state, **kw) -> list[int]:
    ring = cfg.keys.ring() if cfg.keys is not None else None
    return [i for item in items
            for batch in read_batches(storage_of(cfg), item, state=state, schema=SCHEMA,
                                      ring=ring, **kw)
            for i in batch.column("id").to_pylist()]


def random_splits(f, count: int, seed: int) -> list[FileSplit]:
    cuts = sorted(random.Random(seed).sample(range(1, f.length), count - 1))
    bounds = [0, *cuts, f.length]
    return [FileSplit(f, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


@pytest.mark.parametrize("fmt, kw", [
    ("jsonl", {}),
    ("text", {}),
    ("parquet", {"compression": "snappy", "file_suffix": ".parquet", "row_group_bytes": 64 << 10}),
    # uncompressed: ORC's stripes are cut by encoded size, and these strings compress to little
    ("orc", {"compression": "none", "file_suffix": ".orc", "row_group_bytes": 64 << 10}),
])
def test_splits_of_a_file_read_every_row_once(tmp_path, fmt, kw):
    """Byte ranges cut anywhere (inside a line, a row group, a stripe): every row is read by
    exactly one split."""
    schema = SCHEMA if fmt != "text" else pa.schema([("s", pa.string())])
    cfg = config(tmp_path, format=fmt, rotation={"max_records": 60_000}, **kw)
    batch = rows(0, 60_000, s=strings(0, 60_000))
    if fmt == "text":
        batch = pa.RecordBatch.from_arrays([batch.column("s")], ["s"])
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [batch]))
    (f,), state = planned(cfg)
    whole = [r for b in read_batches(storage_of(cfg), f, state=state, schema=schema)
             for r in b.column("s").to_pylist()]
    assert len(whole) == 60_000
    for seed in range(3):
        parts = [[r for b in read_batches(storage_of(cfg), split, state=state, schema=schema)
                  for r in b.column("s").to_pylist()]
                 for split in random_splits(f, 7, seed)]
        assert Counter(r for part in parts for r in part) == Counter(whole), seed
        if fmt in ("parquet", "orc", "jsonl"):
            assert sum(1 for part in parts if part) >= 3, "the rows spread over the splits"


def test_a_split_boundary_on_a_line_start_gives_that_line_to_the_later_split(tmp_path):
    cfg = write(tmp_path, 10, batches=1)
    (f,), state = planned(cfg)
    data = (tmp_path / f.path).read_bytes()
    second_line = data.index(b"\n") + 1
    first = ids_of(cfg, [FileSplit(f, 0, second_line)], state)
    rest = ids_of(cfg, [FileSplit(f, second_line, f.length)], state)
    assert (first, rest) == ([0], list(range(1, 10)))


KEY = base64.b64encode(b"k" * 32).decode()

READ_ONE_FILE = textwrap.dedent("""
    import sys, pyarrow as pa
    from commit_protocol.reading import committed_files, open_committed
    from commit_protocol.reading.rows import row_batches
    from commit_protocol.storage import open_storage
    from commit_protocol.crypto.keys import KeyRefs
    storage = open_storage(sys.argv[1])
    log, latest, state = open_committed(storage)
    (f,) = committed_files(log, latest, state)
    ring = KeyRefs(sys.argv[2]).ring() if len(sys.argv) > 2 else None
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    def rss():
        fields = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
        return int(fields["VmHWM"].split()[0]) // 1024
    batches = row_batches(storage, f, layout=state, schema=schema, ring=ring,
                          block_bytes=1 << 20)
    rows = next(batches).num_rows  # the modules a read imports are loaded now
    before = rss()
    rows += sum(b.num_rows for b in batches)
    print(rows, rss() - before)
""")


@pytest.mark.parametrize("compression, encrypted", [("none", False), ("gzip", False),
                                                    ("zstd", True)])
def test_a_row_file_is_read_in_memory_bounded_by_its_blocks(tmp_path, monkeypatch, compression,
                                                            encrypted):
    """A 65 MB JSON lines file read with 1 MB blocks (in a fresh process, whose peak resident
    memory is measured after the first block): the peak grows by a fraction of the file, the
    same for a file twice the size (measured: 28-30 MB), where reading it whole held its
    bytes, its plaintext and its decoded rows at once."""
    monkeypatch.setenv("ROTSINK_TEST_KEY", KEY)
    keys = KeyRefs("env:ROTSINK_TEST_KEY") if encrypted else None
    write(tmp_path, 1_500_000, batches=10, compression=compression, keys=keys)
    args = [sys.executable, "-c", READ_ONE_FILE, str(tmp_path)]
    if encrypted:
        args.append("env:ROTSINK_TEST_KEY")
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()
    rows_read, grew_mb = int(out[0]), int(out[1])
    assert rows_read == 1_500_000  # 65 MB of JSON lines
    assert grew_mb < 40, f"peak resident memory grew by {grew_mb} MB reading a 65 MB file"


def test_units_ruled_out_by_statistics_are_not_read(tmp_path):
    """Parquet row groups and ORC stripes of sorted ids: a filter on the id reads only the
    units that may hold matches (the rows returned are a superset of the matches: Spark
    still filters them)."""
    for fmt in ("parquet", "orc"):
        cfg = write(tmp_path / fmt, 60_000, format=fmt, compression="none",
                    file_suffix=f".{fmt}", row_group_bytes=64 << 10)
        (f,), state = planned(cfg)

        def read(*predicates, state=state, f=f, cfg=cfg):
            return ids_of(cfg, [f], state, filters=TaskFilters(data=predicates))

        everything = read()
        assert everything == list(range(60_000)), fmt
        few = read(Predicate(LT, "id", 100))
        assert set(range(100)) <= set(few) and len(few) < 20_000, (fmt, len(few))
        assert read(Predicate(GT, "id", 10**9)) == [], fmt
        assert read(Predicate(IS_NULL, "id")) == [], fmt
        both_ends = read(Predicate(IN, "id", (5, 59_990)))
        assert {5, 59_990} <= set(both_ends) and len(both_ends) < 30_000, fmt


def test_a_file_moved_in_the_middle_of_a_read_is_read_on_from_where_it_went(tmp_path):
    """On an object store a roll composes the file and deletes its segments: a read that
    had fetched its first megabyte goes on from the finished object at the same offset."""
    cfg = config(tmp_path, path=f"memory://mid-{uuid.uuid4().hex}",
                 rotation={"max_batches": 2})
    try:
        commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 200_000,
                                                                  s=strings(0, 200_000))]))
        (f,), state = planned(cfg)
        assert f.in_progress and f.length > 3 << 20
        batches = row_batches(storage_of(cfg), f, layout=state, schema=SCHEMA, ring=None,
                              block_bytes=64 << 10)
        first = next(batches)
        result = commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(200_000, 5,
                                                                           s=strings(0, 5))]))
        assert [p.reason for p in result.finalized] == ["maxBatches"]
        newest = open_committed(storage_of(cfg))
        assert newest is not None
        delete_orphans(storage_of(cfg), newest[2], expired_before=2**62)
        assert not storage_of(cfg).exists(f.path)
        ids = first.column("id").to_pylist() + [i for b in batches
                                                for i in b.column("id").to_pylist()]
        assert ids == list(range(200_000))
    finally:
        storage_of(cfg).delete_tree("")


def test_finished_units_of_a_split_follow_the_middle_byte_rule(tmp_path):
    cfg = write(tmp_path, 60_000, format="parquet", compression="none",
                file_suffix=".parquet", row_group_bytes=64 << 10)
    (f,), state = planned(cfg)
    halves = [FileSplit(f, 0, f.length // 2), FileSplit(f, f.length // 2, f.length)]
    counts = [len(ids_of(cfg, [split], state)) for split in halves]
    assert sum(counts) == 60_000 and min(counts) > 0
    assert sum(b.num_rows for b in finished_batches(storage_of(cfg), f, layout=state,
                                                    schema=SCHEMA, ring=None,
                                                    start=f.length, end=None)) == 0
