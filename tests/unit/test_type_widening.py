"""Types that widen (``schema.evolution=widenTypes``): which widenings are accepted (Delta's type
widening and Iceberg's promotion), the files a widening finishes, and old rows read as the
wider type by rotsink's reader in every format, without Spark. The values expected are the
input's, widened by Python."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.reading import open_committed
from commit_protocol.records.schema_evolution import accepted, compare, widenings
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import OptionError, SchemaMismatchError
from datasource.options.sink import parse_sink_options
from tests.unit.test_schema_changes import FORMATS, field, read_all, schema, write
from tests.unit.test_task_writer import config, storage_of

WIDENED = [  # (from, to)
    ("byte", "short"), ("short", "long"), ("integer", "long"), ("float", "double"),
    ("decimal(10,2)", "decimal(12,2)"), ("decimal(10,2)", "decimal(14,4)"),
    ("date", "timestamp_ntz"),
]
NOT_WIDENED = [  # (from, to): each loses or changes values of the old type
    ("long", "integer"), ("double", "float"), ("decimal(10,2)", "decimal(10,4)"),
    ("decimal(10,2)", "decimal(12,1)"), ("integer", "string"), ("timestamp_ntz", "date"),
    ("integer", "double"), ("date", "timestamp"),
]


@pytest.mark.parametrize("old, new", WIDENED, ids=[f"{a}-{b}" for a, b in WIDENED])
def test_each_widening_delta_and_iceberg_allow_is_accepted(old, new):
    change = accepted(schema(field("c", old)), schema(field("c", new)), "widenTypes")
    assert change.widened == (("c", old, new),) and change.added == ()


@pytest.mark.parametrize("old, new", NOT_WIDENED, ids=[f"{a}-{b}" for a, b in NOT_WIDENED])
def test_every_other_type_change_is_refused_naming_the_column(old, new):
    changed = re.escape(f"column c changed type from {old} to")
    with pytest.raises(SchemaMismatchError, match=changed):
        compare(schema(field("c", old)), schema(field("c", new)), widen=True)


def test_nested_columns_widen_too():
    old = schema(field("p", {"type": "struct", "fields": [field("x", "integer")]}),
                 field("xs", {"type": "array", "elementType": "float", "containsNull": True}))
    new = schema(field("p", {"type": "struct", "fields": [field("x", "long")]}),
                 field("xs", {"type": "array", "elementType": "double", "containsNull": True}))
    assert accepted(old, new, "widenTypes").widened == (("p.x", "integer", "long"),
                                                        ("xs[]", "float", "double"))


def test_a_widening_needs_the_mode_and_an_added_column_needs_addcolumns():
    old, new = schema(field("c", "integer")), schema(field("c", "long"), field("d", "string"))
    with pytest.raises(SchemaMismatchError, match=r"column c widened from integer to long: set "
                                                  r"schema.evolution=widenTypes"):
        accepted(old, new, "addColumns")
    with pytest.raises(SchemaMismatchError, match=r"column d is added, and "
                                                  r"schema.evolution=widenTypes adds no columns"):
        accepted(old, new, "widenTypes")
    assert accepted(old, new, "addColumns,widenTypes").added == ("d",)


@pytest.mark.parametrize("given, mode", [("widenTypes", "widenTypes"),
                                         ("widentypes, addColumns", "addColumns,widenTypes"),
                                         ("addColumns", "addColumns")])
def test_the_option_takes_either_order(tmp_path, given, mode):
    options = {"path": str(tmp_path), "schema.evolution": given}
    assert parse_sink_options(options).schema_evolution == mode


def test_delta_s_type_widening_is_refused_at_start(tmp_path):
    """delta-rs (1.6.6, the newest) writes no type change: it casts an append to the table's
    type (measured: "Cast error: Can't cast value 1099511627776 to type Int32"), and rotsink
    writes no Delta log by hand."""
    with pytest.raises(OptionError, match=r"schema.evolution='widenTypes' with "
                                          r"table.format=delta: delta-rs"):
        parse_sink_options({"path": str(tmp_path), "format": "parquet", "table.format": "delta",
                            "schema.evolution": "widenTypes"})


# -- a path across a widening ------------------------------------------------------------------
OLD = schema(field("id", "integer"), field("amount", "float"), field("day", "date"),
             field("price", "decimal(10,2)"))
NEW = schema(field("id", "long"), field("amount", "double"), field("day", "timestamp_ntz"),
             field("price", "decimal(14,4)"))
OLD_TYPES = pa.schema([("id", pa.int32()), ("amount", pa.float32()), ("day", pa.date32()),
                       ("price", pa.decimal128(10, 2))])
NEW_TYPES = pa.schema([("id", pa.int64()), ("amount", pa.float64()),
                       ("day", pa.timestamp("us")), ("price", pa.decimal128(14, 4))])
OLD_VALUES: list[dict] = [{"id": 1, "amount": 1.5, "day": dt.date(2026, 11, 30),
               "price": decimal.Decimal("12345678.90")},
              {"id": None, "amount": None, "day": None, "price": None}]
NEW_VALUES: list[dict] = [{"id": 2**40, "amount": 0.1, "day": dt.datetime(2026, 12, 1, 13, 30),
               "price": decimal.Decimal("1234567890.1234")}]


def widened(row: dict) -> dict:
    """An old row as the wider types say it: the same values (midnight for a date)."""
    day = row["day"]
    return {**row, "day": None if day is None else dt.datetime.combine(day, dt.time())}


@pytest.mark.parametrize("name", [n for n in FORMATS if n != "csv-encrypted"] + ["avro"])
def test_old_rows_read_as_the_wider_types(tmp_path, monkeypatch, name):
    """Every format finishes its files at the widening, JSON lines too (a file holds one type
    per column); rotsink's reader reads the old files' values as the wider types."""
    monkeypatch.setenv("ROTSINK_TEST_KEY", base64.b64encode(os.urandom(32)).decode())
    options: dict[str, Any] = dict(FORMATS.get(name, {"file_suffix": ".avro",
                                                      "compression": "snappy"}))
    if "keys" in options:
        options["keys"] = KeyRefs(options["keys"])
    cfg = config(tmp_path, format=name.split("-")[0], schema_evolution="widenTypes", **options)
    write(cfg, OLD, 0, pa.RecordBatch.from_pylist(OLD_VALUES, schema=OLD_TYPES))
    result = write(cfg, NEW, 1, pa.RecordBatch.from_pylist(NEW_VALUES, schema=NEW_TYPES),
                   retire=True)
    assert [f.reason for f in result.finalized] == ["schema"]
    assert read_all(cfg, NEW_TYPES) == sorted(
        [widened(r) for r in OLD_VALUES] + NEW_VALUES, key=lambda r: r["id"] or 0)
    committed = open_committed(storage_of(cfg))
    assert committed is not None
    assert widenings(committed[2].extra) == [(1, (
        ("id", "integer", "long"), ("amount", "float", "double"), ("day", "date", "timestamp_ntz"),
        ("price", "decimal(10,2)", "decimal(14,4)")))]


def test_a_commit_raising_at_the_widening_is_replayed_whole(tmp_path, monkeypatch):
    """The batch that widens fails where its change is decided (``driver.schema_change``):
    Spark aborts it and replays it; the replay widens once, and every row reads once."""
    cfg = config(tmp_path, format="parquet", compression="snappy", file_suffix=".parquet",
                 schema_evolution="widenTypes")
    write(cfg, OLD, 0, pa.RecordBatch.from_pylist(OLD_VALUES, schema=OLD_TYPES))
    monkeypatch.setenv(failpoints.ENV_VAR, "driver.schema_change=raise")
    new_rows = pa.RecordBatch.from_pylist(NEW_VALUES, schema=NEW_TYPES)
    with pytest.raises(failpoints.FailpointError):
        write(cfg, NEW, 1, new_rows, retire=True)
    monkeypatch.delenv(failpoints.ENV_VAR)
    write(cfg, NEW, 1, new_rows, retire=True)
    assert len(read_all(cfg, NEW_TYPES)) == 3
    committed = open_committed(storage_of(cfg))
    assert committed is not None and len(widenings(committed[2].extra)) == 1
    assert json.loads(committed[2].schema_json) == json.loads(NEW)
    narrower = dataclasses.replace(cfg, schema_evolution="addColumns")
    with pytest.raises(SchemaMismatchError, match="column id changed type from long to "
                                                  "integer"):
        write(narrower, OLD, 2, pa.RecordBatch.from_pylist(OLD_VALUES, schema=OLD_TYPES))


# -- an Iceberg table ------------------------------------------------------------------------
ICE_OLD = schema(field("id", "integer"), field("grp", "string"), field("amount", "float"),
                 field("price", "decimal(10,2)"))
ICE_NEW = schema(field("id", "long"), field("grp", "string"), field("amount", "double"),
                 field("price", "decimal(14,2)"))
ICE_TYPES = {False: pa.schema([("id", pa.int32()), ("grp", pa.string()),
                               ("amount", pa.float32()), ("price", pa.decimal128(10, 2))]),
             True: pa.schema([("id", pa.int64()), ("grp", pa.string()),
                              ("amount", pa.float64()), ("price", pa.decimal128(14, 2))])}


def ice_rows(batch_id: int) -> pa.RecordBatch:
    """Batches 0-1 of the old types, 2-3 of the wider ones (ids past the old range)."""
    wide = batch_id >= 2
    ids = [batch_id * 10 + i + (2**40 if wide else 0) for i in range(3)]
    return pa.RecordBatch.from_pylist(
        [{"id": i, "grp": "a", "amount": 0.5, "price": decimal.Decimal("1234.50")} for i in ids],
        schema=ICE_TYPES[wide])


@pytest.mark.parametrize("raised", [None, "table.after_schema", "driver.schema_change"])
def test_an_iceberg_table_promotes_the_widened_types(tmp_path, monkeypatch, raised):
    """The batch that widens promotes the table's columns at its planning (``raised``: that
    step, or the commit's schema change, raises once; Spark aborts and replays the batch):
    pyiceberg reads every row, old files as the wider types, each once."""
    from commit_protocol.tables import follow
    from tests.support.spark_like import SparkLikeQuery
    from tests.unit.test_iceberg_commits import iceberg_config, table_of

    follow.forget()
    cfg = dataclasses.replace(iceberg_config(str(tmp_path / "out"), max_batches=1),
                              schema_evolution="widenTypes")
    query = SparkLikeQuery(cfg, rows=ice_rows, schema_json=lambda b: ICE_NEW if b >= 2
                           else ICE_OLD)
    for batch_id in range(4):
        if batch_id == 2 and raised:
            monkeypatch.setenv(failpoints.ENV_VAR, f"{raised}=raise:1")
            failpoints._hits.clear()
        query.run(batch_id, now_ms=batch_id)
    assert [f.split(":")[0] for f in query.failures] == (["FailpointError"] if raised else [])
    table = table_of(cfg)
    assert {f.name: str(f.field_type) for f in table.schema().fields} == {
        "id": "long", "grp": "string", "amount": "double", "price": "decimal(14, 2)"}
    rows = table.scan().to_arrow()
    assert rows.schema.field("id").type == pa.int64()
    assert sorted(rows.column("id").to_pylist()) == sorted(
        i for b in range(4) for i in ice_rows(b).column("id").to_pylist())
    follow.forget()


def test_iceberg_refuses_a_widening_it_cannot_promote(tmp_path):
    """A date widened to timestamp_ntz (Iceberg: format version 3 only) is refused at the
    batch's planning, naming the column; the table and the log keep the old type."""
    from commit_protocol.tables import follow
    from commit_protocol.vocabulary.errors import TableError
    from tests.support.spark_like import SparkLikeQuery
    from tests.unit.test_iceberg_commits import iceberg_config

    follow.forget()
    cfg = dataclasses.replace(iceberg_config(str(tmp_path / "out"), max_batches=1),
                              schema_evolution="widenTypes")
    old = schema(field("id", "long"), field("grp", "string"), field("day", "date"))
    new = schema(field("id", "long"), field("grp", "string"), field("day", "timestamp_ntz"))
    rows = {False: pa.record_batch({"id": pa.array([1], pa.int64()), "grp": ["a"],
                                    "day": pa.array([dt.date(2026, 1, 1)], pa.date32())}),
            True: pa.record_batch({"id": pa.array([2], pa.int64()), "grp": ["a"],
                                   "day": pa.array([dt.datetime(2026, 1, 2)],
                                                   pa.timestamp("us"))})}
    query = SparkLikeQuery(cfg, rows=lambda b: rows[b >= 1],
                           schema_json=lambda b: new if b >= 1 else old, caught=())
    query.run(0, now_ms=0)
    with pytest.raises(TableError, match=r"column day is date in the table and timestamp in "
                                         r"the output; Iceberg promotes int to long"):
        query.run(1, now_ms=1)
    follow.forget()


def test_a_running_change_feed_stops_before_a_widened_type(tmp_path, capsys):
    """Spark fixed the feed's types when it started: it delivers the batches of its schema,
    then fails the micro-batch that would cross the widening, naming it; ``rotsink inspect``
    shows it."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    from pyspark.sql.types import StructType

    from commit_protocol.reading.change_feed import FeedSchemaChangedError
    from datasource.commands.cli import main
    from datasource.reading.stream_reader import RotSinkStreamReader

    cfg = config(tmp_path, format="jsonl", schema_evolution="widenTypes")
    write(cfg, OLD, 0, pa.RecordBatch.from_pylist(OLD_VALUES, schema=OLD_TYPES))
    feed = RotSinkStreamReader({"path": str(tmp_path)}, StructType.fromJson(json.loads(OLD)))
    start = feed.initialOffset()
    write(cfg, NEW, 1, pa.RecordBatch.from_pylist(NEW_VALUES, schema=NEW_TYPES), retire=True)
    end = feed.latestOffset(start, ReadAllAvailable())
    assert end["batch"] == 0
    with pytest.raises(FeedSchemaChangedError, match=re.escape(
            "widened id from integer to long, amount from float to double, day from date to "
            "timestamp_ntz, price from decimal(10,2) to decimal(14,4) at its batch 1")):
        feed.latestOffset(end, ReadAllAvailable())
    assert main(["inspect", str(tmp_path)]) == 0
    assert "    batch 1 widened id from integer to long, amount from float to double" in \
        capsys.readouterr().out


def widening_batch(path: str) -> None:
    """Batch 1 of a Parquet path whose batch 0 wrote the old types: the widening commit (run
    in a child process that a failpoint kills)."""
    cfg = config(Path(path), format="parquet", compression="snappy", file_suffix=".parquet",
                 schema_evolution="widenTypes")
    write(cfg, NEW, 1, pa.RecordBatch.from_pylist(NEW_VALUES, schema=NEW_TYPES), retire=True)


@pytest.mark.parametrize("point", ["driver.schema_change", "driver.after_stage",
                                   "driver.before_log_write"])
def test_a_driver_killed_at_the_widening_loses_and_doubles_nothing(tmp_path, point):
    """The driver of the widening batch dies (SIGKILL-like ``os._exit``) where the change is
    decided, after its intent is staged, or before its log file; a new driver replays the
    batch (its planning rolls a staged intent forward): every row reads once, as the wider
    types, and the widening is recorded once."""
    import subprocess
    import sys

    cfg = config(tmp_path, format="parquet", compression="snappy", file_suffix=".parquet",
                 schema_evolution="widenTypes")
    write(cfg, OLD, 0, pa.RecordBatch.from_pylist(OLD_VALUES, schema=OLD_TYPES))
    child = subprocess.run(
        [sys.executable, "-c", "import sys; from tests.unit.test_type_widening import "
         "widening_batch; widening_batch(sys.argv[1])", str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
        env={**os.environ, failpoints.ENV_VAR: f"{point}=kill"})
    assert child.returncode == 137, child.stderr[-2000:]
    widening_batch(str(tmp_path))  # the restarted driver replays the batch
    assert read_all(cfg, NEW_TYPES) == sorted(
        [widened(r) for r in OLD_VALUES] + NEW_VALUES, key=lambda r: r["id"] or 0)
    committed = open_committed(storage_of(cfg))
    assert committed is not None and len(widenings(committed[2].extra)) == 1
