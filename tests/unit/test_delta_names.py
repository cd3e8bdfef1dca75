"""A Delta table found by name in AWS Glue (moto's Glue and S3 on 127.0.0.1): the query's
start registers ``table.identifier`` at the output as Spark and Athena register a Delta
table, joins a name registered for the output, and refuses a name registered for another
place or another kind of table before anything is written."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from commit_protocol.storage import open_storage
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
    ({"catalog.type": "hive", "identifier": "db.events"},
     r"table.catalog.type='hive' with table.format=delta: a Delta table's name is kept in "
     r"glue"),
    ({"catalog.type": "glue"}, r"table.identifier=None: expected database.table"),
    ({"catalog.type": "glue", "identifier": "a.b.c"}, r"table.identifier='a.b.c'"),
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

