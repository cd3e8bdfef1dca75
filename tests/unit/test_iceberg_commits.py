"""``table.format=iceberg`` without Spark: one snapshot per batch that finalizes files, each
file listed once, through crashes between the two commit points, replays, a zombie racing a
live commit (pyiceberg's own retry ruled out), added columns, a table added to an older
output; on the embedded SQLite catalog and on SeaweedFS's REST catalog with S3."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import threading
from collections import Counter

import pyarrow as pa
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.commit.committer import Committer
from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import open_storage
from commit_protocol.tables import table_format_named
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import OptionError, TableError
from tests.unit.test_delta_commits import (
    GROWN_JSON,
    QUERY,
    ROWS,
    SCHEMA_JSON,
    catch_up,
    commit_batch,
    finalized,
    forget,
    table_config,
)


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


ICEBERG = table_format_named("iceberg")


def iceberg_config(path: str, **kw) -> SinkConfig:
    return dataclasses.replace(table_config(path, **kw), table_format=ICEBERG.name)


def table_of(cfg: SinkConfig):
    from commit_protocol.tables.iceberg.table import IcebergFollowedTable

    root_uri = open_storage(cfg.path, cfg.fs_options).root_uri
    table = IcebergFollowedTable(root_uri, cfg).loaded()
    assert table is not None
    return table


def batches_of(table) -> list[str]:
    """The rotsink batch of every snapshot, oldest first."""
    return [s.summary.additional_properties["rotsink.batch"] for s in table.snapshots()]


def assert_table_follows_the_log(cfg: SinkConfig) -> None:
    """The table lists exactly the finalized files, each once, and its scan returns exactly
    their rows."""
    from tests.support.tables import finalized_ids

    storage = open_storage(cfg.path, cfg.fs_options)
    assert ICEBERG.open(storage, cfg).files() == finalized(cfg)
    paths = table_of(cfg).inspect.files().column("file_path").to_pylist()
    assert len(paths) == len(set(paths))
    ids = Counter(table_of(cfg).scan().to_arrow().column("id").to_pylist())
    assert ids == finalized_ids(storage, pa.schema([("id", pa.int64()), ("grp", pa.string())]))


@pytest.fixture(params=["sqlite-local", "sqlite-s3", "rest-s3", "rest-local", "sqlite-azure",
                        "sqlite-gcs"])
def cfg(request, tmp_path) -> SinkConfig:
    """Both catalogs, each with the output on a local disk and on S3 (SeaweedFS's, whose REST
    catalog keeps its tables in a table bucket beside the output's bucket)."""
    if request.param == "sqlite-local":
        return iceberg_config(str(tmp_path / "out"))
    if request.param == "sqlite-azure":  # a SQLite catalog file here, the table on Azurite
        from tests.support import azurite

        endpoint, container = (request.getfixturevalue(f)
                               for f in ("azure_endpoint", "azure_container"))
        root = f"abfss://{container}@{azurite.ACCOUNT}.dfs.core.windows.net/{tmp_path.name}"
        return iceberg_config(f"{root}/out", fs_options=azurite.options(endpoint),
                              table_options={"catalog.type": "sql",
                                             "catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
                                             "catalog.warehouse": f"{root}/warehouse"})
    if request.param == "sqlite-gcs":  # a SQLite catalog file here, the table on fake-gcs-server
        from tests.support.gcsserver import OPTIONS

        endpoint, bucket = (request.getfixturevalue(f) for f in ("gcs_endpoint", "gcs_bucket"))
        root = f"gs://{bucket}/{tmp_path.name}"
        return iceberg_config(f"{root}/out", fs_options={"endpoint_url": endpoint, **OPTIONS},
                              table_options={"catalog.type": "sql",
                                             "catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
                                             "catalog.warehouse": f"{root}/warehouse"})
    from tests.support.s3server import DUMMY_CREDENTIALS, create_bucket, rest_catalog_options

    endpoint, catalog = request.getfixturevalue("seaweedfs_catalog")
    bucket = create_bucket(endpoint, f"iceberg-{tmp_path.name[-20:].lower().replace('_', '-')}")
    if request.param == "sqlite-s3":  # a SQLite catalog file on this machine, the table on S3
        options = {"catalog.type": "sql",
                   "catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
                   "catalog.warehouse": f"s3://{bucket}/warehouse"}
        return iceberg_config(f"s3://{bucket}/out", fs_options={"endpoint_url": endpoint},
                              table_options=options)
    request.getfixturevalue("monkeypatch").setenv("ICEBERG_TEST_SECRET",
                                                  DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    options = rest_catalog_options(catalog, endpoint, f"t_{bucket.replace('-', '_')}")
    if request.param == "rest-local":
        return iceberg_config(str(tmp_path / "out"), table_options=options)
    return iceberg_config(f"s3://{bucket}/out", fs_options={"endpoint_url": endpoint},
                          table_options=options)


def test_the_table_lists_exactly_the_finalized_files(cfg):
    for batch_id in range(6):
        commit_batch(cfg, batch_id)
    assert_table_follows_the_log(cfg)
    table = table_of(cfg)
    # batch 0 creates the table (an empty snapshot); files roll every other batch
    assert batches_of(table) == ["0", "1", "3", "5"]
    assert table.properties[f"rotsink.batch.rotsink-{QUERY}"] == "5"
    assert "commit.retry.num-retries" not in table.properties  # other writers keep retrying
    rows = table.scan().to_arrow()
    nulls = rows.filter(pa.compute.is_null(pa.compute.field("grp")))
    assert nulls.num_rows == 6 * ROWS // 3  # from the default partition's typed value
    partitions = {r["partition"]["grp"] for r in table.inspect.files().to_pylist()}
    assert partitions == {"a", "b", None}
    # verify finds the table (its catalog options are in the log, secrets as references)
    storage = open_storage(cfg.path, cfg.fs_options)
    checked = verify_output(storage, commit_timeout_s=0, fs_options=cfg.fs_options)
    assert checked.ok, checked.problems


def crash_before_the_table_commit(cfg: SinkConfig, monkeypatch) -> None:
    """Batches 0-2 committed; batch 3's driver dies between its log file and its table
    commit (batch 3 finalizes files); the next driver remembers nothing."""
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    monkeypatch.setenv(failpoints.ENV_VAR, "table.before_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        commit_batch(cfg, 3)
    monkeypatch.delenv(failpoints.ENV_VAR)
    forget()


def start_table(cfg: SinkConfig) -> None:
    """What a query's start does to the table (the check, the catch-up)."""
    committer = Committer(open_storage(cfg.path, cfg.fs_options), cfg, SCHEMA_JSON)
    committer.start_table(committer.latest_state())


@pytest.mark.parametrize("recovery", ["next-commit", "restart", "repair"])
def test_a_crash_between_the_two_commits_is_caught_up_once(tmp_path, monkeypatch, recovery):
    cfg = iceberg_config(str(tmp_path / "out"))
    crash_before_the_table_commit(cfg, monkeypatch)
    storage = open_storage(cfg.path)
    if recovery == "next-commit":
        commit_batch(cfg, 4)
    elif recovery == "restart":
        start_table(cfg)
    else:
        found = verify_output(storage, commit_timeout_s=0)
        assert any("iceberg table (holding batches up to 1) lacks" in p for p in found.problems)
        assert verify_output(storage, commit_timeout_s=0, repair=True).ok
    # one snapshot per batch that rolled files, batch 3's once; batch 4 rolls none
    assert batches_of(table_of(cfg)) == ["0", "1", "3"]
    assert_table_follows_the_log(cfg)


def test_a_zombie_commit_of_a_batch_the_table_holds_changes_nothing(tmp_path):
    """A driver read the table, then stalled; its successor committed the same batch. The
    stale driver's commit fails on the table's requirement (pyiceberg's own retry, which
    would re-base it and commit the batch twice, is off) and, read again, is skipped."""
    from commit_protocol.tables import TableCommit
    from commit_protocol.tables.follow import TableFollower

    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    storage = open_storage(cfg.path)
    zombie = ICEBERG.open(storage, cfg)
    assert zombie.committed_batch(f"rotsink-{QUERY}") == 1  # it read the table here
    commit_batch(cfg, 2)
    commit_batch(cfg, 3)  # the successor's: batch 3 finalizes files
    follower = TableFollower(storage, cfg, Committer(storage, cfg, SCHEMA_JSON).log)
    files = tuple(follower._files(tuple(finalized(cfg).items())[:1], 0))
    assert zombie.commit(TableCommit(3, f"rotsink-{QUERY}", SCHEMA_JSON, ("grp",), files)) \
        is None
    assert batches_of(table_of(cfg)) == ["0", "1", "3"]
    assert_table_follows_the_log(cfg)


def test_racing_catch_ups_add_one_snapshot_per_batch(tmp_path):
    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    for batch_id in range(2, 8):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(failpoints.ENV_VAR, "table.before_commit=raise")
            with pytest.raises(failpoints.FailpointError):
                commit_batch(cfg, batch_id)
        errors: list[BaseException] = []
        threads = [threading.Thread(target=catch_up, args=(cfg, errors)) for _ in range(2)]
        forget()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
    assert batches_of(table_of(cfg)) == ["0", "1", "3", "5", "7"]
    assert_table_follows_the_log(cfg)


def test_added_columns_reach_the_table_in_the_batch_s_snapshot(tmp_path):
    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    grown = dataclasses.replace(cfg, schema_evolution="addColumns")
    for batch_id in range(2, 4):
        commit_batch(grown, batch_id, schema_json=GROWN_JSON, tagged=True)
    table = table_of(cfg)
    assert [f.name for f in table.schema().fields] == ["id", "grp", "tag"]
    assert batches_of(table) == ["0", "1", "2", "3"]  # batch 2: its columns, in its snapshot
    assert '"tag"' in table.properties["schema.name-mapping.default"]
    rows = table.scan().to_arrow().to_pylist()
    assert {r["id"]: r["tag"] for r in rows if r["id"] >= 2 * ROWS} == \
        {i: f"t{i}" for i in range(2 * ROWS, 4 * ROWS)}
    assert all(r["tag"] is None for r in rows if r["id"] < 2 * ROWS)


def test_a_table_added_to_an_older_output_is_reconciled(tmp_path):
    plain = dataclasses.replace(table_config(str(tmp_path / "out")), table_format=None,
                                cleanup_delay_ms=0)
    for batch_id in range(8):
        commit_batch(plain, batch_id)
    cfg = iceberg_config(str(tmp_path / "out"))
    committer = Committer(open_storage(cfg.path), cfg, SCHEMA_JSON)
    committer.start_table(committer.latest_state())
    assert batches_of(table_of(cfg)) == ["7"]
    assert_table_follows_the_log(cfg)


def test_zoned_timestamps_are_written_in_utc_for_the_table_s_readers(tmp_path):
    """Spark hands a Python sink timestamps in the session's zone; pyiceberg refuses a file
    whose stored schema holds a zone other than UTC: the files say the same instants in UTC."""
    import pyarrow.parquet as pq

    from commit_protocol.formats.parquet import ParquetWriter

    paris = pa.table({"t": pa.array([dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc)],
                                    pa.timestamp("us", "UTC")).cast(
        pa.timestamp("us", "Europe/Paris"))})
    with open(tmp_path / "f.parquet", "wb") as handle:
        writer = ParquetWriter(handle, paris, iceberg_config(str(tmp_path)), encrypt=False)
        writer.write(paris, rows_per_group=10)
        writer.close()
    read = pq.read_table(tmp_path / "f.parquet")
    assert read.schema.field("t").type == pa.timestamp("us", "UTC")
    assert read.column("t").to_pylist() == paris.column("t").cast(
        pa.timestamp("us", "UTC")).to_pylist()


REFUSED = [  # (how the table differs, what the error says, why)
    ("replaced", "holds no batch of this output's query", "not the table it committed to"),
    ("partitions", "is partitioned by", "other partition columns"),
    ("types", "column 'id' is string in the table, long in the output", "another type"),
]


@pytest.mark.parametrize("make, expected, why", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_table_the_output_cannot_follow_is_refused_before_writing(tmp_path, make, expected,
                                                                    why):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    from commit_protocol.tables.iceberg.table import catalog_properties

    out = tmp_path / "out"
    cfg = iceberg_config(str(out))
    catalog = load_catalog("rotsink", **catalog_properties(f"file://{out}", {}))
    catalog.create_namespace_if_not_exists("rotsink")
    id_type = StringType() if make == "types" else LongType()
    schema = Schema(NestedField(1, "id", id_type), NestedField(2, "grp", StringType()))
    properties = {} if make == "replaced" else {"rotsink.owner": f"rotsink-{QUERY}"}
    spec = PartitionSpec() if make == "partitions" else PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="grp"))
    catalog.create_table("rotsink.out", schema=schema, properties=properties,
                         partition_spec=spec)
    for batch_id in range(2):  # past batch 0, whose table commit a crash may have kept out
        commit_batch(dataclasses.replace(cfg, table_format=None), batch_id)
    committer = Committer(open_storage(cfg.path), cfg, SCHEMA_JSON)
    with pytest.raises(TableError, match=re.escape(expected)):
        committer.start_table(committer.latest_state())


def test_catalog_secrets_are_given_by_reference(tmp_path, monkeypatch):
    from commit_protocol.tables.iceberg.table import catalog_properties

    monkeypatch.setenv("CATALOG_TOKEN", "s3cr3t")
    (tmp_path / "secret").write_text("from-a-file\n")
    found = catalog_properties("file:///out", {"catalog.type": "rest", "catalog.uri": "u",
                                               "catalog.token": "env:CATALOG_TOKEN",
                                               "catalog.credential": f"file:{tmp_path}/secret"})
    assert (found["token"], found["credential"]) == ("s3cr3t", "from-a-file")
    with pytest.raises(OptionError, match="option table.catalog.token: expected a reference"):
        catalog_properties("file:///out", {"catalog.type": "rest", "catalog.token": "s3cr3t"})
    with pytest.raises(OptionError, match="embedded catalog .* is for a local output; name "
                                          "the catalog .* a SQL catalog's database URL"):
        catalog_properties("s3://bucket/out", {})


def test_a_catalog_that_cannot_be_opened_is_a_table_error_naming_it(tmp_path):
    """A SQL catalog whose folder does not exist failed with sqlalchemy's raw
    ``OperationalError``; the error names the catalog, its URI (a password masked) and the
    cause, and nothing is written to the output before it."""
    from commit_protocol.tables.iceberg.catalog import OPEN_CATALOGS

    missing = tmp_path / "no-such-folder" / "catalog.db"
    cfg = iceberg_config(str(tmp_path / "out"), table_options={
        "catalog.type": "sql", "catalog.uri": f"sqlite:///{missing}"})
    committer = Committer(open_storage(cfg.path), cfg, SCHEMA_JSON)
    with pytest.raises(TableError, match=re.escape(
            f"cannot open the Iceberg catalog 'rotsink' (table.catalog.type=sql, "
            f"table.catalog.uri=sqlite:///{missing}): OperationalError")):
        committer.start_table(committer.latest_state())
    assert not (tmp_path / "out" / "_spark_metadata").exists()
    with pytest.raises(TableError, match=r"postgresql://u:\*\*\*@127.0.0.1:1/lake\)"):
        OPEN_CATALOGS.get("lake", {"type": "sql", "uri": "postgresql://u:pw@127.0.0.1:1/lake"})


def test_snapshot_expiry_keeps_the_high_water_mark(tmp_path):
    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    expiring = table_of(cfg)
    expiring.maintenance.expire_snapshots().older_than(dt.datetime.now(dt.timezone.utc)) \
        .commit()
    assert batches_of(table_of(cfg)) == ["3"]
    assert table_of(cfg).properties[f"rotsink.batch.rotsink-{QUERY}"] == "3"
    forget()  # a new driver: the mark comes from the table's properties
    for batch_id in range(4, 6):
        commit_batch(cfg, batch_id)
    assert batches_of(table_of(cfg)) == ["3", "5"]
    assert_table_follows_the_log(cfg)


def test_pyiceberg_s_own_retry_would_commit_a_batch_twice_so_rotsink_s_commits_have_none(
        tmp_path):
    """Why rotsink's commits are not retried: with pyiceberg's default, a stale writer's
    append that loses the race is re-based and committed again (the same batch twice). The
    table itself keeps pyiceberg's default (no property: other writers retry), and the
    ``commit.retry.num-retries=0`` an earlier rotsink set on its tables is removed by the next
    commit."""
    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    table = table_of(cfg)
    assert "commit.retry.num-retries" not in table.properties
    assert {table.properties[f"write.{c}.mode"] for c in ("delete", "update", "merge")} == \
        {"copy-on-write"}
    stale, live = table_of(cfg), table_of(cfg)
    for writer in (live, stale):  # both append "batch 2" (here: no file) from the same state
        with writer.transaction() as tx:
            with tx.update_snapshot(snapshot_properties={"rotsink.batch": "2"}).fast_append():
                pass
    assert batches_of(table_of(cfg)) == ["0", "1", "2", "2"]  # the stale one was re-based
    with table_of(cfg).transaction() as tx:  # what rotsink before this version set
        tx.set_properties({"commit.retry.num-retries": "0"})
    commit_batch(cfg, 2)
    commit_batch(cfg, 3)
    table = table_of(cfg)
    assert "commit.retry.num-retries" not in table.properties
    assert batches_of(table)[-1] == "3"


def test_another_writer_racing_rotsink_commits_on_its_own_retry(tmp_path):
    """Another writer (a backfill through pyiceberg) read the table before rotsink's commit:
    its append loses the race, and pyiceberg's retry (the table's default) lands it on top;
    rotsink's next commit lands too, once, with nothing of the other writer's lost."""
    import pyarrow as pa

    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    other = table_of(cfg)  # read now, appends after rotsink's next commit
    commit_batch(cfg, 2)
    commit_batch(cfg, 3)
    rows = pa.table({"id": pa.array([10_000], pa.int64()), "grp": pa.array(["g0"])})
    other.append(rows.cast(other.schema().as_arrow()), snapshot_properties={"by": "backfill"})
    commit_batch(cfg, 4)
    commit_batch(cfg, 5)
    table = table_of(cfg)
    summaries = [s.summary.additional_properties for s in table.snapshots()]
    assert [s.get("rotsink.batch") for s in summaries if "rotsink.batch" in s] == \
        ["0", "1", "3", "5"]
    assert sum(s.get("by") == "backfill" for s in summaries) == 1
    ids = table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    assert ids.count(10_000) == 1


def test_pyiceberg_filters_on_a_partition_column_only_when_it_is_selected(tmp_path,
                                                                          monkeypatch):
    """Pins a pyiceberg 0.12 bug that docs/tables.md works around (iceberg-python#2028):
    rotsink's files, as Spark's, hold no partition column, and a pyiceberg scan that filters
    on one without selecting it returns no row; selecting it (or polars, Spark) reads right."""
    import polars as pl

    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # no planner plugin installed
    cfg = iceberg_config(str(tmp_path / "out"))
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    table = table_of(cfg)
    expected = sum(1 for i in range(4 * ROWS) if i % 3 == 0)  # grp "a"
    selected = table.scan(row_filter="grp == 'a'", selected_fields=("id", "grp")).to_arrow()
    assert selected.num_rows == expected
    assert table.scan(row_filter="grp == 'a'", selected_fields=("id",)).to_arrow().num_rows == 0
    by_polars = pl.scan_iceberg(table).filter(pl.col("grp") == "a").select("id").collect()
    assert by_polars.height == expected


def test_the_catalog_s_name_is_the_one_a_shared_catalog_shows_the_table_under(tmp_path):
    """A SQL catalog keeps a table under the name of the catalog that made it: with
    ``table.catalog.name``, a catalog Spark or Trino opens under its own name (here ``lake``)
    shows rotsink's table; under another name the same database shows nothing."""
    from pyiceberg.catalog import load_catalog

    db = tmp_path / "catalog.db"
    shared = {"type": "sql", "uri": f"sqlite:///{db}", "warehouse": f"file://{tmp_path}"}
    cfg = iceberg_config(str(tmp_path / "out"), table_options={
        "catalog.name": "lake", "identifier": "events.clicks",
        **{f"catalog.{key}": value for key, value in shared.items()}})
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    assert load_catalog("lake", **shared).list_tables("events") == [("events", "clicks")]
    assert load_catalog("rotsink", **shared).list_namespaces() == []
    assert_table_follows_the_log(cfg)
