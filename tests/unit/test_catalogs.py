"""The catalogs teams keep Iceberg tables in, each a real server on 127.0.0.1 (AWS Glue on
moto's server, with its S3; Apache Iceberg's own REST catalog server, on a JDBC catalog;
pyiceberg's SQL catalog on a PostgreSQL server; Apache Hive's metastore, with its locks): a
new table at the output without a warehouse, a table the catalog placed joined where it is,
another writer committing through the same catalog while rotsink does (the catalog's
conditional commit under contention), a crash between the two commits, snapshot expiry;
``table.location`` refused or taken where the catalog says; Glue's errors (a table of
another kind under the name, Glue unreachable at the start and failing mid-stream), a REST
catalog refusing the credentials; and docs/tables.md's Glue snippet, run as printed."""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import open_storage
from commit_protocol.tables.iceberg.catalog import same_uri
from commit_protocol.vocabulary.errors import AfterCommitError, OptionError, TableError
from tests.unit.test_catalog_faults import no_waits  # noqa: F401  (a fixture)
from tests.unit.test_delta_commits import QUERY, ROWS, commit_batch, forget
from tests.unit.test_iceberg_commits import (
    batches_of,
    crash_before_the_table_commit,
    iceberg_config,
    start_table,
    table_of,
)

MARK = f"rotsink.batch.rotsink-{QUERY}"


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


@dataclass
class CatalogServer:
    """One catalog on a server of its own kind, and where its tables' files go: an S3
    bucket (Glue) or local files (Iceberg's REST server writes metadata with Hadoop's
    local FileIO)."""

    kind: str
    properties: dict[str, str]  # pyiceberg's, as another writer opens the catalog
    files: str                  # the test's place for outputs and tables (a URI)
    fs_options: dict[str, str]  # the sink's fs.* options that reach it
    endpoint: str = ""          # the server's address (Glue: moto's, beside its S3)
    namespace: str = field(default_factory=lambda: f"db_{uuid.uuid4().hex[:8]}")

    @property
    def out(self) -> str:
        return f"{self.files}/{self.namespace}/out"

    def place(self, name: str) -> str:
        """A location in the test's place that is not the output."""
        return f"{self.files}/{self.namespace}/{name}"

    def config(self, name: str = "events", **table_options: str) -> SinkConfig:
        """A sink's config for the table ``<namespace>.<name>`` in this catalog."""
        options = {f"catalog.{key}": value for key, value in self.properties.items()
                   if not key.startswith("s3.")}
        return iceberg_config(self.out, fs_options=self.fs_options,
                              table_options={**options, "identifier":
                                             f"{self.namespace}.{name}", **table_options})

    def other_writer(self):
        """The same catalog as another process opens it (its own client), under the name
        rotsink opens it by (a SQL catalog keeps tables under its catalog's name)."""
        from pyiceberg.catalog import load_catalog

        return load_catalog("rotsink", **self.properties)


@pytest.fixture
def glue(s3_endpoint) -> CatalogServer:
    """AWS Glue on moto's server (its Glue beside its S3), a bucket of the test's own."""
    from tests.support.s3server import create_bucket

    bucket = create_bucket(s3_endpoint, f"lake-{uuid.uuid4().hex[:10]}")
    return CatalogServer("glue", {"type": "glue", "glue.endpoint": s3_endpoint,
                                  "glue.region": "us-east-1", "s3.endpoint": s3_endpoint,
                                  "s3.region": "us-east-1"}, f"s3://{bucket}",
                         {"endpoint_url": s3_endpoint}, s3_endpoint)


@pytest.fixture(params=["glue", "iceberg-rest", "postgres", "hive"])
def server(request, tmp_path) -> CatalogServer:
    """Each catalog: Glue, Apache Iceberg's own REST catalog server, pyiceberg's SQL catalog
    on a PostgreSQL server, and Hive's metastore (no warehouse for either)."""
    if request.param == "glue":
        return request.getfixturevalue("glue")
    if request.param == "hive":
        uri = request.getfixturevalue("hive_metastore")
        return CatalogServer("hive", {"type": "hive", "uri": uri}, f"file://{tmp_path}", {},
                             uri)
    if request.param == "postgres":
        uri = request.getfixturevalue("postgres")
        return CatalogServer("postgres", {"type": "sql", "uri": uri}, f"file://{tmp_path}",
                             {}, uri)
    url = request.getfixturevalue("iceberg_rest")
    return CatalogServer("iceberg-rest", {"type": "rest", "uri": url}, f"file://{tmp_path}",
                         {}, url)


def input_ids(batches: int) -> Counter:
    """The ids of ``batches`` batches' input (commit_batch writes ROWS per batch)."""
    return Counter(range(batches * ROWS))


def scanned_ids(table) -> Counter:
    return Counter(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())


def test_a_new_table_lives_at_the_output_and_needs_no_warehouse(server):
    """No ``warehouse`` in the catalog's properties (pyiceberg's Glue catalog would refuse
    to place a table): the table is at the output's root, and another client of the catalog
    reads exactly the finalized rows (batches 0-5 roll every other batch: all rows)."""
    cfg = server.config()
    for batch_id in range(6):
        commit_batch(cfg, batch_id)
    table = server.other_writer().load_table(f"{server.namespace}.events")
    assert same_uri(table.location()) == same_uri(server.out)  # Java's server: file:/...
    assert same_uri(table.metadata_location).startswith(f"{same_uri(server.out)}/metadata/")
    assert scanned_ids(table) == input_ids(6)
    assert batches_of(table) == ["0", "1", "3", "5"]
    files = table.inspect.files().column("file_path").to_pylist()
    assert files and all(f.startswith(f"{server.out}/grp=") for f in files)
    storage = open_storage(cfg.path, cfg.fs_options)
    checked = verify_output(storage, commit_timeout_s=0, fs_options=cfg.fs_options)
    assert checked.ok, checked.problems  # metadata/ is the table's, not an unlisted file


def test_a_table_the_catalog_placed_is_joined_where_it_is(server):
    """A table another writer made in the catalog, elsewhere, partitioned as the output is,
    holding its own rows: the stream joins it; the table keeps its location, rotsink's
    files are at the output."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    elsewhere = server.place("warehouse/events")
    catalog = server.other_writer()
    catalog.create_namespace(server.namespace)
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "grp", StringType()))
    by_grp = PartitionSpec(PartitionField(source_id=2, field_id=1000, name="grp",
                                          transform=IdentityTransform()))
    theirs = catalog.create_table(f"{server.namespace}.events", schema=schema,
                                  location=elsewhere, partition_spec=by_grp)
    theirs.append(pa.table({"id": [-1, -2], "grp": ["x", "y"]}, schema=schema.as_arrow()))
    cfg = server.config()
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    table = catalog.load_table(f"{server.namespace}.events")
    assert same_uri(table.location()) == same_uri(elsewhere)
    assert scanned_ids(table) == input_ids(4) + Counter([-1, -2])
    ours = [f for f in table.inspect.files().column("file_path").to_pylist()
            if not f.startswith(elsewhere)]
    assert ours and all(f.startswith(f"{server.out}/") for f in ours)
    assert table.properties[MARK] == "3"


def test_another_writer_committing_through_the_catalog_loses_nothing(server):
    """A backfill appends through its own client of the catalog while rotsink commits
    batches: each commit is conditional in the catalog (Glue's table version), the loser of
    a race reads the table again, and every batch and every backfill append is in the table
    once."""
    cfg = server.config()
    commit_batch(cfg, 0)
    table_name = f"{server.namespace}.events"
    other = server.other_writer().load_table(table_name)
    schema = other.schema().as_arrow()
    stop, appended, errors = threading.Event(), [], []
    # Hive: a commit that has to wait for the table lock has lost its race already (the
    # holder is committing), and the backfill's own commit waits for the stream's lock: at
    # a commit every 20 ms the backfill won five races in a row in three runs of five even
    # with rotsink's short lock checks (HIVE_LOCK_CHECKS); every 0.5 s, the stream loses
    # some races and lands every batch (with pyiceberg's 2 s checks it did not, 4 of 5).
    # A lost race is tried again at once: right after the winner's commit is the widest
    # window before its next (a random wait, tried, made the REST server's case flaky)
    pause = 0.5 if server.kind == "hive" else 0.02

    def backfill() -> None:
        from pyiceberg.exceptions import CommitFailedException

        try:
            n = 0
            while not stop.is_set() or n < 3:
                rows = pa.table({"id": [-n - 1], "grp": ["x"]}).cast(schema)
                try:
                    server.other_writer().load_table(table_name).append(rows)
                except CommitFailedException:
                    continue  # lost its own retries' races too: the job tries again
                n += 1
                appended.append(-n)
                stop.wait(pause)  # a job appending in a loop, not a spin: rotsink wins some
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    thread = threading.Thread(target=backfill)
    thread.start()
    try:
        for batch_id in range(1, 8):
            commit_batch(cfg, batch_id)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    table = server.other_writer().load_table(table_name)
    assert scanned_ids(table) == input_ids(8) + Counter(appended)
    summaries = [s.summary.additional_properties for s in table.snapshots()]
    assert [s["rotsink.batch"] for s in summaries if "rotsink.batch" in s] == \
        ["0", "1", "3", "5", "7"]
    assert sum("rotsink.batch" not in s for s in summaries) == len(appended)


@pytest.mark.parametrize("recovery", ["restart", "repair"])
def test_a_crash_between_the_two_commits_is_caught_up_once(server, monkeypatch, recovery):
    cfg = server.config()
    crash_before_the_table_commit(cfg, monkeypatch)
    storage = open_storage(cfg.path, cfg.fs_options)
    if recovery == "restart":
        start_table(cfg)
    else:
        found = verify_output(storage, commit_timeout_s=0, fs_options=cfg.fs_options)
        assert any("lacks" in p for p in found.problems), found.problems
        assert verify_output(storage, commit_timeout_s=0, fs_options=cfg.fs_options,
                             repair=True).ok
    table = table_of(cfg)
    assert batches_of(table) == ["0", "1", "3"]
    assert scanned_ids(table) == input_ids(4)


def test_snapshot_expiry_through_the_catalog_keeps_the_mark(server):
    cfg = server.config(snapshotRetention="1ms")
    for batch_id in range(6):
        commit_batch(cfg, batch_id)
    table = server.other_writer().load_table(f"{server.namespace}.events")
    assert len(table.snapshots()) < 4  # expired after each commit, the newest kept
    assert table.properties[MARK] == "5"
    assert scanned_ids(table) == input_ids(6)


def test_a_table_of_another_kind_under_the_name_is_refused_before_anything_is_written(glue):
    """A Hive table registered in Glue under the stream's identifier: refused at the query's
    start naming the table and the catalog, where pyiceberg's own words were a ValueError
    about a missing property (or a create racing a table that is there, five times)."""
    import boto3

    client = boto3.client("glue", endpoint_url=glue.endpoint, region_name="us-east-1")
    client.create_database(DatabaseInput={"Name": glue.namespace})
    client.create_table(DatabaseName=glue.namespace, TableInput={
        "Name": "events", "TableType": "EXTERNAL_TABLE", "Parameters": {"classification": "csv"},
        "StorageDescriptor": {"Location": glue.place("hive/events"),
                              "Columns": [{"Name": "id", "Type": "bigint"}]}})
    cfg = glue.config()
    with pytest.raises(TableError, match=rf"{glue.namespace}.events in the Iceberg catalog "
                                         r"\(table.catalog.type=glue, .*\) is not an Iceberg "
                                         r"table .*choose another table.identifier"):
        start_table(cfg)
    assert not open_storage(cfg.path, cfg.fs_options).exists("_spark_metadata/0")


@pytest.mark.usefixtures("no_waits")
def test_a_catalog_that_cannot_be_reached_is_named(glue):
    """Glue unreachable at the start (nothing listening) fails naming the catalog's address;
    Glue failing every commit mid-stream fails the batch after its log commit, naming the
    step, and the next batch catches the table up once."""
    from tests.support.faulty_proxy import FailingProxy

    closed = glue.config(**{"catalog.glue.endpoint": "http://127.0.0.1:9",
                            "catalog.glue.max-retries": "1"})
    with pytest.raises(TableError, match=r"cannot load .* \(table.catalog.type=glue, "
                                         r"table.catalog.glue.endpoint=http://127.0.0.1:9, "
                                         r".*\): EndpointConnectionError"):
        start_table(closed)
    proxy = FailingProxy(glue.endpoint)
    try:
        cfg = glue.config(**{"catalog.glue.endpoint": proxy.endpoint,
                               "catalog.glue.max-retries": "1"})  # botocore's: 10 by default
        commit_batch(cfg, 0)
        proxy.fail("POST", "/", 99, body_contains=b'"VersionId"')  # Glue's UpdateTable
        with pytest.raises(AfterCommitError, match=r"batch 1 is committed .* its table "
                                                   r"commit \(iceberg\) failed"):
            commit_batch(cfg, 1)
        proxy.clear()
        commit_batch(cfg, 2)
    finally:
        proxy.stop()
    table = table_of(cfg)
    assert batches_of(table) == ["0", "1"]  # batch 2 rolls nothing
    assert scanned_ids(table) == input_ids(2)


def test_a_location_the_user_names_is_the_new_table_s(server):
    elsewhere = server.place("tables/events")
    cfg = server.config(location=elsewhere)
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    table = table_of(cfg)
    assert same_uri(table.location()) == same_uri(elsewhere)
    assert all(f.startswith(f"{server.out}/")
               for f in table.inspect.files().column("file_path").to_pylist())
    assert scanned_ids(table) == input_ids(2)


@pytest.mark.parametrize("options, expected", [
    ({"location": "catalog", "catalog.type": "glue"},
     r"table.location='catalog': the glue catalog has no warehouse .* "
     r"set table.catalog.warehouse"),
    ({"location": "events"}, r"table.location='events': expected output .*, catalog .* or a URI"),
])
def test_a_location_no_catalog_can_take_is_refused_before_the_query_starts(options,
                                                                           expected):
    from datasource.options.sink import parse_sink_options

    given = {f"table.{key}": value for key, value in options.items()}
    with pytest.raises(OptionError, match=expected):
        parse_sink_options({"path": "s3://b/out", "format": "parquet",
                            "table.format": "iceberg", **given})


def test_a_catalog_that_places_its_tables_itself_gets_its_way_or_names_the_option(
        tmp_path, monkeypatch, caplog, seaweedfs_catalog):
    """SeaweedFS's REST catalog (as S3 Tables) refuses any location outside its table
    bucket: with ``table.location`` unset the table is created where the catalog places it
    (a WARNING says so); a location the user named is refused naming the option."""
    from tests.support.s3server import DUMMY_CREDENTIALS, rest_catalog_options

    endpoint, catalog = seaweedfs_catalog
    monkeypatch.setenv("ICEBERG_TEST_SECRET", DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    name = f"t_{uuid.uuid4().hex[:10]}"
    options = rest_catalog_options(catalog, endpoint, name)
    named = iceberg_config(str(tmp_path / "named"), table_options={
        **options, "location": f"file://{tmp_path}/named", "identifier": f"rotsink.{name}_n"})
    with pytest.raises(TableError, match=r"option table.location='file://.*/named': the "
                                         r"catalog refused it"):
        commit_batch(named, 0)
    cfg = iceberg_config(str(tmp_path / "out"), table_options=options)
    with caplog.at_level(logging.WARNING, logger="rotsink.table"):
        for batch_id in range(2):
            commit_batch(cfg, batch_id)
    assert "refused the output's root" in caplog.text
    table = table_of(cfg)
    assert not table.location().startswith(f"file://{tmp_path}")
    assert scanned_ids(table) == input_ids(2)


class Recorded:
    """Stands in for a snippet's DataFrame: what its ``writeStream`` chain set."""

    def __init__(self) -> None:
        self.options: dict[str, str] = {}
        self.format_name = self.path = ""

    @property
    def writeStream(self) -> Recorded:  # noqa: N802 - Spark's name
        return self

    def format(self, name: str) -> Recorded:
        self.format_name = name
        return self

    def option(self, key: str, value: object) -> Recorded:
        self.options[key] = str(value)
        return self

    def start(self, path: str) -> Recorded:
        self.path = path
        return self


def docs_snippet(title: str) -> str:
    """The code block of docs/tables.md that begins with the comment ``# <title>``."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "tables.md").read_text()
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", page, re.S)
               if block.startswith(f"# {title}\n")]
    return code


SNIPPET_START = dt.datetime(2026, 3, 1, 22, tzinfo=dt.timezone.utc)  # the rows' first ts


def run_snippet(title: str, changed: dict[str, str]) -> tuple[Recorded, dict[str, str]]:
    """docs/tables.md's ``title`` snippet, its options as printed but for ``changed`` (a
    local server's address, a local output), as a query: three micro-batches of ids with an
    hourly ``ts``, then a trigger an hour later with no input, which rolls every file on
    time. What the snippet set, and the sink's options."""
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    from datasource.writing.writer import stream_writer
    from tests.support.spark_like import SparkLikeQuery

    recorded = Recorded()
    exec(docs_snippet(title), {"events": recorded})
    assert recorded.format_name == "rotsink"
    options = {key: value for key, value in recorded.options.items()
               if key != "checkpointLocation"}  # Spark's, not the sink's
    options.update({"path": recorded.path, **changed})
    schema = StructType([StructField("id", LongType()), StructField("ts", TimestampType())])

    def rows(batch_id: int) -> pa.RecordBatch | None:
        if batch_id == 3:
            return None
        ids = range(batch_id * ROWS, (batch_id + 1) * ROWS)
        return pa.record_batch({"id": pa.array(ids, pa.int64()), "ts": pa.array(
            [SNIPPET_START + dt.timedelta(hours=i) for i in ids], pa.timestamp("us", tz="UTC"))})

    query = SparkLikeQuery(stream_writer(options, schema).config, rows=rows,
                           schema_json=lambda _: schema.json())
    now_ms = int(time.time() * 1000)
    for batch_id in range(4):
        query.run(batch_id, now_ms=now_ms + batch_id * 3_600_000)
    return recorded, options


def assert_the_snippet_s_table(table, location: str) -> None:
    """At the output, partitioned by days(ts) as Iceberg computes it, every row once."""
    assert same_uri(table.location()) == same_uri(location)
    assert [str(f.transform) for f in table.spec().fields] == ["day"]
    assert scanned_ids(table) == input_ids(3)
    days = {row["partition"]["ts_day"] for row in table.inspect.files().to_pylist()}
    assert days == {(SNIPPET_START + dt.timedelta(hours=i)).date() for i in range(3 * ROWS)}


def test_the_glue_snippet_of_the_docs_runs_as_printed(s3_endpoint):
    """docs/tables.md's AWS Glue options, as printed, with only the local server's address
    added (on AWS the clients find Glue and S3 themselves): Glue's other clients find the
    table under the snippet's name."""
    from pyiceberg.catalog import load_catalog

    from tests.support.s3server import create_bucket

    printed = Recorded()
    exec(docs_snippet("AWS Glue"), {"events": printed})
    create_bucket(s3_endpoint, printed.path.split("/")[2])  # the output's bucket
    recorded, options = run_snippet("AWS Glue", {"fs.endpoint_url": s3_endpoint,
                                                 "table.catalog.glue.endpoint": s3_endpoint})
    glue = load_catalog("athena", type="glue", **{"glue.endpoint": s3_endpoint,
                                                  "glue.region": "eu-west-1",
                                                  "s3.endpoint": s3_endpoint})
    assert_the_snippet_s_table(glue.load_table(options["table.identifier"]), recorded.path)


def test_the_rest_snippet_of_the_docs_runs_as_printed(tmp_path, monkeypatch, iceberg_rest):
    """docs/tables.md's REST catalog options, as printed (the OAuth2 client credential taken
    from the environment, as the reference says), with the test server's address and a local
    output (and its token endpoint): another client of the catalog finds the table under the
    snippet's name."""
    from pyiceberg.catalog import load_catalog

    monkeypatch.setenv("ICEBERG_CREDENTIAL", "rotsink:its-secret")
    out = str(tmp_path / "events")
    _, options = run_snippet("Iceberg REST catalog", {
        "path": out, "table.catalog.uri": iceberg_rest,
        "table.catalog.oauth2-server-uri": f"{iceberg_rest}/v1/oauth/tokens"})
    theirs = load_catalog("trino", type="rest", uri=iceberg_rest)
    assert_the_snippet_s_table(theirs.load_table(options["table.identifier"]), f"file://{out}")


def test_the_postgres_snippet_of_the_docs_runs_as_printed(tmp_path, postgres):
    """docs/tables.md's PostgreSQL options, as printed, with the test server's address and
    a local output: Spark's or Trino's JDBC catalog, opened under the snippet's catalog
    name, finds the table."""
    from pyiceberg.catalog import load_catalog

    printed = dict(re.findall(r'\.option\("([^"]+)", "([^"]+)"\)',
                              docs_snippet("PostgreSQL")))["table.catalog.uri"]
    out = str(tmp_path / "events")
    _, options = run_snippet("PostgreSQL", {"path": out, "table.catalog.uri": printed.split(
        "@")[0] + "@" + postgres.split("@")[1]})  # the user as printed, the server's address
    theirs = load_catalog(options["table.catalog.name"], type="sql", uri=postgres)
    assert_the_snippet_s_table(theirs.load_table(options["table.identifier"]), f"file://{out}")


def test_the_hive_snippet_of_the_docs_runs_as_printed(tmp_path, hive_metastore):
    """docs/tables.md's Hive Metastore options, as printed, with the test metastore's address
    and a local output: another client of the metastore finds the table under the name."""
    from pyiceberg.catalog import load_catalog

    out = str(tmp_path / "events")
    _, options = run_snippet("Hive Metastore", {"path": out, "table.catalog.uri": hive_metastore})
    table = load_catalog("trino", type="hive", uri=hive_metastore).load_table(
        options["table.identifier"])
    assert_the_snippet_s_table(table, f"file://{out}")


def test_a_catalog_that_refuses_the_credentials_is_named_before_anything_is_written(
        tmp_path, monkeypatch, seaweedfs_catalog):
    """SeaweedFS's REST catalog checks each request's SigV4 signature: a wrong secret fails
    the query's start naming the catalog and its answer (the secret itself never shown)."""
    from tests.support.s3server import rest_catalog_options

    endpoint, catalog = seaweedfs_catalog
    monkeypatch.setenv("ICEBERG_TEST_SECRET", "not-the-secret")
    cfg = iceberg_config(str(tmp_path / "out"), table_options=rest_catalog_options(
        catalog, endpoint, f"t_{uuid.uuid4().hex[:10]}"))
    with pytest.raises(TableError, match=rf"Iceberg catalog .*table.catalog.type=rest, "
                                         rf"table.catalog.uri={re.escape(catalog)}.*: "
                                         r"\w+Error: .*(Forbidden|Signature|denied|403)") as e:
        start_table(cfg)
    assert "not-the-secret" not in str(e.value)
    assert not (tmp_path / "out" / "_spark_metadata").exists()
