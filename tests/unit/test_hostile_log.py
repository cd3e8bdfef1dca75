"""Hostile input without Spark: a log or part file damaged by hand, seen by both sides.

Each case is named by the reader (``open_committed`` / ``committed_files`` / ``read_batches``, what
``spark.read.format("rotsink")`` runs) and by a restarted writer (``Committer.latest_state``,
what every micro-batch's ``streamWriter`` runs, or the next task or compaction), or it reads
back exactly. ``tests/unit/test_log.py`` pins ``read_state`` on empty, ``v2`` and torn files;
these add the other damage and the surfaces a user meets. The same cases through real Spark:
``tests/spark/test_hostile_input.py``.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.reading import committed_files, open_committed
from commit_protocol.storage import LocalStorage
from commit_protocol.vocabulary.errors import CommitError, CorruptLogError, RotsinkError
from tests.support.damage import append, truncate
from tests.unit.test_task_writer import (
    SCHEMA_JSON,
    commit,
    committed_ids,
    config,
    plan_for,
    rows,
    run_task,
)

INTERVAL = 4  # batch 3 is the first compaction: the next commit after `build` compacts


def build(tmp_path: Path):
    """Batches 0-2 (ids 0-6), each finalizing one file (2 records); id 6 stays in progress."""
    cfg = config(tmp_path, rotation={"max_records": 2}, compact_interval=INTERVAL)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(3, 2)]))
    commit(tmp_path, cfg, 2, run_task(tmp_path, cfg, 2, [rows(5, 2)]))
    return cfg


def log(root: Path, name: str) -> Path:
    return root / "_spark_metadata" / name


def lines(root: Path, name: str) -> list[bytes]:
    return log(root, name).read_bytes().splitlines(keepends=True)


def with_state(root: Path, name: str, change: Callable[[dict], None]) -> None:
    """Rewrite the rotsink state entry (line 2) of a log file."""
    head, state, *rest = lines(root, name)
    entry = json.loads(state)
    change(entry)
    log(root, name).write_bytes(b"".join([head, json.dumps(entry).encode() + b"\n", *rest]))




def delete_logs(root: Path, *names: str) -> None:
    for name in names:
        log(root, name).unlink()


def reader(root: Path) -> list:
    """What the rotsink reader plans on the driver: the latest state, then the listing."""
    opened = open_committed(LocalStorage(str(root)))
    assert opened is not None
    return committed_files(*opened, include_in_progress=True)


def restart(root: Path, cfg) -> None:
    """What every micro-batch of a restarted query runs first on the driver."""
    Committer(LocalStorage(str(root)), cfg, SCHEMA_JSON).latest_state()


# -- a log file unreadable -------------------------------------------------------------------
GARBAGE = random.Random(7).randbytes(300)

UNREADABLE: list[tuple[str, Callable[[Path], object], str]] = [
    ("truncated-in-state", lambda r: truncate(log(r, "2"), 40),
     r"metadata log file _spark_metadata/2 line 2 is not JSON"),
    ("empty", lambda r: log(r, "2").write_bytes(b""),
     r"metadata log file _spark_metadata/2: expected version line 'v1', found ''"),
    ("garbage", lambda r: log(r, "2").write_bytes(GARBAGE),
     r"metadata log file _spark_metadata/2: expected version line 'v1', found binary data; it was "
     r"written by an unknown or newer writer, or is corrupt"),
    ("future-version", lambda r: log(r, "2").write_bytes(b"v2\n" + b"".join(lines(r, "2")[1:])),
     r"metadata log file _spark_metadata/2: expected version line 'v1', found 'v2'"),
    ("crlf-line-ends", lambda r: log(r, "2").write_bytes(b"".join(lines(r, "2")).replace(b"\n",
                                                                                     b"\r\n")),
     r"metadata log file _spark_metadata/2: expected version line 'v1', found 'v1\\r'"),
    ("no-newline-in-a-large-file", lambda r: log(r, "2").write_bytes(b"x" * 100_000),
     r"metadata log file _spark_metadata/2: expected version line 'v1', found 'xxxx"),
    ("unknown-state-version",
     lambda r: with_state(r, "2", lambda e: e["rotsink"].update(version=3)),
     r"metadata log file _spark_metadata/2 line 2: bad rotsink state \(expected rotsink state "
     r"version 1 or 2, found 3: written by another \(newer\?\) rotsink"),
    ("state-field-missing", lambda r: with_state(r, "2", lambda e: e["rotsink"].pop("batch_id")),
     r"metadata log file _spark_metadata/2 line 2: bad rotsink state \(no field 'batch_id'\)"),
    ("state-not-an-object", lambda r: with_state(r, "2", lambda e: e.update(rotsink=[1])),
     r"metadata log file _spark_metadata/2 line 2: bad rotsink state \(expected an object, "
     r"found list\)"),
    ("version-line-only", lambda r: truncate(log(r, "2"), 3),
     r"metadata log file _spark_metadata/2: expected rotsink's state entry on line 2, found "
     r"the end of the file; truncated, or written by another sink\?"),
]


EARLIER: list[tuple[str, Callable[[Path], object], str]] = [
    ("delta-deleted", lambda r: log(r, "1").unlink(),
     r"metadata log file _spark_metadata/1 is missing: the output as of batch 2 is listed by "
     r"every log file from batch 0 to 2; deleted by hand\? Restore from a backup"),
    ("two-deltas-deleted", lambda r: delete_logs(r, "0", "1"),
     r"metadata log files _spark_metadata/0, _spark_metadata/1 are missing"),
    ("delta-garbage", lambda r: log(r, "1").write_bytes(GARBAGE),
     r"metadata log file _spark_metadata/1: expected version line 'v1'"),
    ("delta-entry-truncated", lambda r: truncate(log(r, "1"), log(r, "1").stat().st_size - 30),
     r"metadata log file _spark_metadata/1 line 3 is not JSON"),
    ("entry-size-not-a-number",
     lambda r: log(r, "1").write_bytes(_bad_size(r)),
     r"metadata log file _spark_metadata/1 line 3: expected an entry with a string 'path' and "
     r"a byte count 'size'"),
]


def _bad_size(root: Path) -> bytes:
    head, state, entry, *rest = lines(root, "1")
    body = json.loads(entry)
    body["size"] = "18"
    return b"".join([head, state, json.dumps(body).encode() + b"\n", *rest])


@pytest.mark.parametrize("damage, message", [e[1:] for e in EARLIER], ids=[e[0] for e in EARLIER])
def test_damaged_earlier_log_file_is_named_by_reader_and_never_compacted_over(
        tmp_path, damage, message):
    """A restart reads only the latest state, so it continues; but the next compaction
    (batch 3 here) reads every delta and must fail rather than drop batch 1's files."""
    cfg = build(tmp_path)
    damage(tmp_path)
    with pytest.raises(CorruptLogError, match=message):
        reader(tmp_path)
    restart(tmp_path, cfg)
    with pytest.raises(CorruptLogError, match=message):
        commit(tmp_path, cfg, 3, run_task(tmp_path, cfg, 3, [rows(7, 1)]))
    assert not log(tmp_path, "3.compact").exists()


@pytest.mark.parametrize("deleted, message", [
    (["2"], r"task of batch 3: expected the output's metadata log to end at batch 2, found it "
            r"ending at batch 1: _spark_metadata/2 is missing \(deleted by hand, or the output "
            r"restored from a copy older than the checkpoint\), so the rows those batches "
            r"committed are no longer listed. Restore the missing log file\(s\) from a backup, "
            r"or write to a new output path with a new checkpoint"),
    (["1", "2"], r"task of batch 3: .* found it ending at batch 0: _spark_metadata/1 to "
                 r"_spark_metadata/2 are missing"),
], ids=["newest", "two-newest"])
def test_newest_log_file_deleted_the_restarted_task_names_it(tmp_path, deleted, message):
    """Spark's checkpoint has committed batch 2, so the restarted query runs batch 3. The
    intents that could rebuild the deleted files are gone too (clean-up deletes them)."""
    cfg = build(tmp_path)
    for name in deleted:
        log(tmp_path, name).unlink()
        (tmp_path / "_rotsink" / "intent" / name).unlink()
    plan = plan_for(tmp_path, cfg)
    with pytest.raises(CommitError, match=message):
        run_task(tmp_path, cfg, 3, [rows(7, 1)], plan=plan)


def test_newest_log_files_deleted_with_their_intents_kept_are_rebuilt_as_committed(tmp_path):
    """An intent holds the exact bytes of its log file: the next planning finishes its commit
    again, as after a crash between the two, and the restarted query goes on."""
    cfg = build(tmp_path)
    committed = {name: log(tmp_path, name).read_bytes() for name in ("1", "2")}
    for name in committed:
        log(tmp_path, name).unlink()
    plan = plan_for(tmp_path, cfg)
    assert plan.latest_batch_id == 2
    assert {name: log(tmp_path, name).read_bytes() for name in committed} == committed
    commit(tmp_path, cfg, 3, run_task(tmp_path, cfg, 3, [rows(7, 1)], plan=plan))
    assert committed_ids(tmp_path, cfg) == list(range(8))


# -- a log file duplicated by hand -----------------------------------------------------------
DUPLICATED: list[tuple[str, Callable[[Path], object], str]] = [
    ("copied-beyond-latest", lambda r: shutil.copy(log(r, "1"), log(r, "9")),
     r"metadata log file _spark_metadata/9 holds the state of batch 1: expected batch 9; "
     r"copied or renamed by hand\?"),
    ("renamed-to-next-id", lambda r: log(r, "2").rename(log(r, "3.compact")),
     r"metadata log file _spark_metadata/3.compact holds the state of batch 2: expected batch 3"),
    ("two-files-for-one-id", lambda r: shutil.copy(log(r, "2"), log(r, "2.compact")),
     r"metadata log files _spark_metadata/2 and _spark_metadata/2.compact both hold batch 2: "
     r"expected one file per batch; one was copied or renamed by hand\?"),
    ("two-files-for-an-earlier-id", lambda r: shutil.copy(log(r, "0"), log(r, "0.compact")),
     r"metadata log files _spark_metadata/0 and _spark_metadata/0.compact both hold batch 0"),
]



@pytest.mark.parametrize("source, target, message", [
    ("1", "1", r"metadata log file _spark_metadata/1 lists part-00000-000000-001.jsonl a second "
               r"time \(first in _spark_metadata/1\): expected each file once; Spark's readers "
               r"would return its rows twice. Remove the duplicate line"),
    ("0", "2", r"metadata log file _spark_metadata/2 lists part-00000-000000-000.jsonl a second "
               r"time \(first in _spark_metadata/0\)"),
], ids=["twice-in-one-file", "again-in-a-later-file"])
def test_path_listed_twice_is_refused_by_the_reader(tmp_path, source, target, message):
    build(tmp_path)
    append(log(tmp_path, target), lines(tmp_path, source)[2])
    with pytest.raises(CorruptLogError, match=message):
        reader(tmp_path)


def test_entry_outside_the_output_path_names_the_log_file(tmp_path):
    """An output directory moved or copied elsewhere: its log names the old location."""
    build(tmp_path)
    moved = tmp_path.parent / f"{tmp_path.name}-moved"
    shutil.copytree(tmp_path, moved)
    with pytest.raises(CorruptLogError, match=r"metadata log file _spark_metadata/0: log entry "
                                              r"'file://.*' is not under the output path"):
        reader(moved)


# -- part files edited by hand ---------------------------------------------------------------
FINALIZED = "part-00000-000001-000.jsonl"  # ids 4, 5 (in _spark_metadata/2)


def in_progress(root: Path) -> Path:
    committed = open_committed(LocalStorage(str(root)))
    assert committed is not None
    (f,) = committed[2].in_progress
    return root / f.temp


PART_DAMAGE: list[tuple[str, Callable[[Path], object], str]] = [
    ("finalized-deleted", lambda r: (r / FINALIZED).unlink(),
     rf"finalized file {FINALIZED} is missing: the log lists it with 18 committed bytes; "
     r"deleted by hand\? Restore it from a backup"),
    ("finalized-shortened", lambda r: truncate(r / FINALIZED, 5),
     rf"{FINALIZED} holds 5 bytes; the log commits 18"),
    ("finalized-extended", lambda r: append(r / FINALIZED, b'{"id":99}\n'),
     rf"{FINALIZED} holds 28 bytes; the log commits exactly 18 to this finalized file: it was "
     r"modified"),
    ("in-progress-deleted", lambda r: in_progress(r).unlink(),
     r"in-progress file _rotsink/inprogress/\.part-00000-000002-000\.jsonl\.\w+\.inprogress is "
     r"missing \(and no later commit published it as part-00000-000002-000\.jsonl\): the log "
     r"lists it with 9 committed bytes"),
    ("in-progress-shortened", lambda r: truncate(in_progress(r), 2),
     r"_rotsink/inprogress/\.part-00000-000002-000\.jsonl\.\w+\.inprogress holds 2 bytes; the "
     r"log commits 9"),
]


@pytest.mark.parametrize("damage, message", [p[1:] for p in PART_DAMAGE],
                         ids=[p[0] for p in PART_DAMAGE])
def test_damaged_part_file_is_named_by_the_reader(tmp_path, damage, message):
    cfg = build(tmp_path)
    damage(tmp_path)
    with pytest.raises(RotsinkError, match=message):
        committed_ids(tmp_path, cfg)


def test_extended_in_progress_file_reads_and_continues_exactly(tmp_path):
    """Bytes appended by hand past the committed offset are never read, and the next task
    continues from a copy of the committed prefix (the fence), so they never become rows."""
    cfg = build(tmp_path)
    append(in_progress(tmp_path), b'{"id":99}\n')
    assert committed_ids(tmp_path, cfg) == list(range(7))
    report = run_task(tmp_path, cfg, 3, [rows(7, 1)])
    assert report.files[0].fenced_from == str(in_progress(tmp_path).relative_to(tmp_path))
    commit(tmp_path, cfg, 3, report)
    assert committed_ids(tmp_path, cfg) == list(range(8))


def test_deleted_in_progress_file_fails_the_restarted_task_naming_it(tmp_path):
    cfg = build(tmp_path)
    temp = in_progress(tmp_path)
    temp.unlink()
    with pytest.raises(CommitError, match=rf"in-progress file _rotsink/inprogress/{temp.name} of "
                                          r"part-00000-000002-000.jsonl is missing; the log "
                                          r"commits 9 bytes of it"):
        run_task(tmp_path, cfg, 3, [rows(7, 1)])


@pytest.mark.parametrize("damage, message", [c[1:] for c in UNREADABLE + DUPLICATED],
                         ids=[c[0] for c in UNREADABLE + DUPLICATED])
def test_unreadable_or_duplicated_log_file_is_named_by_reader_and_restart(tmp_path, damage,
                                                                          message):
    cfg = build(tmp_path)
    damage(tmp_path)
    with pytest.raises(CorruptLogError, match=message):
        reader(tmp_path)
    with pytest.raises(CorruptLogError, match=message):
        restart(tmp_path, cfg)
