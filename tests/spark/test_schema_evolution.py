"""Schemas that grow through real queries: a stream writes schema v1, its producer adds a
field, the query restarts with v2 and ``schema.evolution=addColumns``. Every row once, old
rows with nulls in the new column, through rotsink's reader, the fast path, the change feed
and Spark's readers (with the options ``docs/schema-evolution.md`` names); refused changes
name the column, and a restart without the option writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import pyspark_rotsink
from commit_protocol.reading import open_committed
from commit_protocol.storage import LocalStorage
from tests.support.streams import (
    SCHEMA_V2,
    refused_at_start,
    run_to_completion,
    tag_of,
    write_numbered_source,
)

FIRST, MORE, PER_FILE = 3, 2, 20
V1_ROWS = FIRST * PER_FILE
ROWS = (FIRST + MORE) * PER_FILE
EVOLVE = {"schema.evolution": "addColumns"}
ROLLING = {"rotation.maxRecords": "25", "partitionBy": "grp"}


def expected_tag(row_id: int) -> str | None:
    """Rows the first run wrote (schema v1) have no tag; the restarted query's rows do."""
    return None if row_id < V1_ROWS else tag_of(row_id)


def tags(rows) -> dict[int, str | None]:
    found: dict[int, str | None] = {}
    for row in rows:
        assert row.id not in found, f"row {row.id} read twice"
        found[row.id] = row.tag
    return found


def evolve(spark, base: Path, fmt: str, **options: str) -> Path:
    """Run 1 with v1 over 3 files; 2 more files; run 2 with v2 and the option."""
    source, out, ck = base / "in", base / "out", base / "ck"
    write_numbered_source(source, files=FIRST, rows_per_file=PER_FILE, tagged=True)
    options = {**ROLLING, **options}
    run_to_completion(spark, source, out, ck, format=fmt, **options)
    write_numbered_source(source, files=MORE, rows_per_file=PER_FILE, start_file=FIRST,
                          tagged=True)
    run_to_completion(spark, source, out, ck, schema=SCHEMA_V2, format=fmt, **EVOLVE,
                      **options)
    return out


@pytest.fixture(scope="module", params=["jsonl", "parquet", "orc", "csv"])
def evolved(request, spark, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"evolve-{request.param}")
    return request.param, evolve(spark, base, request.param)


def test_every_row_once_old_rows_with_nulls(spark, evolved):
    fmt, out = evolved
    df = spark.read.format("rotsink").load(str(out))
    assert df.schema.simpleString() == \
        "struct<id:bigint,name:string,grp:string,score:double,tag:string>"
    assert tags(df.collect()) == {i: expected_tag(i) for i in range(ROWS)}
    fast = pyspark_rotsink.read(spark, str(out))
    assert tags(fast.collect()) == {i: expected_tag(i) for i in range(ROWS)}


def test_the_change_finishes_open_files_where_a_file_fixes_its_columns(evolved):
    """CSV, Parquet and ORC files in progress at the change finish as they were (reason
    ``schema``); JSON lines files continue."""
    fmt, out = evolved
    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None
    log, latest, state = committed
    ((changed_at, added),) = [(b, a) for b, a in _changes(state)]
    assert added == ("tag",)
    reasons = {p.reason for p in log.read_state(changed_at).publish}
    assert ("schema" in reasons) == (fmt != "jsonl"), reasons


def _changes(state):
    from commit_protocol.records.schema_evolution import recorded

    return recorded(state.extra)


@pytest.mark.parametrize("fmt, read", [
    ("parquet", lambda spark, out: spark.read.option("mergeSchema", "true").parquet(out)),
    ("orc", lambda spark, out: spark.read.option("mergeSchema", "true").orc(out)),
    ("jsonl", lambda spark, out: spark.read.json(out)),  # inference takes every field
    # spark-avro takes one file's schema unless given one: the newest (Spark's own types)
    ("avro", lambda spark, out: spark.read.format("avro").schema(SCHEMA_V2).load(out)),
], ids=["parquet-mergeSchema", "orc-mergeSchema", "jsonl-inferred", "avro"])
def test_spark_s_readers_with_the_documented_options(spark, tmp_path, fmt, read):
    out = evolve(spark, tmp_path, fmt, **{"rotation.maxRecords": "10"})
    finalized = {r.id for r in spark.read.format("rotsink").option("includeInProgress", "false")
                 .load(str(out)).collect()}
    rows = read(spark, str(out)).collect()
    assert "tag" in rows[0].asDict()
    assert tags(rows) == {i: expected_tag(i) for i in sorted(finalized)}


def test_a_restart_without_the_option_is_refused_and_writes_nothing(spark, tmp_path):
    source, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    write_numbered_source(source, files=2, rows_per_file=5, tagged=True)
    run_to_completion(spark, source, out, ck)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    write_numbered_source(source, files=1, rows_per_file=5, start_file=2, tagged=True)
    with refused_at_start(
            r"holds rows of schema struct<id:bigint,name:string,grp:string,score:double>; "
            r"this query writes struct<.*tag:string>\. Write a changed schema to a new "
            r"path, or add the column\(s\) tag to this one with "
            r"\.option\('schema.evolution', 'addColumns'\)"):
        run_to_completion(spark, source, out, ck, schema=SCHEMA_V2)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


@pytest.mark.parametrize("schema, message", [
    ("id LONG, name STRING, grp STRING", r"column score was dropped \(or renamed\)"),
    ("id LONG, name STRING, grp STRING, score STRING", r"column score changed type from "
                                                       r"double to string"),
], ids=["dropped", "type-changed"])
def test_refused_changes_name_the_column_at_start(spark, tmp_path, schema, message):
    source, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    write_numbered_source(source, files=1, rows_per_file=5)
    run_to_completion(spark, source, out, ck, **EVOLVE)
    write_numbered_source(source, files=1, rows_per_file=5, start_file=1)
    with refused_at_start(message):
        run_to_completion(spark, source, out, ck, schema=schema, **EVOLVE)


def test_a_bad_option_value_names_the_option(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    with refused_at_start(r"option schema\.evolution='yes': expected one of none, addColumns"):
        run_to_completion(spark, tmp_path / "in", tmp_path / "out", tmp_path / "ck",
                          **{"schema.evolution": "yes"})


def test_a_change_feed_restarted_after_the_change_reads_the_new_column(spark, tmp_path):
    """A feed that read the v1 rows, restarted from its checkpoint after the change: the
    downstream (which allows the change too) holds every row once, old ones without tag."""
    source, up, ck = tmp_path / "in", tmp_path / "up", tmp_path / "ck"
    write_numbered_source(source, files=FIRST, rows_per_file=PER_FILE, tagged=True)
    run_to_completion(spark, source, up, ck, **ROLLING)
    down = tmp_path / "down"

    def follow() -> None:
        (spark.readStream.format("rotsink").load(str(up)).writeStream.format("rotsink")
         .option("checkpointLocation", str(tmp_path / "ck-down")).options(**EVOLVE)
         .trigger(availableNow=True).start(str(down)).awaitTermination())

    follow()
    write_numbered_source(source, files=MORE, rows_per_file=PER_FILE, start_file=FIRST,
                          tagged=True)
    run_to_completion(spark, source, up, ck, schema=SCHEMA_V2, **ROLLING, **EVOLVE)
    follow()
    rows = spark.read.format("rotsink").load(str(down)).collect()
    assert tags(rows) == {i: expected_tag(i) for i in range(ROWS)}


def test_a_field_added_inside_a_struct(spark, tmp_path):
    """Parquet, the field added inside a struct: rotsink's reader, the fast path and Spark's
    reader with mergeSchema read old rows with the field null."""
    import json

    source, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    source.mkdir()

    def add_file(index: int) -> None:
        rows = [{"id": i, "point": {"x": i / 2, "y": i * 2.0}}
                for i in range(index * 10, index * 10 + 10)]
        (source / f"in-{index}.json").write_text("\n".join(map(json.dumps, rows)) + "\n")

    v1, v2 = "id LONG, point STRUCT<x: DOUBLE>", "id LONG, point STRUCT<x: DOUBLE, y: DOUBLE>"
    for index in range(2):
        add_file(index)
    run_to_completion(spark, source, out, ck, schema=v1, format="parquet",
                      **{"rotation.maxRecords": "15"})
    add_file(2)
    run_to_completion(spark, source, out, ck, schema=v2, format="parquet",
                      **{"rotation.maxRecords": "15"}, **EVOLVE)
    expected = {i: (i / 2, None if i < 20 else i * 2.0) for i in range(30)}

    def points(df) -> dict[int, tuple]:
        return {r.id: (r.point.x, r.point.asDict().get("y")) for r in df.collect()}

    assert points(spark.read.format("rotsink").load(str(out))) == expected
    assert points(pyspark_rotsink.read(spark, str(out))) == expected
    finalized = spark.read.option("mergeSchema", "true").parquet(str(out))
    assert points(finalized) == {i: expected[i] for i in points(finalized)}
    # 15 rows rolled by the record limit, 5 by the change (rows of v2 are still staged)
    assert len(points(finalized)) == 20


NARROW = "id INT, name STRING, grp STRING, score FLOAT"
WIDE = "id LONG, name STRING, grp STRING, score DOUBLE"


@pytest.mark.parametrize("fmt, read", [
    ("parquet", lambda spark, out: spark.read.schema(WIDE).parquet(out)),
    ("orc", lambda spark, out: spark.read.schema(WIDE).orc(out)),
    ("jsonl", lambda spark, out: spark.read.json(out)),  # inference: bigint, double
], ids=["parquet-given-the-schema", "orc-given-the-schema", "jsonl-inferred"])
def test_widened_types_read_as_the_wider_type(spark, tmp_path, fmt, read):
    """A query writes ``id`` as int and ``score`` as float, restarts with long and double
    (``schema.evolution=widenTypes``): rotsink's reader and the fast path read every row once
    as the wider types; Spark's readers (Parquet and ORC given the schema, as
    docs/schema-evolution.md says) the finalized ones."""
    source, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    options = {"format": fmt, "rotation.maxRecords": "15", "schema.evolution": "widenTypes"}
    write_numbered_source(source, files=FIRST, rows_per_file=PER_FILE)
    run_to_completion(spark, source, out, ck, schema=NARROW, **options)
    write_numbered_source(source, files=MORE, rows_per_file=PER_FILE, start_file=FIRST)
    run_to_completion(spark, source, out, ck, schema=WIDE, **options)
    ours = spark.read.format("rotsink").load(str(out))
    assert ours.schema.simpleString() == \
        "struct<id:bigint,name:string,grp:string,score:double>"
    scores = {r.id: r.score for r in ours.collect()}
    assert scores == {i: i / 4 for i in range(ROWS)}  # quarters: exact in a float
    assert sorted(r.id for r in pyspark_rotsink.read(spark, str(out)).collect()) == \
        list(range(ROWS))
    finalized = sorted(r.id for r in spark.read.format("rotsink")
                       .option("includeInProgress", "false").load(str(out)).collect())
    theirs = read(spark, str(out))
    assert dict(theirs.dtypes)["id"] == "bigint"
    assert sorted(r.id for r in theirs.collect()) == finalized and len(finalized) >= V1_ROWS
