"""Iceberg's hidden partitioning (``partitionBy="days(ts), bucket(4, id)"``) without Spark:
each transform's directory values against the Iceberg spec's own examples (Appendix B's
bucket hashes, the truncate examples, time before 1970 floored, not rounded towards 0); a
table rotsink creates with such a spec, each data file's partition tuple equal to what the
spec computes for every row in it (bucket by the ``mmh3`` library from the spec's byte forms,
days by date arithmetic: neither is rotsink's code nor pyiceberg-core's), and pyiceberg
pruning files by them; the options that cannot be taken, refused by name."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import struct
from collections import Counter
from pathlib import Path

import mmh3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.commit.committer import Committer
from commit_protocol.commit.layout import as_committed, joined_terms, laid_out
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import open_storage
from commit_protocol.tables.iceberg.table import IcebergFollowedTable
from commit_protocol.tables.iceberg.transforms import directory_values
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary.errors import OptionError, TableError
from commit_protocol.vocabulary.partition_terms import parse_term
from datasource.commands.inspect import schema_lines
from datasource.options.sink import parse_sink_options
from datasource.writing.writer import check_compatible
from tests.unit.test_delta_commits import forget

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
SPEC_TS = dt.datetime(2017, 11, 16, 22, 31, 8)


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


def spelled(values, term: str, arrow_type=None) -> list[str]:
    return directory_values(pa.array(values, arrow_type), parse_term(term, shown="")).to_pylist()


def whole_hash(h: int) -> str:
    """A bucket of Integer.MAX_VALUE buckets: the spec's (hash & MAX_VALUE) % N is the hash
    itself, made non-negative."""
    return str((h & 0x7FFFFFFF) % 0x7FFFFFFF)


@pytest.mark.parametrize("values, arrow_type, expected_hash", [
    ([34], pa.int32(), 2017239379),
    ([34], pa.int64(), 2017239379),
    ([decimal.Decimal("14.20")], pa.decimal128(9, 2), -500754589),
    ([dt.date(2017, 11, 16)], pa.date32(), -653330422),
    ([SPEC_TS], pa.timestamp("us"), -2047944441),
    ([dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=dt.timezone(dt.timedelta(hours=-8)))],
     pa.timestamp("us", "UTC"), -2047944441),
    (["iceberg"], pa.string(), 1210000089),
    ([b"\x00\x01\x02\x03"], pa.binary(), -188683207),
])
def test_bucket_hashes_the_spec_s_byte_forms(values, arrow_type, expected_hash):
    # Iceberg spec, Appendix B: 32-bit hash requirements
    assert spelled(values, "bucket(2147483647, c)", arrow_type) == [whole_hash(expected_hash)]


@pytest.mark.parametrize("term, values, arrow_type, expected", [
    ("truncate(10, c)", [1, -1, 9, 10], pa.int32(), ["0", "-10", "0", "10"]),
    ("truncate(10, c)", [-1], pa.int64(), ["-10"]),
    ("truncate(50, c)", [decimal.Decimal("10.65")], pa.decimal128(4, 2), ["10.50"]),
    ("truncate(3, c)", ["iceberg", "ab", None], pa.string(), ["ice", "ab", None]),
    ("years(c)", [SPEC_TS], pa.timestamp("us"), ["2017"]),
    ("months(c)", [SPEC_TS], pa.timestamp("us"), ["2017-11"]),
    ("days(c)", [SPEC_TS], pa.timestamp("us"), ["2017-11-16"]),
    ("hours(c)", [SPEC_TS], pa.timestamp("us"), ["2017-11-16-22"]),
    ("days(c)", [dt.date(2017, 11, 16), None], pa.date32(), ["2017-11-16", None]),
    # before 1970 the ordinal is floored: the last second of 1969 is in 1969's last hour
    ("hours(c)", [dt.datetime(1969, 12, 31, 23, 59, 59)], pa.timestamp("us"),
     ["1969-12-31-23"]),
    ("days(c)", [dt.datetime(1969, 12, 31, 23, 59, 59)], pa.timestamp("us"), ["1969-12-31"]),
    # an instant's day is its day in UTC, whatever zone Spark's batch is labelled with
    ("days(c)", [dt.datetime(2017, 11, 16, 20, 0, tzinfo=dt.timezone(dt.timedelta(hours=-8)))],
     pa.timestamp("us", "America/Los_Angeles"), ["2017-11-17"]),
])
def test_truncate_and_time_transforms_as_the_spec_defines_them(term, values, arrow_type,
                                                               expected):
    assert spelled(values, term, arrow_type) == expected


# -- a table rotsink creates with a hidden spec ---------------------------------------------
TERMS = "days(ts), bucket(4, id), grp"
SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
    {"name": "grp", "type": "string", "nullable": True, "metadata": {}}]}
ROWS = 40


def config(path: str, partition_by: str | None = TERMS) -> SinkConfig:
    given = {} if partition_by is None else {"partitionBy": partition_by}
    parsed = parse_sink_options({"path": path, "format": "parquet", "table.format": "iceberg",
                                 **given})
    return dataclasses.replace(parsed, rotation=RotationPolicy(max_batches=1, interval_ms=0,
                                                               inactivity_ms=0))


def rows_of(batch_id: int) -> pa.RecordBatch:
    ids = list(range(batch_id * ROWS, (batch_id + 1) * ROWS))
    # nine hours apart: three days a batch, and a null timestamp
    ts = [None if i % 13 == 0 else EPOCH + dt.timedelta(days=20_000, hours=9 * i) for i in ids]
    return pa.record_batch({"id": pa.array(ids, pa.int64()),
                            "ts": pa.array(ts, pa.timestamp("us", "UTC")),
                            "grp": pa.array(["a" if i % 2 else "b" for i in ids])})


def commit_batch(cfg: SinkConfig, batch_id: int, *, rows: pa.RecordBatch | None = None) -> None:
    """One micro-batch as Spark drives it: the plan (the table's field ids, the directories'
    terms: a joined table's names at the first batch, the committed ones after), one task,
    the commit with the planned config (the writer Spark pickles)."""
    storage = open_storage(cfg.path, cfg.fs_options)
    committer = Committer(storage, cfg, json.dumps(SCHEMA))
    state = committer.latest_state()
    plan = WritePlan.from_state(state, storage.root_uri)
    layout = laid_out(storage, cfg, None) if state is None else as_committed(storage, cfg, state)
    planned = committer.planned(layout)
    report = TaskWriter(storage, planned, plan, batch_id=batch_id, partition=0, attempt=0,
                        query_id="q1").write([rows_of(batch_id) if rows is None else rows])
    Committer(storage, planned, json.dumps(SCHEMA)).commit(batch_id, [report])


def spec_bucket(value: int, buckets: int) -> int:
    """The spec's bucket of a long: Murmur3 x86 32-bit (seed 0) of its 8 bytes, little-endian."""
    return (mmh3.hash(struct.pack("<q", value)) & 0x7FFFFFFF) % buckets


def spec_day(ts: dt.datetime | None) -> dt.date | None:
    """The spec's day of an instant: its date in UTC (pyiceberg shows the ordinal as a date)."""
    return None if ts is None else ts.astimezone(UTC).date()


def loaded(cfg: SinkConfig):
    table = IcebergFollowedTable(open_storage(cfg.path).root_uri, cfg).loaded()
    assert table is not None
    return table


def check(cfg: SinkConfig) -> None:
    """The table check at the start of a query that has no committed batch yet."""
    table = IcebergFollowedTable(open_storage(cfg.path).root_uri, cfg)
    table.check(owner=None, schema_json=json.dumps(SCHEMA), partition_by=cfg.partition_by,
                partition_terms=cfg.partition_terms)


def test_a_new_table_is_partitioned_by_the_transforms_and_every_file_by_its_rows(tmp_path):
    cfg = config(str(tmp_path))
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    table = loaded(cfg)
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == \
        [("ts_day", "day"), ("id_bucket", "bucket[4]"), ("grp", "identity")]
    files = table.inspect.files().to_pylist()
    assert files, "the batches finalized files"
    for f in files:  # each file's tuple is what the spec computes for each of its rows
        path = f["file_path"].removeprefix("file://")
        directory = path.rsplit("/", 1)[0]
        rows = pq.read_table(path).to_pylist()  # grp lives in the directory (identity)
        assert {spec_day(r["ts"]) for r in rows} == {f["partition"]["ts_day"]}
        assert {spec_bucket(r["id"], 4) for r in rows} == {f["partition"]["id_bucket"]}
        day = f["partition"]["ts_day"]
        expected_day = "__HIVE_DEFAULT_PARTITION__" if day is None else day.isoformat()
        assert directory.endswith(f"/ts_day={expected_day}/id_bucket="
                                  f"{f['partition']['id_bucket']}/grp={f['partition']['grp']}")
    written = Counter(r["id"] for b in range(3) for r in rows_of(b).to_pylist())
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == written
    report = verify_output(open_storage(cfg.path), commit_timeout_s=0, deep=True)
    assert report.ok, report  # the table and the log list the same files, in the layout
    assert "format: parquet, partitioned by days(ts), bucket(4, id), grp" in \
        "\n".join(schema_lines(cfg.path))  # rotsink inspect


def test_a_reader_of_the_table_prunes_files_by_the_hidden_partition(tmp_path):
    cfg = config(str(tmp_path))
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    table = loaded(cfg)
    day = EPOCH + dt.timedelta(days=20_002)
    window = f"ts >= '{day.isoformat()}' and ts < '{(day + dt.timedelta(days=1)).isoformat()}'"
    planned = list(table.scan(row_filter=window).plan_files())
    everything = list(table.scan().plan_files())
    assert 0 < len(planned) < len(everything)
    expected = {r["id"] for b in range(3) for r in rows_of(b).to_pylist()
                if r["ts"] is not None and day <= r["ts"] < day + dt.timedelta(days=1)}
    assert set(table.scan(row_filter=window).to_arrow().column("id").to_pylist()) == expected


def test_a_restart_with_other_terms_or_a_table_with_another_spec_is_refused(tmp_path):
    cfg = config(str(tmp_path))
    commit_batch(cfg, 0)
    storage = open_storage(cfg.path)
    state = Committer(storage, cfg, json.dumps(SCHEMA)).latest_state()
    assert state is not None and [t.ddl for t in state.partition_terms] == \
        ["days(ts)", "bucket(4, id)", "grp"]
    hourly = config(str(tmp_path), "hours(ts), bucket(4, id), grp")
    with pytest.raises(TableError, match=r"partitioned by days\(ts\), bucket\(4, id\), grp, the "
                                         r"output by hours\(ts\), bucket\(4, id\), grp"):
        check(hourly)
    with pytest.raises(OptionError, match=r"option partitionBy='hours\(ts\), bucket\(4, id\), "
                                          r"grp': .* is partitioned by 'days\(ts\), bucket"):
        check_compatible(hourly, json.dumps(SCHEMA), state)


@pytest.mark.parametrize("partition_by", [TERMS, None], ids=["same-terms", "no-partitionBy"])
def test_a_table_pyiceberg_made_is_joined_under_its_own_partition_names(tmp_path,
                                                                        partition_by):
    """pyiceberg names ``bucket(4, id)`` ``id_bucket_4`` (Spark: ``id_bucket``): a stream
    with the same transforms of the same columns, or with no partitionBy at all, joins the
    table and writes its directories under the table's names (``grp``, identity, out of the
    files), through restarts; a restart with other terms is refused."""
    cfg = config(str(tmp_path), partition_by)
    cfg = dataclasses.replace(cfg, table_options={"identifier": "lake.events"})
    catalog = their_table(tmp_path)
    assert [f.name for f in catalog.load_table("lake.events").spec().fields] == \
        ["ts_day", "id_bucket_4", "grp"]
    joined = joined_terms(open_storage(cfg.path), cfg)
    assert [t.name for t in joined] == ["ts_day", "id_bucket_4", "grp"]
    check(cfg.laid_out(joined))  # as the planning of the first batch checks it: joined
    for batch_id in range(3):  # a new committer each batch: a restart's
        commit_batch(cfg, batch_id)
    table = catalog.load_table("lake.events")
    files = table.inspect.files().to_pylist()
    assert files and all("/id_bucket_4=" in f["file_path"] for f in files)
    for f in files:
        path = f["file_path"].removeprefix("file://")
        assert pq.read_schema(path).names == ["id", "ts"]  # grp: in the directory
        ids = pq.read_table(path, columns=["id"])["id"]
        assert {spec_bucket(i, 4) for i in ids.to_pylist()} == {f["partition"]["id_bucket_4"]}
    written = Counter(r["id"] for b in range(3) for r in rows_of(b).to_pylist())
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == written
    state = Committer(open_storage(cfg.path), cfg, json.dumps(SCHEMA)).latest_state()
    assert state is not None
    with pytest.raises(OptionError, match=r"is partitioned by 'days\(ts\), bucket\(4, id\), "):
        check_compatible(config(str(tmp_path), "hours(ts), bucket(4, id), grp"),
                         json.dumps(SCHEMA), state)


@pytest.mark.parametrize("options, expected", [
    ({"partitionBy": "days(ts)"}, r"option partitionBy='days\(ts\)': Iceberg's transforms "
                                  r"partition an Iceberg table \(table.format=iceberg\)"),
    ({"partitionBy": "days(ts)", "table.format": "delta"},
     r"option partitionBy='days\(ts\)' with table.format=delta: .* by columns"),
    ({"partitionBy": "bucket(id)", "table.format": "iceberg"},
     r"'bucket\(id\)' is not a transform Iceberg has; use .* bucket\(N, c\)"),
    ({"partitionBy": "bucket(0, id)", "table.format": "iceberg"},
     r"'bucket\(0, id\)' takes a positive whole number and a column"),
    ({"partitionBy": "minutes(ts)", "table.format": "iceberg"},
     r"'minutes\(ts\)' is not a transform Iceberg has"),
    ({"partitionBy": "days(ts), ts_day", "table.format": "iceberg"}, "listed twice"),
])
def test_terms_that_cannot_be_taken_are_refused_naming_the_option(tmp_path, options, expected):
    with pytest.raises(OptionError, match=expected):
        parse_sink_options({"path": str(tmp_path), "format": "parquet", **options})


@pytest.mark.parametrize("partition_by, expected", [
    ("days(id)", r"Iceberg's day transform does not apply to column 'id' of type long"),
    ("truncate(4, ts)", r"truncate\[4\] transform does not apply to column 'ts' of type "
                        "timestamptz"),
    ("bucket(4, nope)", r"no column 'nope' in the stream"),
])
def test_a_transform_of_a_column_it_cannot_take_is_refused_at_start(tmp_path, partition_by,
                                                                     expected):
    with pytest.raises(OptionError, match=expected):
        check(config(str(tmp_path), partition_by))


def test_a_spec_another_writer_evolves_mid_stream_keeps_the_output_s_files_under_their_spec(
        tmp_path, caplog):
    """Another writer replaces ``days(ts)`` by ``hours(ts)`` and appends under the new spec;
    the stream's next batches go on (a WARNING), their files added under the spec
    they are laid out by, each file's tuple the one the spec computes for its rows; the
    table holds every row of both writers once, a filter reads files of both specs, a
    restart's check takes the table, and path readers still see one layout."""
    cfg = config(str(tmp_path))
    commit_batch(cfg, 0)
    hourly_spec(cfg)
    theirs = pa.table({"id": pa.array([9_001, 9_002], pa.int64()),
                       "ts": pa.array([EPOCH + dt.timedelta(days=20_001)] * 2,
                                      pa.timestamp("us", "UTC")),
                       "grp": ["x", "y"]})
    loaded(cfg).append(theirs)  # pyiceberg's files under spec 1, in its own directories
    with caplog.at_level("WARNING", logger="rotsink.table"):
        for batch_id in (1, 2):
            commit_batch(cfg, batch_id)
    said = [r.getMessage() for r in caplog.records if "spec 1, changed" in r.getMessage()]
    assert said and "adds its files under spec 0 (days(ts), bucket(4, id), " \
        "grp)" in said[0], said
    table = loaded(cfg)
    assert table.spec().spec_id == 1
    written = Counter(r["id"] for b in range(3) for r in rows_of(b).to_pylist())
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == \
        written + Counter([9_001, 9_002])
    ours = [f for f in table.inspect.files().to_pylist() if f["spec_id"] == 0]
    assert {f["file_path"] for f in table.inspect.files().to_pylist() if f["spec_id"] == 1} \
        and len(ours) == len(table.inspect.files()) - 1 - (len(theirs) - 1)
    for f in ours:  # tuples under spec 0, computed from each file's rows
        rows = pq.read_table(f["file_path"].removeprefix("file://")).to_pylist()
        assert {spec_bucket(r["id"], 4) for r in rows} == {f["partition"]["id_bucket"]}
        assert {spec_day(r["ts"]) for r in rows} == {f["partition"]["ts_day"]}
    ids = set(table.scan(row_filter="id == 9001 or id == 45").to_arrow().column("id").to_pylist())
    assert ids == {9_001, 45}
    check(cfg)  # a restart, or a new output with the same partitionBy, takes the table
    # path readers see the output's layout only: verify names the other writer's files
    # under the new spec, and nothing else
    problems = verify_output(open_storage(cfg.path), commit_timeout_s=0).problems
    assert len(problems) == 2 and all("/ts_hour=" in p and "lies outside the output's "
                                      "partition directories" in p for p in problems), problems


def hourly_spec(cfg: SinkConfig) -> None:
    """Another writer's partition evolution: ``days(ts)`` replaced by ``hours(ts)``."""
    from pyiceberg.transforms import HourTransform

    with loaded(cfg).update_spec() as spec:
        spec.remove_field("ts_day")
        spec.add_field("ts", HourTransform(), "ts_hour")


@pytest.mark.parametrize("point,merging", [("table.before_commit", "true"),
                                           ("table.after_commit", "false")])
def test_a_crash_at_the_table_commit_after_the_spec_evolved_is_caught_up_once(
        tmp_path, monkeypatch, point, merging):
    """The driver dies at the table step of the first batch after another writer changed
    the spec: the restart's catch-up adds the batch's files under the output's spec, once
    (by pyiceberg's merging append and by its fast append)."""
    from commit_protocol.vocabulary import failpoints

    cfg = config(str(tmp_path))
    commit_batch(cfg, 0)
    hourly_spec(cfg)
    with loaded(cfg).transaction() as tx:
        tx.set_properties({"commit.manifest-merge.enabled": merging})
    monkeypatch.setenv(failpoints.ENV_VAR, f"{point}=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(cfg, 1)
    monkeypatch.delenv(failpoints.ENV_VAR)
    forget()
    storage = open_storage(cfg.path)
    committer = Committer(storage, cfg, json.dumps(SCHEMA))
    committer.start_table(committer.latest_state())  # the restarted query's start
    commit_batch(cfg, 2)
    table = loaded(cfg)
    written = Counter(r["id"] for b in range(3) for r in rows_of(b).to_pylist())
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == written
    assert set(table.inspect.files().column("spec_id").to_pylist()) == {0}
    assert verify_output(storage, commit_timeout_s=0).ok


def test_a_crash_after_the_first_log_commit_of_a_joined_table_is_caught_up(tmp_path,
                                                                          monkeypatch):
    """The table pyiceberg made has no mark of the output yet when the driver dies between
    the first batch's two commit points: the restart catches the batch up rather than
    taking the table for a replaced one."""
    from commit_protocol.vocabulary import failpoints

    cfg = joined_config(tmp_path)
    catalog = their_table(tmp_path)
    monkeypatch.setenv(failpoints.ENV_VAR, "table.before_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(cfg, 0)
    monkeypatch.delenv(failpoints.ENV_VAR)
    forget()
    storage = open_storage(cfg.path)
    committer = Committer(storage, cfg, json.dumps(SCHEMA))
    committer.start_table(committer.latest_state())  # the restarted query's start
    written = Counter(r["id"] for r in rows_of(0).to_pylist())
    table = catalog.load_table("lake.events")
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == written


def test_a_null_in_a_required_column_fails_the_task_before_anything_is_visible(tmp_path):
    """A table whose ``id`` is required (NOT NULL): a null would make its files unreadable
    to the engines that trust the schema; the task fails first, naming the column."""
    from commit_protocol.vocabulary.errors import ConstraintError

    cfg = joined_config(tmp_path)
    catalog = their_table(tmp_path, required_id=True)
    commit_batch(cfg, 0)
    table = catalog.load_table("lake.events")
    ids = Counter(table.scan().to_arrow().column("id").to_pylist())
    assert ids == Counter(r["id"] for r in rows_of(0).to_pylist())
    nulls = rows_of(1).to_pydict()
    nulls["id"][3] = None
    with pytest.raises(ConstraintError, match="column 'id' is NOT NULL in the iceberg table, "
                                              "and batch 1 has 1 null value"):
        commit_batch(cfg, 1, rows=pa.record_batch(nulls, schema=rows_of(1).schema))
    table = catalog.load_table("lake.events")
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == ids


def joined_config(tmp_path) -> SinkConfig:
    return dataclasses.replace(config(str(tmp_path), "days(ts), bucket(4, id), grp"),
                               table_options={"identifier": "lake.events"})


def their_table(tmp_path, *, required_id: bool = False, version: int = 2):
    """The table another writer (pyiceberg) made in the output's embedded catalog, as
    ``lake.events``: days(ts), bucket(4, id), grp, under pyiceberg's partition names."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    from commit_protocol.tables.iceberg.table import catalog_properties

    catalog = load_catalog("rotsink", **catalog_properties(f"file://{tmp_path}", {}))
    catalog.create_namespace("lake")
    theirs = catalog.create_table("lake.events", schema=Schema(
        NestedField(1, "id", LongType(), required=required_id),
        NestedField(2, "ts", TimestamptzType()), NestedField(3, "grp", StringType())),
        properties={"format-version": str(version)})
    with theirs.update_spec() as spec:  # named by pyiceberg
        spec.add_field("ts", DayTransform())
        spec.add_field("id", BucketTransform(4))
        spec.add_field("grp", IdentityTransform())
    return catalog


@pytest.mark.parametrize("version", [1, 2])
def test_a_table_of_each_format_version_pyiceberg_writes_is_joined(tmp_path, version):
    """Iceberg format versions 1 and 2, as pyiceberg makes them: the stream's rows each
    once, the table's version kept."""
    cfg = joined_config(tmp_path)
    catalog = their_table(tmp_path, version=version)
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    table = catalog.load_table("lake.events")
    assert table.format_version == version
    written = Counter(r["id"] for b in range(3) for r in rows_of(b).to_pylist())
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == written


@pytest.mark.parametrize("spark_filter, passes", [
    (("GreaterThanOrEqual", "ts", EPOCH + dt.timedelta(days=20_004, hours=5)),
     lambda r: r["ts"] is not None and r["ts"] >= EPOCH + dt.timedelta(days=20_004, hours=5)),
    (("LessThan", "ts", EPOCH + dt.timedelta(days=20_002)),
     lambda r: r["ts"] is not None and r["ts"] < EPOCH + dt.timedelta(days=20_002)),
    (("EqualTo", "id", 57), lambda r: r["id"] == 57),
    (("In", "id", (3, 90)), lambda r: r["id"] in (3, 90)),
    (("IsNull", "ts", None), lambda r: r["ts"] is None),
], ids=["ts>=", "ts<", "id=", "id-in", "ts-null"])
def test_rotsink_s_reader_skips_hidden_partitions_a_filter_on_their_column_rules_out(
        tmp_path, spark_filter, passes):
    """A filter on ``ts`` skips ``ts_day`` directories, one on ``id`` the ``id_bucket``
    ones that cannot hold its value; every row that passes is still read (the expected
    rows: the input, filtered here)."""
    from pyspark.sql import datasource as spark_filters

    from datasource.reading.reader import PruningRotSinkReader, committed_schema

    cfg = config(str(tmp_path))
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    kind, column, value = spark_filter
    made = getattr(spark_filters, kind)
    pushed = made((column,)) if value is None else made((column,), value)
    options = {"path": cfg.path}
    reader = PruningRotSinkReader(options, committed_schema(options))
    every = {f.directory for f in reader.planned_files()}
    assert reader.pushFilters([pushed]) == [pushed]  # Spark still evaluates it on each row
    planned = {f.directory for f in reader.planned_files()}
    read = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    wanted = [r for b in range(4) for r in rows_of(b).to_pylist() if passes(r)]
    assert Counter(r["id"] for r in read if passes(r)) == Counter(r["id"] for r in wanted)
    assert planned < every  # something skipped
    holding = {d for d in every if any(passes(r) for r in read_directory(cfg, d))}
    assert holding <= planned


def read_directory(cfg: SinkConfig, directory: str) -> list[dict]:
    return [r for p in Path(cfg.path, directory).glob("*.parquet")
            for r in pq.read_table(p).to_pylist()]


def test_a_timestamp_identity_partition_is_the_instant_in_the_table(tmp_path):
    """partitionBy a timestamp column itself (identity): the directories name its wall-clock
    time in the session's zone (here Asia/Tokyo, as the tasks' Arrow batches carry it), the
    table's partition tuples hold the instants, and pyiceberg reads the input's back."""
    cfg = config(str(tmp_path), "ts")
    for batch_id in range(2):
        zoned = rows_of(batch_id)
        zoned = zoned.set_column(1, "ts", zoned.column(1).cast(pa.timestamp("us", "Asia/Tokyo")))
        commit_batch(cfg, batch_id, rows=zoned)
    table = IcebergFollowedTable(open_storage(cfg.path).root_uri, cfg).loaded()
    assert table is not None
    found = {r["id"]: r["ts"] for r in table.scan().to_arrow().to_pylist()}
    assert found == {r["id"]: r["ts"] for b in range(2) for r in rows_of(b).to_pylist()}
    tuples = {f["partition"]["ts"] for f in table.inspect.files().to_pylist()}
    assert dt.datetime(2024, 10, 4, 9, tzinfo=UTC) in tuples  # an instant, not a wall time


def test_pruned_reads_beside_a_committing_writer_return_their_snapshot_s_rows(tmp_path):
    """A writer commits batch after batch (each file finalized at its batch, the table
    committed with it) while reads with a filter on ``ts`` and one on ``id`` plan and read:
    each read returns exactly the input rows of the batches its snapshot holds that pass its
    filter, however the commits interleave with its planning and its reading."""
    import threading

    from pyspark.sql import datasource as spark_filters

    from datasource.reading.reader import PruningRotSinkReader, committed_schema

    cfg = config(str(tmp_path))
    commit_batch(cfg, 0)
    cutoff = EPOCH + dt.timedelta(days=20_003)
    filters = [(spark_filters.GreaterThanOrEqual(("ts",), cutoff),
                lambda r: r["ts"] is not None and r["ts"] >= cutoff),
               (spark_filters.In(("id",), (5, 130, 301)), lambda r: r["id"] in (5, 130, 301))]
    done, failures = threading.Event(), []
    reads: list[int] = []

    def write() -> None:
        try:
            for batch_id in range(1, 9):
                commit_batch(cfg, batch_id)
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    options = {"path": cfg.path}
    while not done.is_set() or len(reads) < 4:
        pushed, passes = filters[len(reads) % 2]
        reader = PruningRotSinkReader(options, committed_schema(options))
        reader.pushFilters([pushed])
        read = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
        wanted = [r["id"] for b in range(reader.batch + 1) for r in rows_of(b).to_pylist()
                  if passes(r)]
        assert sorted(r["id"] for r in read if passes(r)) == sorted(wanted), reader.batch
        reads.append(reader.batch)
    writer.join()
    assert not failures, failures
    assert len(set(reads)) > 1  # the reads saw the output move
