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
from typing import Any

import pyarrow as pa
import pytest

from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.reading import open_committed
from commit_protocol.records.schema_evolution import accepted, compare, widenings
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import OptionError, SchemaMismatchError
from datasource.options.sink import parse_sink_options
from tests.unit.test_schema_changes import FORMATS, field, schema, write
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


def read_all(cfg, types: pa.Schema) -> list[dict]:
    """Every committed row, finished files and files in progress, by rotsink's reader."""
    from commit_protocol.reading import committed_files, read_batches

    storage = storage_of(cfg)
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    ring = cfg.keys.ring() if cfg.keys is not None else None
    return sorted((row for f in committed_files(log, latest, state)
                   for batch in read_batches(storage, f, state=state, schema=types, ring=ring)
                   for row in batch.to_pylist()), key=lambda r: r["id"] or 0)


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
