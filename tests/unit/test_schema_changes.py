"""Schemas that grow (``schema.evolution=addColumns``): which changes are accepted, the files
a change finishes, and old rows read as the newest schema, without Spark."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.reading import committed_files, open_committed, read_batches
from commit_protocol.reading.conform import conform, held
from commit_protocol.records.plan import WritePlan
from commit_protocol.records.schema_evolution import compare, same_columns
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary.errors import SchemaMismatchError
from tests.unit.test_task_writer import config, storage_of


def field(name: str, kind, nullable: bool = True) -> dict:
    return {"name": name, "type": kind, "nullable": nullable, "metadata": {}}


def struct(*fields: dict) -> dict:
    return {"type": "struct", "fields": list(fields)}


def schema(*fields: dict) -> str:
    return json.dumps(struct(*fields))


V1 = schema(field("id", "long"), field("point", struct(field("x", "double"))))

# (new schema, added paths, why)
ACCEPTED = [
    (schema(field("id", "long"), field("point", struct(field("x", "double"))),
            field("tag", "string")), ("tag",), "a column at the end"),
    (schema(field("tag", "string"), field("id", "long"),
            field("point", struct(field("x", "double")))), ("tag",), "in front"),
    (schema(field("id", "long"), field("point", struct(field("y", "double"),
                                                       field("x", "double")))),
     ("point.y",), "a struct field, in any position"),
    (schema(field("id", "long", nullable=True), field("point", struct(field("x", "double")))),
     (), "nullability relaxed"),
]
# (new schema, message, why)
REFUSED = [
    (schema(field("id", "long")), r"column point was dropped \(or renamed\)", "dropped"),
    (schema(field("key", "long"), field("point", struct(field("x", "double")))),
     r"column id was dropped \(or renamed\)", "renamed"),
    (schema(field("id", "string"), field("point", struct(field("x", "double")))),
     r"column id changed type from long to string", "a type change"),
    (schema(field("id", "long"), field("point", struct(field("x", "float")))),
     r"column point.x changed type from double to float", "a nested type change"),
    (schema(field("id", "long", nullable=False), field("point", struct(field("x", "double")))),
     r"column id became NOT NULL", "nullable made non-null"),
    (schema(field("id", "long"), field("point", struct(field("x", "double"))),
            field("tag", "string", nullable=False)),
     r"column tag is added NOT NULL", "added non-null"),
]


@pytest.mark.parametrize("new, added, why", ACCEPTED, ids=[c[2] for c in ACCEPTED])
def test_accepted_changes_add_nullable_columns(new, added, why):
    assert compare(V1, new).added == added, why


@pytest.mark.parametrize("new, message, why", REFUSED, ids=[c[2] for c in REFUSED])
def test_every_other_change_is_refused_naming_the_column(new, message, why):
    with pytest.raises(SchemaMismatchError, match=message):
        compare(V1, new)


def test_same_columns_ignores_nullability_as_spark_s_readers_do():
    relaxed = schema(field("id", "long", nullable=False),
                     field("point", struct(field("x", "double"))))
    assert same_columns(V1, relaxed)
    assert not same_columns(V1, ACCEPTED[0][0])


# -- a path across a change -----------------------------------------------------------------
OLD = schema(field("id", "long"), field("s", "string"))
NEW = schema(field("id", "long"), field("tag", "string"), field("s", "string"))
OLD_ROWS = pa.record_batch({"id": pa.array([0, 1], pa.int64()), "s": ["a", "b"]})
NEW_ROWS = pa.record_batch({"id": pa.array([2], pa.int64()), "tag": ["t2"], "s": ["c"]})
READ = pa.schema([("id", pa.int64()), ("tag", pa.string()), ("s", pa.string())])
KEY = "env:ROTSINK_TEST_KEY"
FORMATS = {"jsonl": {}, "csv": {"file_suffix": ".csv"},
           "parquet": {"compression": "snappy", "file_suffix": ".parquet"},
           "orc": {"compression": "zstd", "file_suffix": ".orc"},
           # the driver seals the CSV file it finishes, and encodes the staged Parquet rows
           "csv-encrypted": {"file_suffix": ".csv.enc", "keys": KEY},
           "parquet-encrypted": {"compression": "snappy", "file_suffix": ".parquet",
                                 "keys": KEY}}


def write(cfg, schema_json: str, batch_id: int, rows: pa.RecordBatch, *, retire=False):
    storage = storage_of(cfg)
    committer = Committer(storage, cfg, schema_json)
    plan = WritePlan.from_state(committer.latest_state(), storage.root_uri,
                                retire_in_progress=retire)
    report = TaskWriter(storage, cfg, plan, batch_id=batch_id, partition=0, attempt=0,
                        query_id="q").write([rows])
    return committer.commit(batch_id, [report], now_ms=batch_id)


def read_all(cfg, schema: pa.Schema = READ) -> list[dict]:
    storage = storage_of(cfg)
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    ring = cfg.keys.ring() if cfg.keys is not None else None
    return sorted((row for f in committed_files(log, latest, state)
                   for batch in read_batches(storage, f, state=state, schema=schema, ring=ring)
                   for row in batch.to_pylist()), key=lambda r: r["id"] or 0)


@pytest.mark.parametrize("name", list(FORMATS))
def test_old_rows_read_with_nulls_in_the_added_column(tmp_path, monkeypatch, name):
    """Formats that fix their columns at the file's head finish their files at the change
    (reason ``schema``); JSON lines files continue, each row naming its fields."""
    import base64
    import os

    from commit_protocol.crypto.keys import KeyRefs

    monkeypatch.setenv("ROTSINK_TEST_KEY", base64.b64encode(os.urandom(32)).decode())
    options: dict[str, Any] = dict(FORMATS[name])
    if "keys" in options:
        options["keys"] = KeyRefs(options["keys"])
    fmt = name.split("-")[0]
    cfg = config(tmp_path, format=fmt, schema_evolution="addColumns", **options)
    write(cfg, OLD, 0, OLD_ROWS)
    retire = fmt != "jsonl"
    result = write(cfg, NEW, 1, NEW_ROWS, retire=retire)
    assert [f.reason for f in result.finalized] == (["schema"] if retire else [])
    assert read_all(cfg) == [{"id": 0, "tag": None, "s": "a"}, {"id": 1, "tag": None, "s": "b"},
                             {"id": 2, "tag": "t2", "s": "c"}]
    committed = open_committed(storage_of(cfg))
    assert committed is not None
    state = committed[2]
    assert json.loads(state.schema_json) == json.loads(NEW)
    assert state.added_columns == {"tag"}


def test_a_file_lacking_a_column_no_change_added_is_refused(tmp_path):
    """A path whose state records no change: a staged file without a column is damage."""
    cfg = config(tmp_path, format="parquet", compression="snappy", file_suffix=".parquet")
    write(cfg, OLD, 0, OLD_ROWS)
    with pytest.raises(SchemaMismatchError, match=r"has no column \['tag'\]"):
        read_all(cfg)


def test_a_commit_refuses_a_change_the_option_does_not_allow(tmp_path):
    cfg = config(tmp_path, format="jsonl")
    write(cfg, OLD, 0, OLD_ROWS)
    with pytest.raises(SchemaMismatchError, match="schema.evolution is none"):
        write(cfg, NEW, 1, NEW_ROWS)


def test_nested_fields_are_filled_in():
    point = pa.struct([("x", pa.float64()), ("y", pa.float64())])
    target = pa.schema([("id", pa.int64()), ("point", point),
                        ("points", pa.list_(point)), ("by", pa.map_(pa.string(), point))])
    old_point = pa.struct([("x", pa.float64())])
    stored = pa.schema([("id", pa.int64()), ("point", old_point),
                        ("points", pa.list_(old_point)), ("by", pa.map_(pa.string(), old_point))])
    readable = held(target, stored, added={"point.y", "points[].y", "by{}.y"}, what="f")
    assert readable.equals(stored)
    batch = pa.record_batch([pa.array([1, 2], pa.int64()),
                             pa.array([{"x": 1.0}, None], old_point),
                             pa.array([[{"x": 2.0}], None], pa.list_(old_point)),
                             pa.array([[("k", {"x": 3.0})], None],
                                      pa.map_(pa.string(), old_point))],
                            schema=stored)
    rows = conform(batch, target).to_pylist()
    assert rows[0] == {"id": 1, "point": {"x": 1.0, "y": None},
                       "points": [{"x": 2.0, "y": None}], "by": [("k", {"x": 3.0, "y": None})]}
    assert rows[1] == {"id": 2, "point": None, "points": None, "by": None}
    with pytest.raises(SchemaMismatchError, match=r"has no column \['point.y'"):
        held(target, stored, added=set(), what="f")



def test_a_running_change_feed_stops_before_columns_it_does_not_know(tmp_path):
    """Spark fixed the feed's columns when it started: it delivers every batch of its schema,
    then fails the micro-batch that would cross the change, naming the columns."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from commit_protocol.reading.change_feed import FeedSchemaChangedError
    from datasource.reading.stream_reader import RotSinkStreamReader

    cfg = config(tmp_path, format="jsonl", schema_evolution="addColumns")
    write(cfg, OLD, 0, OLD_ROWS)
    feed = RotSinkStreamReader({"path": str(tmp_path)}, StructType.fromJson(json.loads(OLD)))
    start = feed.initialOffset()
    write(cfg, NEW, 1, NEW_ROWS)
    write(cfg, NEW, 2, NEW_ROWS.slice(0, 0))
    end = feed.latestOffset(start, ReadAllAvailable())
    assert end["batch"] == 0  # up to the last batch of the feed's schema
    with pytest.raises(FeedSchemaChangedError, match=(
            r"added column\(s\) tag at its batch 1 \(schema.evolution\), after this change "
            r"feed started: restart the query to read them")):
        feed.latestOffset(end, ReadAllAvailable())
    restarted = RotSinkStreamReader({"path": str(tmp_path)},
                                    StructType.fromJson(json.loads(NEW)))
    assert restarted.latestOffset(end, ReadAllAvailable())["batch"] == 2


def test_inspect_shows_the_schema_and_its_changes(tmp_path, capsys):
    from datasource.commands.cli import main

    cfg = config(tmp_path, format="jsonl", schema_evolution="addColumns")
    write(cfg, OLD, 0, OLD_ROWS)
    write(cfg, NEW, 1, NEW_ROWS)
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "schema: struct<id:bigint,tag:string,s:string>\n    batch 1 added column(s) tag" in out
