"""A Delta table found by name in AWS Glue (moto's Glue and S3 on 127.0.0.1) and in a Hive
Metastore (Apache Hive's standalone metastore): the query's start registers
``table.identifier`` at the output as Spark and Athena register a Delta table, joins a name
registered for the output, and refuses a name registered for another place or another kind
of table before anything is written."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from commit_protocol.storage import open_storage
from commit_protocol.tables.delta.names import same_location
from commit_protocol.vocabulary.errors import OptionError, TableError
from tests.unit.test_delta_commits import ROWS, commit_batch, forget, table_config
from tests.unit.test_iceberg_commits import start_table


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


@pytest.fixture
def named(s3_endpoint):
    """A Delta output on moto's S3 named ``db_<x>.events`` in moto's Glue; Glue's client."""
    import boto3

    from tests.support.s3server import create_bucket

    bucket = create_bucket(s3_endpoint, f"delta-{uuid.uuid4().hex[:10]}")
    database = f"db_{uuid.uuid4().hex[:8]}"
    cfg = table_config(f"s3://{bucket}/events", fs_options={"endpoint_url": s3_endpoint},
                       table_options={"catalog.type": "glue", "identifier": f"{database}.events",
                                      "catalog.glue.endpoint": s3_endpoint,
                                      "catalog.glue.region": "us-east-1"})
    glue = boto3.client("glue", endpoint_url=s3_endpoint, region_name="us-east-1")
    return cfg, glue, database


def test_the_start_registers_the_table_where_spark_and_athena_find_it(named):
    from deltalake import DeltaTable

    cfg, glue, database = named
    start_table(cfg)
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    found = glue.get_table(DatabaseName=database, Name="events")["Table"]
    assert found["StorageDescriptor"]["Location"] == cfg.path
    assert found["Parameters"]["table_type"] == "DELTA"  # Athena's and Trino's marker
    assert found["Parameters"]["spark.sql.sources.provider"] == "delta"  # Spark's
    assert found["TableType"] == "EXTERNAL_TABLE"
    # a reader that has only the name finds the table, and every finalized row in it
    storage_options = {"AWS_ENDPOINT_URL": cfg.fs_options["endpoint_url"],
                       "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}
    table = DeltaTable(found["StorageDescriptor"]["Location"], storage_options=storage_options)
    assert Counter(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == \
        Counter(range(4 * ROWS))
    forget()
    start_table(cfg)  # a restart joins its own name: nothing registered again
    assert len(glue.get_table_versions(DatabaseName=database, TableName="events")
               ["TableVersions"]) == 1


@pytest.mark.parametrize("registered, expected", [
    ("elsewhere", r"names the table at s3://.*/other, not this output \(s3://.*/events\): "
                  r"write to that path, or choose another table.identifier"),
    ("csv", r"names a table that is not Delta .*choose another table.identifier"),
])
def test_a_name_registered_for_another_table_is_refused_before_anything_is_written(
        named, registered, expected):
    cfg, glue, database = named
    glue.create_database(DatabaseInput={"Name": database})
    parameters = {"table_type": "DELTA"} if registered == "elsewhere" else \
        {"classification": "csv"}
    other = cfg.path.rsplit("/", 1)[0] + "/other"
    glue.create_table(DatabaseName=database, TableInput={
        "Name": "events", "TableType": "EXTERNAL_TABLE", "Parameters": parameters,
        "StorageDescriptor": {"Location": other, "Columns": []}})
    with pytest.raises(TableError, match=expected):
        start_table(cfg)
    assert not open_storage(cfg.path, cfg.fs_options).exists("_spark_metadata/0")


def test_a_name_registered_for_the_output_by_spark_is_joined(named):
    """As Spark's ``CREATE TABLE events USING delta LOCATION 's3a://...'`` left it (s3a://,
    Spark's marker only)."""
    cfg, glue, database = named
    glue.create_database(DatabaseInput={"Name": database})
    glue.create_table(DatabaseName=database, TableInput={
        "Name": "events", "TableType": "EXTERNAL_TABLE",
        "Parameters": {"spark.sql.sources.provider": "DELTA"},
        "StorageDescriptor": {"Location": cfg.path.replace("s3://", "s3a://") + "/"}})
    start_table(cfg)
    commit_batch(cfg, 0)


@pytest.mark.parametrize("options, expected", [
    ({"catalog.type": "rest", "identifier": "db.events"},
     r"table.catalog.type='rest' with table.format=delta: a Delta table's name is kept in "
     r"glue or hive"),
    ({"catalog.type": "glue"}, r"table.identifier=None: expected database.table"),
    ({"catalog.type": "glue", "identifier": "a.b.c"}, r"table.identifier='a.b.c'"),
    ({"catalog.type": "hive", "identifier": "a.b", "catalog.uri": "http://h:9083"},
     r"table.catalog.uri='http://h:9083': expected the Hive Metastore's thrift://host:port"),
])
def test_a_name_rotsink_cannot_keep_is_refused_at_start(options, expected):
    from datasource.options.sink import parse_sink_options

    with pytest.raises(OptionError, match=expected):
        parse_sink_options({"path": "s3://b/out", "format": "parquet", "table.format": "delta",
                            **{f"table.{k}": v for k, v in options.items()}})


def test_without_a_catalog_the_table_is_found_by_its_path(tmp_path):
    cfg = table_config(str(tmp_path / "out"))  # no table.catalog.*: no catalog is asked
    start_table(cfg)
    commit_batch(cfg, 0)



# -- a Hive Metastore ------------------------------------------------------------------------
@pytest.fixture
def in_hive(tmp_path, hive_metastore):
    """A local Delta output named ``db_<x>.events`` in the metastore, and a Thrift client
    of it as another engine has (pyiceberg's Hive client)."""
    from pyiceberg.catalog.hive import _HiveClient

    database = f"db_{uuid.uuid4().hex[:8]}"
    cfg = table_config(str(tmp_path / "events"), table_options={
        "catalog.type": "hive", "catalog.uri": hive_metastore,
        "identifier": f"{database}.events"})
    return cfg, _HiveClient(hive_metastore), database


def test_the_start_registers_the_table_where_spark_and_trino_find_it(in_hive):
    from deltalake import DeltaTable

    cfg, metastore, database = in_hive
    start_table(cfg)
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    with metastore as client:
        found = client.get_table(dbname=database, tbl_name="events")
    assert same_location(found.sd.location, cfg.path)
    assert found.parameters["spark.sql.sources.provider"] == "delta"  # Spark's marker
    assert found.parameters["table_type"] == "DELTA"  # Trino's and Athena's
    assert found.tableType == "EXTERNAL_TABLE" and found.sd.serdeInfo.parameters["path"]
    table = DeltaTable(found.sd.location)  # a reader that has only the name
    assert Counter(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == \
        Counter(range(4 * ROWS))
    forget()
    start_table(cfg)  # a restart joins its own name


@pytest.mark.parametrize("registered", ["elsewhere", "csv"])
def test_a_name_in_hive_registered_for_another_table_is_refused(in_hive, registered):
    from hive_metastore.ttypes import Database, SerDeInfo, StorageDescriptor, Table

    cfg, metastore, database = in_hive
    parameters = {"spark.sql.sources.provider": "delta"} if registered == "elsewhere" else \
        {"serialization.format": ","}
    with metastore as client:
        client.create_database(Database(name=database))
        client.create_table(Table(tableName="events", dbName=database, tableType=
                                  "EXTERNAL_TABLE", parameters=parameters, partitionKeys=[],
                                  sd=StorageDescriptor(cols=[], location=f"{cfg.path}-other",
                                                       serdeInfo=SerDeInfo(parameters={}))))
    expected = "not this output" if registered == "elsewhere" else "a table that is not Delta"
    with pytest.raises(TableError, match=f"Delta table name .* in the Hive Metastore .*"
                                         f"{expected}"):
        start_table(cfg)
    assert not open_storage(cfg.path).exists("_spark_metadata/0")


def test_a_metastore_that_cannot_be_reached_is_named(tmp_path):
    cfg = table_config(str(tmp_path / "events"), table_options={
        "catalog.type": "hive", "catalog.uri": "thrift://127.0.0.1:9", "identifier": "d.e"})
    with pytest.raises(TableError, match=r"cannot look up the Delta table name d.e in the "
                                         r"Hive Metastore: TTransportException"):
        start_table(cfg)


def test_a_name_the_metastore_refuses_is_named_with_its_answer(tmp_path, hive_metastore):
    """The metastore's own refusal (a database name it does not take), not a Thrift
    binding's error about its exception object."""
    cfg = table_config(str(tmp_path / "events"), table_options={
        "catalog.type": "hive", "catalog.uri": hive_metastore, "identifier": "no-good!.e"})
    with pytest.raises(TableError, match=r"cannot register the Delta table name no-good!.e "
                                         r"in the Hive Metastore at .*: InvalidObjectException"):
        start_table(cfg)
