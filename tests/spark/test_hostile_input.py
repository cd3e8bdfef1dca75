"""Hostile input through real Spark: each case is a clear error naming the file or value
(and loses nothing), or exactly correct output.

Damaged output is made once: ``committed`` runs one query (batches 0-4, files rolling every
two batches) and keeps a pristine copy of its input, output and checkpoint; each case restores
that copy at the same path (the log holds absolute URIs), damages it by hand, then reads it
with ``spark.read.format("rotsink")`` and restarts the query from its checkpoint with one more
input file. The same damage without Spark: ``tests/unit/test_hostile_log.py``.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.errors import PySparkException, StreamingQueryException

from tests.support.damage import append, truncate
from tests.support.streams import (
    SCHEMA,
    assert_round_trip,
    refused_at_start,
    rotsink_ids,
    run_to_completion,
    write_numbered_source,
)

OPTIONS = {"rotation.maxBatches": "2"}
# After the run (one input file of two rows per batch, in mtime order, so which ids land
# where varies): part-00000-000000-000.jsonl (batches 0-1, listed in _spark_metadata/1),
# part-00000-000002-000.jsonl (batches 2-3, in 3), and batch 4's rows in progress.
FIRST, SECOND, OPENED = ("part-00000-000000-000.jsonl", "part-00000-000002-000.jsonl",
                         "part-00000-000004-000.jsonl")
TEMP = r"_rotsink/inprogress/\.part-00000-000004-000\.jsonl\.\w+\.inprogress"


@dataclass(frozen=True)
class Committed:
    work: Path
    pristine: Path

    @property
    def out(self) -> Path:
        return self.work / "out"

    def restore(self) -> Path:
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.copytree(self.pristine, self.work)
        return self.out

    def restart(self, spark) -> None:
        """Restart from the checkpoint with one more input file (batch 5: ids 10, 11)."""
        write_numbered_source(self.work / "in", files=1, rows_per_file=2, start_file=5)
        run_to_completion(spark, self.work / "in", self.out, self.work / "ck", **OPTIONS)


@pytest.fixture(scope="module")
def committed(spark, tmp_path_factory) -> Committed:
    base = tmp_path_factory.mktemp("hostile")
    done = Committed(base / "work", base / "pristine")
    write_numbered_source(done.work / "in", files=5, rows_per_file=2)
    run_to_completion(spark, done.work / "in", done.out, done.work / "ck", **OPTIONS)
    shutil.copytree(done.work, done.pristine)
    return done


def log(out: Path, name: str) -> Path:
    return out / "_spark_metadata" / name


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)




def state_version(path: Path, version: int) -> None:
    head, state, *rest = lines(path)
    entry = json.loads(state)
    entry["rotsink"]["version"] = version
    path.write_bytes(b"".join([head, json.dumps(entry).encode() + b"\n", *rest]))


def temp_file(out: Path) -> Path:
    (temp,) = (out / "_rotsink" / "inprogress").glob(f".{OPENED}.*.inprogress")
    return temp


def read_rotsink(spark, out: Path) -> list:
    return spark.read.format("rotsink").load(str(out)).collect()


# -- log files damaged by hand ---------------------------------------------------------------
Damage = Callable[[Path], object]

LOG_DAMAGE: list[tuple[str, Damage, str, bool]] = [
    # id, damage, the message a user sees, whether a restart fails too (it reads only the
    # newest log file; damage to an older one stops the next compaction, see the unit tests)
    ("truncated", lambda o: truncate(log(o, "4"), 40),
     r"metadata log file _spark_metadata/4 line 2 is not JSON", True),
    ("empty", lambda o: log(o, "4").write_bytes(b""),
     r"metadata log file _spark_metadata/4: expected version line 'v1', found ''; it was "
     r"written by an unknown or newer writer, or is corrupt", True),
    ("garbage", lambda o: log(o, "4").write_bytes(random.Random(3).randbytes(500)),
     r"metadata log file _spark_metadata/4: expected version line 'v1', found binary data", True),
    ("future-version",
     lambda o: log(o, "4").write_bytes(b"v2\n" + b"".join(lines(log(o, "4"))[1:])),
     r"metadata log file _spark_metadata/4: expected version line 'v1', found 'v2'", True),
    ("unknown-state-version", lambda o: state_version(log(o, "4"), 3),
     r"metadata log file _spark_metadata/4 line 2: bad rotsink state \(expected rotsink state "
     r"version 1 or 2, found 3: written by another \(newer\?\) rotsink", True),
    ("delta-deleted", lambda o: log(o, "2").unlink(),
     r"metadata log file _spark_metadata/2 is missing: the output as of batch 4 is listed by "
     r"every log file from batch 0 to 4; deleted by hand\? Restore from a backup", False),
    ("copied-beyond-latest", lambda o: shutil.copy(log(o, "3"), log(o, "9")),
     r"metadata log file _spark_metadata/9 holds the state of batch 3: expected batch 9; "
     r"copied or renamed by hand\?", True),
    ("two-files-for-one-id", lambda o: shutil.copy(log(o, "3"), log(o, "3.compact")),
     r"metadata log files _spark_metadata/3 and _spark_metadata/3.compact both hold batch 3: "
     r"expected one file per batch", True),
    ("path-listed-twice", lambda o: append(log(o, "3"), lines(log(o, "3"))[2]),
     rf"metadata log file _spark_metadata/3 lists {SECOND} a second time \(first in "
     r"_spark_metadata/3\): expected each file once; Spark's readers would return its rows "
     r"twice", False),
]


@pytest.mark.parametrize("damage, message, restart_fails", [d[1:] for d in LOG_DAMAGE],
                         ids=[d[0] for d in LOG_DAMAGE])
def test_damaged_log_file_is_named_by_reader_and_restart(spark, committed, damage, message,
                                                         restart_fails):
    out = committed.restore()
    damage(out)
    with pytest.raises(PySparkException, match=message):
        read_rotsink(spark, out)
    if restart_fails:
        with refused_at_start(message):
            committed.restart(spark)


def test_newest_log_file_deleted_the_restart_names_it_and_says_what_to_do(spark, committed):
    out = committed.restore()
    log(out, "4").unlink()
    # The reader cannot know batch 4 existed (only the checkpoint does): it shows the output
    # as of batch 3, without the rows batch 4 committed to its in-progress file.
    batch_4 = {json.loads(line)["id"] for line in temp_file(out).read_text().splitlines()}
    assert rotsink_ids(spark, out) == sorted(set(range(10)) - batch_4)
    with pytest.raises(StreamingQueryException, match=(
            r"task of batch 5: expected the output's metadata log to end at batch 4, found it "
            r"ending at batch 3: _spark_metadata/4 is missing \(deleted by hand, or the output "
            r"restored from a copy older than the checkpoint\), so the rows those batches "
            r"committed are no longer listed. Restore the missing log file\(s\) from a backup, "
            r"or write to a new output path with a new checkpoint")):
        committed.restart(spark)


# -- part files damaged by hand --------------------------------------------------------------
PART_DAMAGE: list[tuple[str, Damage, str]] = [
    ("finalized-deleted", lambda o: (o / FIRST).unlink(),
     rf"finalized file {FIRST} is missing: the log lists it with \d+ committed bytes; deleted "
     r"by hand\? Restore it from a backup"),
    ("finalized-shortened", lambda o: truncate(o / FIRST, 5),
     rf"{FIRST} holds 5 bytes; the log commits \d+"),
    ("finalized-extended", lambda o: append(o / FIRST, b'{"id":99}\n'),
     rf"{FIRST} holds \d+ bytes; the log commits exactly \d+ to this finalized file: it was "
     r"modified"),
    ("in-progress-deleted", lambda o: temp_file(o).unlink(),
     rf"in-progress file {TEMP} is missing \(and no later commit published it as "
     r"part-\S+\): the log lists it with \d+ committed bytes"),
    ("in-progress-shortened", lambda o: truncate(temp_file(o), 3),
     rf"{TEMP} holds 3 bytes; the log commits \d+"),
]


@pytest.mark.parametrize("damage, message", [p[1:] for p in PART_DAMAGE],
                         ids=[p[0] for p in PART_DAMAGE])
def test_damaged_part_file_is_named_by_the_reader(spark, committed, damage, message):
    out = committed.restore()
    damage(out)
    with pytest.raises(PySparkException, match=message):
        read_rotsink(spark, out)


@pytest.mark.parametrize("damage, message", [
    (lambda o: temp_file(o).unlink(),
     rf"in-progress file {TEMP} of {OPENED} is missing; the log commits \d+ bytes of it"),
    (lambda o: truncate(temp_file(o), 3), rf"in-progress file {TEMP} of {OPENED} holds 3 bytes; "
                                          r"the log commits \d+"),
], ids=["deleted", "shortened"])
def test_damaged_in_progress_file_fails_the_restart_naming_it(spark, committed, damage, message):
    out = committed.restore()
    damage(out)
    with pytest.raises(StreamingQueryException, match=message):
        committed.restart(spark)


def test_extended_in_progress_file_gives_exact_output_after_restart(spark, committed):
    """The extra bytes are never read: batch 5 continues from a copy of the committed prefix,
    then rolls the file (two batches), so both readers see it."""
    out = committed.restore()
    append(temp_file(out), b'{"id":99,"name":"x","grp":"g0","score":0.0}\n')
    assert rotsink_ids(spark, out) == list(range(10))
    committed.restart(spark)
    assert rotsink_ids(spark, out) == list(range(12))
    assert sorted(r.id for r in spark.read.json(str(out)).collect()) == list(range(12))


# -- hostile values --------------------------------------------------------------------------
PARTITION_VALUES = ["a/b", "..", "x=y", "line\nbreak", "ü😀", "", None]


def test_hostile_partition_values_round_trip_in_both_readers(spark, tmp_path):
    rows = [{"id": i, "name": v, "grp": "g", "score": 1.0} for i, v in enumerate(PARTITION_VALUES)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "in.json").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", partitionBy="name",
                      **{"rotation.maxBatches": "1"})
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("name=")) == sorted(
        ["name=a%2Fb", "name=..", "name=x%3Dy", "name=line%0Abreak", "name=ü😀",
         "name=__HIVE_DEFAULT_PARTITION__"])
    # Spark's rule: "" and null share __HIVE_DEFAULT_PARTITION__ and both read back as null.
    expected = sorted((i, v or None) for i, v in enumerate(PARTITION_VALUES))
    back = spark.read.format("rotsink").load(str(out))
    assert dict(back.dtypes)["name"] == "string"
    assert sorted((r.id, r.name) for r in back.collect()) == expected
    key = "spark.sql.sources.partitionColumnTypeInference.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        spark_rows = spark.read.json(str(out)).select("id", "name").collect()
    finally:
        spark.conf.set(key, before)
    assert sorted((r.id, r.name) for r in spark_rows) == expected


NULLABLE = {  # column -> a non-null value; every column is null on even ids
    "b": "id % 3 = 0", "t": "cast(id as tinyint)", "s": "cast(id as smallint)",
    "i": "cast(id as int)", "l": "id * 10000000000", "f": "cast(id / 3 as float)",
    "d": "id / 3", "dec": "cast(id / 3 as decimal(12, 3))", "str": "if(id = 1, '', 'v')",
    "bin": "cast(concat('b', id) as binary)", "dt": "date_add(date'2024-01-01', cast(id as int))",
    "ts": "timestamp'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id)",
    "ntz": "timestamp_ntz'2024-01-01 00:00:00'",
}
NESTED = {  # nulls inside nested values too
    "arr": "array(id, null)", "st": "named_struct('x', cast(null as bigint), 'y', 'a')",
    "m": "map('k', cast(null as bigint))",
}


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_nulls_in_every_column_type_come_back_exactly(spark, tmp_path, fmt):
    columns = {**NULLABLE, **({} if fmt == "csv" else NESTED)}
    selected = ", ".join(f"if(id % 2 = 0, null, {expr}) {name}" for name, expr in columns.items())
    expected = spark.sql(f"select id, {selected} from range(4)")
    assert_round_trip(spark, tmp_path, expected, fmt)


def test_huge_row_is_written_whole_and_rolls(spark, tmp_path):
    huge = "".join(random.Random(5).choices("abcdefghij\"\\ü", k=8 << 20))
    rows = [{"id": 0, "name": "small"}, {"id": 1, "name": huge}, {"id": 2, "name": "after"}]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "in.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck",
                      **{"rotation.maxBytes": "1mb", "rotation.maxBatches": "1"})
    finalized = sorted(out.glob("part-*"))
    big = [p for p in finalized if p.stat().st_size > 1 << 20]
    # The small row's file rolls before the huge row: only a file's first row may outgrow the limit.
    assert len(finalized) == 3 and len(big) == 1
    assert [json.loads(line)["id"] for line in big[0].read_text().splitlines()] == [1]
    expected = sorted((r["id"], r["name"]) for r in rows)
    for back in (spark.read.format("rotsink").load(str(out)), spark.read.json(str(out))):
        assert sorted((r.id, r.name) for r in back.select("id", "name").collect()) == expected


def test_empty_stream_commits_nothing_visible(spark, tmp_path):
    (tmp_path / "in").mkdir()
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck")
    assert not out.exists() or not [p for p in out.rglob("*") if not p.name.startswith(("_", "."))]
    with pytest.raises(PySparkException, match=rf"{out} has no rotsink output: no committed "
                                               r"batch in _spark_metadata"):
        read_rotsink(spark, out)


def test_input_files_with_zero_rows_commit_batches_with_no_files(spark, tmp_path):
    (tmp_path / "in").mkdir()
    for n in range(2):
        (tmp_path / "in" / f"in-{n}.json").write_text("")
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", **{"rotation.maxBatches": "1"})
    assert sorted(p.name for p in (out / "_spark_metadata").iterdir()) == ["0", "1"]
    assert not list(out.glob("part-*"))
    assert read_rotsink(spark, out) == []
    assert spark.read.schema(SCHEMA).json(str(out)).count() == 0
