"""Bad rows (``errors.mode=quarantine``): every refusal a reason, each refused row kept once in
the quarantine and every other row once in the output, through errors at every step and the
replays after them; the limit; the totals.

Driven as Spark drives a query, without Spark (:class:`~tests.support.spark_like.SparkLikeQuery`);
the configs are made from options as a query's are. The rows expected come from the input;
what each output holds is read from outside rotsink: the files its ``_spark_metadata`` lists,
read by pyarrow and Python's ``json`` (as Spark's readers read them).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.orc as po
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.log import open_committed
from commit_protocol.metrics.totals import gauges_of
from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import open_storage
from commit_protocol.tables import follow
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import (
    ConstraintError,
    QuarantineLimitError,
    UnencodableValueError,
)
from datasource.options.quarantine import with_error_policy
from datasource.options.sink import parse_sink_options
from tests.support.spark_like import SparkLikeQuery
from tests.support.spark_log import finalized_paths, latest_batch

FIELD = {"nullable": True, "metadata": {}}
UTC = dt.timezone.utc


def schema_json(schema: pa.Schema) -> str:
    kinds = {pa.int64(): "long", pa.string(): "string", pa.date32(): "date"}
    return json.dumps({"type": "struct", "fields": [
        {"name": f.name, "type": kinds.get(f.type, "timestamp"), **FIELD} for f in schema]})


def sink(out: Path, **options: str) -> SinkConfig:
    return parse_sink_options({"path": str(out), "errors.mode": "quarantine",
                               "rotation.maxBatches": "1", "log.cleanupDelay": "0s", **options})


def run(cfg: SinkConfig, batches: list[pa.RecordBatch], *, json_schema: str | None = None,
        caught: tuple[type[BaseException], ...] | None = None) -> SparkLikeQuery:
    query = SparkLikeQuery(cfg, rows=lambda b: batches[b] if b < len(batches) else None,
                           schema_json=lambda b: json_schema or schema_json(batches[0].schema))
    if caught is not None:
        query.caught = caught
    now_ms = int(time.time() * 1000) + 1000  # the clean-up's clock: the files are older
    for batch_id in range(len(batches)):
        query.run(batch_id, now_ms=now_ms + batch_id)
    return query


def quarantined(cfg: SinkConfig) -> list[dict]:
    """The quarantine's rows, from the files its log lists (Python's json)."""
    assert cfg.quarantine is not None
    latest = latest_batch(cfg.quarantine.path)
    return [] if latest is None else [
        json.loads(line) for path in finalized_paths(cfg.quarantine.path, latest)
        for line in Path(path).read_text().splitlines()]


def output_rows(cfg: SinkConfig) -> list[dict]:
    """The output's finalized rows (text: one line a row; ORC: pyarrow; JSON lines: json)."""
    latest = latest_batch(cfg.path)
    paths = [] if latest is None else finalized_paths(cfg.path, latest)
    if cfg.format == "text":
        return [{"value": line} for p in paths for line in Path(p).read_text().split("\n")[:-1]]
    if cfg.format == "orc":
        return [r for p in paths for r in po.read_table(p).to_pylist()]
    return [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()]


def assert_both_verify(cfg: SinkConfig) -> None:
    """``rotsink verify`` finds the output and its quarantine whole, nothing pending."""
    assert cfg.quarantine is not None
    for path in (cfg.path, cfg.quarantine.path):
        found = verify_output(open_storage(path), commit_timeout_s=0)
        assert found.ok and not found.pending, found.problems


def as_json(row: dict) -> dict:
    """``row`` as JSON lines write it (Spark's JSON: ISO dates)."""
    return {k: v.isoformat() if isinstance(v, dt.date) else v for k, v in row.items()}


def parsed(text: str, schema: pa.Schema) -> dict:
    """A quarantined row's JSON, its dates and instants read back with Python's ISO parser."""
    row = json.loads(text)
    for f in schema:
        if row.get(f.name) is not None and pa.types.is_timestamp(f.type):
            row[f.name] = dt.datetime.fromisoformat(row[f.name])
        elif row.get(f.name) is not None and pa.types.is_date(f.type):
            row[f.name] = dt.date.fromisoformat(row[f.name])
    return row


REFUSALS = [
    pytest.param("text", pa.schema([("value", pa.string())]),
                 [{"value": "ok"}, {"value": "two\nlines"}, {"value": "cr\rhere"},
                  {"value": None}], {1: "value", 2: "value"}, "line_break", id="text-line-breaks"),
    pytest.param("orc", pa.schema([("id", pa.int64()), ("d", pa.date32())]),
                 [{"id": 1, "d": dt.date(1582, 10, 10)}, {"id": 2, "d": dt.date(1582, 10, 15)},
                  {"id": 3, "d": None}], {0: "d"}, "calendar_gap", id="orc-skipped-date"),
    pytest.param("orc", pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC"))]),
                 [{"id": 1, "ts": dt.datetime(2300, 1, 1, tzinfo=UTC)},
                  {"id": 2, "ts": dt.datetime(2026, 1, 1, tzinfo=UTC)}],
                 {0: "ts"}, "timestamp_range", id="orc-instant-out-of-range"),
    pytest.param("orc", pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", "UTC"))]),
                 [{"id": 1, "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)},
                  {"id": 2, "ts": dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)}],
                 {0: "ts"}, "timestamp_fraction", id="orc-fraction-before-1970"),
]


@pytest.mark.parametrize("fmt, schema, rows, bad, reason", REFUSALS)
def test_each_value_a_format_refuses_is_kept_with_its_reason(tmp_path, fmt, schema, rows, bad,
                                                             reason):
    """Where ``errors.mode=fail`` fails the batch on a value (the same input raises below),
    the quarantine keeps the row as it came, naming the column and the reason; every other
    row is in the output once."""
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    cfg = sink(tmp_path / "out", format=fmt)
    with pytest.raises(UnencodableValueError):
        run(dataclasses.replace(cfg, path=str(tmp_path / "failing"), quarantine=None), [batch],
            caught=())
    run(cfg, [batch])
    kept = quarantined(cfg)
    assert [parsed(k["row"], schema) for k in kept] == [rows[i] for i in bad]
    assert [(k["column"], k["reason"], k["batch_id"], k["query_id"]) for k in kept] == [
        (column, reason, 0, "q") for column in bad.values()]
    assert all(f"column {k['column']!r}" in k["message"] for k in kept)
    expected = [r for i, r in enumerate(rows) if i not in bad]
    if fmt == "text":  # a null is written as an empty line (as Spark's text writer does)
        expected = [{"value": r["value"] or ""} for r in expected]
    assert output_rows(cfg) == expected
    assert_both_verify(cfg)


@pytest.fixture
def fresh_process_memory():
    follow.forget()
    yield
    follow.forget()


def test_a_table_s_not_null_and_generated_columns_are_reasons(tmp_path, fresh_process_memory):
    """Another writer's Delta table, ``id`` NOT NULL and ``day`` generated from ``ts``: a
    null id and a day the stream gives otherwise are kept aside; the table gets the rest."""
    from deltalake import DeltaTable, Field, Schema
    from deltalake.schema import PrimitiveType

    out = tmp_path / "out"
    fields = [Field("id", PrimitiveType("long"), nullable=False),
              Field("ts", PrimitiveType("timestamp")),
              Field("day", PrimitiveType("date"),
                    metadata={"delta.generationExpression": "CAST(ts AS DATE)"})]
    DeltaTable.create(str(out), Schema(fields), partition_by=["day"])
    cfg = sink(out, format="parquet", **{"table.format": "delta", "partitionBy": "day"})
    noon = dt.datetime(2026, 11, 30, 12, tzinfo=UTC)
    rows: list[dict] = [
        {"id": 1, "ts": noon, "day": dt.date(2026, 11, 30)},
        {"id": None, "ts": noon, "day": dt.date(2026, 11, 30)},
        {"id": 3, "ts": noon, "day": dt.date(2000, 1, 1)},
        {"id": 4, "ts": None, "day": None}]
    batch = pa.RecordBatch.from_pylist(rows, schema=pa.schema([
        ("id", pa.int64()), ("ts", pa.timestamp("us", "UTC")), ("day", pa.date32())]))
    run(cfg, [batch])
    kept = quarantined(cfg)
    assert sorted((k["column"], k["reason"], json.dumps(json.loads(k["row"]))) for k in kept) == [
        ("day", "generated_column", json.dumps(as_json(rows[2]))),
        ("id", "not_null", json.dumps(as_json(rows[1])))]
    assert {k["message"] for k in kept} == {
        "a null in column 'id', NOT NULL in the delta table",
        "column 'day' given a value other than CAST(ts AS DATE), as the delta table generates it"}
    assert sorted(DeltaTable(str(out)).to_pyarrow_table().column("id").to_pylist()) == [1, 4]


def test_a_null_in_a_not_null_column_still_fails_the_batch_by_default(tmp_path,
                                                                      fresh_process_memory):
    """``errors.mode=fail`` (the default): the batch fails, as before the quarantine."""
    cfg = parse_sink_options({"path": str(tmp_path / "out")})
    cfg = dataclasses.replace(cfg, required_columns=("id",))
    batch = pa.record_batch({"id": pa.array([1, None], pa.int64())})
    with pytest.raises(ConstraintError, match="column 'id' is NOT NULL"):
        run(cfg, [batch], caught=())
    assert latest_batch(cfg.path) is None and not (tmp_path / "out" / "_quarantine").exists()


# -- exactly once through errors ----------------------------------------------------------------

BATCHES, ROWS = 6, 10


def refusing_rows(batch_id: int) -> pa.RecordBatch:
    """Ten ids a batch, the ones ending in 3 or 7 with a null ``note`` (a NOT NULL column);
    the last batch none."""
    ids = list(range(batch_id * ROWS, (batch_id + 1) * ROWS))
    notes = [None if i % 10 in (3, 7) and batch_id < BATCHES - 1 else f"n{i}" for i in ids]
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "note": pa.array(notes)})


def refusing_query(out: Path) -> SinkConfig:
    cfg = parse_sink_options({"path": str(out), "errors.mode": "quarantine",
                              "rotation.maxRecords": "7", "log.compactInterval": "3",
                              "log.cleanupDelay": "0s"})
    return dataclasses.replace(cfg, required_columns=("note",))  # as a table's planning sets


STEPS = [*failpoints.QUARANTINE_POINTS, "task.before_append", "task.after_roll",
         "task.before_report", "driver.before_stage", "driver.after_stage",
         "driver.after_rename", "driver.before_log_write", "driver.after_log_write",
         "cleanup.after_orphan_delete"]


@pytest.mark.parametrize("point", STEPS)
def test_a_step_raising_leaves_each_row_in_exactly_one_output_once(tmp_path, monkeypatch, point):
    """The step raises once; Spark aborts the epoch and the query replays the batch: every
    input row is in the output or in the quarantine, once, and both pass ``verify``."""
    armed = tmp_path / "failpoints"
    armed.write_text(f"{point}=raise:once")
    monkeypatch.setenv(failpoints.FILE_ENV_VAR, str(armed))
    cfg = refusing_query(tmp_path / "out")
    batches = [refusing_rows(b) for b in range(BATCHES)]
    query = run(cfg, batches, json_schema=schema_json(batches[0].schema))
    assert list(tmp_path.glob(f"failpoints.{point}.fired*")), f"{point} never fired"
    assert query.failures
    cfg_all = dataclasses.replace(cfg, rotation=dataclasses.replace(cfg.rotation, max_batches=1))
    SparkLikeQuery(cfg_all, rows=lambda b: None, schema_json=lambda b: schema_json(
        batches[0].schema)).run(BATCHES, now_ms=int(time.time() * 1000) + 10**6)  # rolls all
    written = Counter(r["id"] for r in output_rows(cfg))
    kept = Counter(json.loads(k["row"])["id"] for k in quarantined(cfg))
    refused = {i for b in batches for i, n in zip(b.column("id").to_pylist(),
                                                   b.column("note").to_pylist(), strict=True)
               if n is None}
    assert kept == Counter(refused), query.failures
    assert written == Counter(set(range(BATCHES * ROWS)) - refused), query.failures
    assert_both_verify(cfg)


def test_the_replay_of_a_batch_the_quarantine_holds_commits_the_output_alone(
        tmp_path, monkeypatch, caplog):
    """The quarantine committed batch 0's refused rows, then the output's commit failed: the
    replay's refused rows (written again by its task) are not committed again; the files
    of that replay are orphans the quarantine's next clean-up deletes."""
    cfg = refusing_query(tmp_path / "out")
    monkeypatch.setenv(failpoints.ENV_VAR, "quarantine.after_commit=raise:1")
    with caplog.at_level(logging.WARNING, logger="rotsink.quarantine"):
        run(cfg, [refusing_rows(0)])
    assert "are in the quarantine" in caplog.text and "already (a replay)" in caplog.text
    assert cfg.quarantine is not None
    state = open_committed(open_storage(cfg.quarantine.path))
    assert state is not None and state[1] == 0  # one quarantine batch, for output batch 0
    assert [json.loads(k["row"])["id"] for k in quarantined(cfg)] == [3, 7]
    monkeypatch.delenv(failpoints.ENV_VAR)
    run(cfg, [refusing_rows(b) for b in range(4)])  # 0 is committed: the tasks skip it
    orphans = list((tmp_path / "out" / "_quarantine" / "_rotsink" / "inprogress").glob(".*"))
    assert orphans == [], "the replay's quarantine files were deleted as orphans"


def test_a_batch_over_the_limit_fails_and_commits_nothing(tmp_path):
    """``errors.maxQuarantinedShare=0.1``: a batch with 2 of 10 rows refused fails naming
    the share and the reasons, nothing of it in either output; with the limit raised, the
    replay commits it."""
    cfg = with_error_policy(refusing_query(tmp_path / "out"), {
        "errors.mode": "quarantine", "errors.maxquarantinedshare": "0.1"}, parse_sink_options)
    with pytest.raises(QuarantineLimitError, match=r"batch 0: 2 of its 10 rows \(20.00%\) were "
                       r"refused \(not_null 2\), more than errors.maxQuarantinedShare=0.1"):
        run(cfg, [refusing_rows(0)], caught=())
    assert latest_batch(cfg.path) is None and quarantined(cfg) == []
    run(dataclasses.replace(cfg, max_quarantined_share=0.2), [refusing_rows(0)])
    assert len(quarantined(cfg)) == 2


def test_batches_without_a_refused_row_commit_nothing_to_the_quarantine(tmp_path):
    cfg = refusing_query(tmp_path / "out")
    run(cfg, [refusing_rows(BATCHES - 1)] * 3)
    assert latest_batch(cfg.path) == 2
    assert not (tmp_path / "out" / "_quarantine").exists()


def test_the_log_counts_refused_rows_by_reason(tmp_path):
    """The output's totals (its metrics, ``rotsink inspect``): refused rows in all, by reason,
    and in the last batch."""
    cfg = refusing_query(tmp_path / "out")
    run(cfg, [refusing_rows(0), refusing_rows(1), refusing_rows(BATCHES - 1)])
    committed = open_committed(open_storage(cfg.path))
    assert committed is not None
    state = committed[2]
    assert state.extra["totals"]["quarantinedByReason"] == {"not_null": 4}
    gauges = gauges_of(state)
    assert (gauges["rowsQuarantined-total"], gauges["rowsQuarantined-lastBatch"]) == (4, 0)
    assert gauges["rows-total"] == 26  # the output's rows: refused ones are not among them
    from datasource.commands.inspect import schema_lines

    assert "quarantined: 4 row(s) refused (not_null 4), 0 in the last batch; kept in the " \
        "quarantine (errors.quarantinePath, default <path>/_quarantine)" in schema_lines(cfg.path)


def test_an_encrypted_output_keeps_its_refused_rows_encrypted(tmp_path, monkeypatch):
    """A refused row holds the same data as the output's rows: the quarantine takes the
    output's key; its bytes on disk show nothing, rotsink's reader with the key reads it."""
    from commit_protocol.crypto.keys import KeyRefs
    from commit_protocol.reading import committed_files, read_batches

    monkeypatch.setenv("ROTSINK_TEST_KEY", "A" * 43 + "=")
    cfg = dataclasses.replace(parse_sink_options({
        "path": str(tmp_path / "out"), "errors.mode": "quarantine",
        "encryption.key": "env:ROTSINK_TEST_KEY"}), required_columns=("note",))
    run(cfg, [refusing_rows(0)])
    assert cfg.quarantine is not None and cfg.quarantine.file_suffix.endswith(".enc")
    files = list((tmp_path / "out" / "_quarantine").glob("part-*"))
    assert files and all(b'"id":3' not in f.read_bytes() for f in files)
    storage = open_storage(cfg.quarantine.path)
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    keys = KeyRefs.from_options({"encryption.key": "env:ROTSINK_TEST_KEY"})
    assert keys is not None
    rows = [json.loads(r) for f in committed_files(log, latest, state, include_in_progress=False)
            for b in read_batches(storage, f, state=state, schema=pa.schema([("row", pa.string())]),
                                  ring=keys.ring())
            for r in b.column("row").to_pylist()]
    assert [r["id"] for r in rows] == [3, 7]


@pytest.mark.parametrize("options, message", [
    ({"errors.mode": "skip"}, r"option errors.mode='skip': expected fail .* or quarantine"),
    ({"errors.quarantinePath": "/x"}, r"option errors.quarantinePath='/x' is for "
                                      r"errors.mode=quarantine"),
    ({"errors.mode": "quarantine", "errors.maxQuarantinedShare": "0"},
     r"option errors.maxQuarantinedShare='0': expected a share .* above 0 and at most 1"),
    ({"errors.mode": "quarantine", "errors.maxQuarantinedShare": "5%"},
     r"option errors.maxQuarantinedShare='5%'"),
    ({"errors.mode": "quarantine", "errors.quarantinePath": "{out}/bad"},
     r"is inside the output .* choose a folder whose name starts with '_'"),
    ({"errors.mode": "quarantine", "errors.quarantinePath": "{out}"}, r"holds the output"),
], ids=["unknown-mode", "path-without-mode", "share-zero", "share-percent", "inside-output",
        "the-output-itself"])
def test_a_wrong_errors_option_is_named(tmp_path, options, message):
    from commit_protocol.vocabulary.errors import OptionError

    out = str(tmp_path / "out")
    given = {k: v.format(out=out) for k, v in options.items()}
    with pytest.raises(OptionError, match=message):
        parse_sink_options({"path": out, **given})


def test_an_output_on_s3_keeps_its_quarantine_there(s3_endpoint):
    """On an object store (moto's S3): the quarantine under the output's prefix, written and
    committed with the output's storage options, read back through fsspec."""
    import uuid

    import fsspec

    from tests.support.s3server import create_bucket

    bucket = create_bucket(s3_endpoint, f"bad-rows-{uuid.uuid4().hex[:8]}")
    cfg = dataclasses.replace(parse_sink_options({
        "path": f"s3://{bucket}/events", "errors.mode": "quarantine",
        "fs.endpoint_url": s3_endpoint}), required_columns=("note",))
    run(cfg, [refusing_rows(0), refusing_rows(1)])
    assert cfg.quarantine is not None and cfg.quarantine.path == f"s3://{bucket}/events/_quarantine"
    fs = fsspec.filesystem("s3", endpoint_url=s3_endpoint)
    paths = finalized_paths(cfg.quarantine.path, 1, {"endpoint_url": s3_endpoint})
    rows = [json.loads(json.loads(line)["row"]) for p in paths
            for line in fs.cat_file(str(p)).decode().splitlines()]
    assert sorted(r["id"] for r in rows) == [3, 7, 13, 17]
    assert verify_output(open_storage(cfg.quarantine.path, cfg.fs_options),
                         commit_timeout_s=0).ok


def test_the_quarantine_may_be_anywhere_else(tmp_path):
    cfg = parse_sink_options({"path": str(tmp_path / "out"), "errors.mode": "quarantine",
                              "errors.quarantinePath": str(tmp_path / "bad-rows")})
    assert cfg.quarantine is not None and cfg.quarantine.path == str(tmp_path / "bad-rows")
    assert (cfg.quarantine.format, cfg.quarantine.rotation.max_batches) == ("jsonl", 1)


def test_the_quarantine_s_log_and_files_say_the_same_schema():
    """The driver records the quarantine's schema without pyarrow; the tasks write rows of
    pyarrow's: Spark's reading of the one is the other."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    from commit_protocol.commit.quarantine import QUARANTINE_SCHEMA_JSON
    from commit_protocol.task.quarantine.rows import QUARANTINE_SCHEMA

    assert StructType.fromJson(json.loads(QUARANTINE_SCHEMA_JSON)) == from_arrow_schema(
        QUARANTINE_SCHEMA)


def test_an_iceberg_required_field_is_a_reason(tmp_path, fresh_process_memory):
    """A table another writer made with ``id`` required: a null id is kept aside, pyiceberg
    reads the rest."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from commit_protocol.tables.iceberg.table import IcebergFollowedTable

    out = tmp_path / "out"
    cfg = sink(out, format="parquet", **{"table.format": "iceberg"})
    table = IcebergFollowedTable(open_storage(cfg.path).root_uri, cfg)
    table.catalog.create_namespace_if_not_exists(table.identifier.split(".")[0])
    table.catalog.create_table(table.identifier, Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "note", StringType(), required=False)), location=str(out))
    batch = pa.record_batch({"id": pa.array([1, None, 3], pa.int64()), "note": ["a", "b", "c"]})
    run(cfg, [batch])
    kept = quarantined(cfg)
    assert [(json.loads(k["row"]), k["column"], k["reason"]) for k in kept] == [
        ({"id": None, "note": "b"}, "id", "not_null")]
    loaded = table.loaded()
    assert loaded is not None
    assert sorted(loaded.scan().to_arrow().column("id").to_pylist()) == [1, 3]


@pytest.mark.parametrize("committed, given, mode, expected", [
    ("integer", "long", "none", (("c", "integer"),)),
    ("decimal(10,2)", "decimal(14,4)", "addColumns", (("c", "decimal(10,2)"),)),
    ("integer", "long", "widenTypes", ()),          # widened instead
    ("float", "double", "none", ()),                # a float: values would change, not fail
    ("long", "integer", "none", ()),                # narrower: no row to refuse, a change
], ids=["int-long", "decimal", "widenTypes-widens", "float-refused", "narrower-refused"])
def test_a_wider_given_type_is_written_as_committed_only_where_nothing_is_lost(
        tmp_path, committed, given, mode, expected):
    from commit_protocol.records.schema_evolution import into_committed

    cfg = parse_sink_options({"path": str(tmp_path), "errors.mode": "quarantine",
                              "schema.evolution": mode})
    old = json.dumps({"type": "struct", "fields": [{"name": "c", "type": committed, **FIELD}]})
    new = json.dumps({"type": "struct", "fields": [{"name": "c", "type": given, **FIELD}]})
    assert into_committed(cfg, old, new) == expected
    assert into_committed(dataclasses.replace(cfg, quarantine=None), old, new) == ()


def test_decimals_that_do_not_fit_the_committed_type_are_found_and_kept():
    """Decimals have no range mask: the rows are found by halving the chunk."""
    import decimal

    from commit_protocol.task.quarantine.committed_types import as_committed
    from commit_protocol.task.quarantine.sorting import sort_out

    values = [decimal.Decimal(v) for v in ("1.25", "12345678.90", "123456789.00", "-0.50",
                                           "99999999999.99")]
    batch = pa.record_batch({"d": pa.array(values, pa.decimal128(14, 2))})
    kept, refused = sort_out(batch, lambda b: as_committed(b, (("d", "decimal(10,2)"),)))
    assert [v for b in kept for v in b.column("d").to_pylist()] == [
        decimal.Decimal("1.25"), decimal.Decimal("12345678.90"), decimal.Decimal("-0.50")]
    assert all(b.schema.field("d").type == pa.decimal128(10, 2) for b in kept)
    assert [(r.row.column("d")[0].as_py(), r.error.reason) for r in refused] == [
        (decimal.Decimal("123456789.00"), "committed_type"),
        (decimal.Decimal("99999999999.99"), "committed_type")]
