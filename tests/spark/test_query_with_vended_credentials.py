"""A Spark query into an Iceberg table of a REST catalog that vends storage credentials: the
output's own ``fs.*`` key is one the store refuses, and the query writes its tasks' files,
its log and the table with what the catalog vended (``tests/support/vending.py`` in front of
SeaweedFS's catalog; SeaweedFS checks every signature). Expected rows: the input written."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support.s3server import DUMMY_CREDENTIALS, create_bucket, rest_catalog_options
from tests.support.streams import SCHEMA, write_numbered_source
from tests.support.vending import Vending, start_vending_catalog


def query_options(catalog: str, endpoint: str, secret_file: Path, table: str) -> dict[str, str]:
    """The table in ``catalog``, signed with the catalog's own credential (its secret by
    reference to ``secret_file``: Spark's Python workers do not see the test's environment),
    no static S3 key for pyiceberg; the output's own key wrong."""
    catalog_options = rest_catalog_options(catalog, endpoint, table)
    table_options = {f"table.{k}": v.replace("env:ICEBERG_TEST_SECRET", f"file:{secret_file}")
                     for k, v in catalog_options.items()
                     if k not in ("catalog.s3.access-key-id", "catalog.s3.secret-access-key")}
    return {"format": "parquet", "table.format": "iceberg", "rotation.maxBatches": "1",
            "fs.endpoint_url": endpoint, "fs.key": "nobody", "fs.secret": "not-the-secret",
            **table_options}


def test_a_query_writes_with_the_credentials_its_catalog_vends(spark, tmp_path,
                                                              seaweedfs_catalog):
    from pyiceberg.catalog import load_catalog

    endpoint, catalog = seaweedfs_catalog
    secret_file = tmp_path / "catalog-secret"
    secret_file.write_text(DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    bucket = create_bucket(endpoint, f"vended-{uuid.uuid4().hex[:8]}")
    table = f"t_{uuid.uuid4().hex[:10]}"
    written = write_numbered_source(tmp_path / "in", files=3, rows_per_file=20)

    def start(catalog_url: str):
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
            str(tmp_path / "in"))
        return (df.writeStream.format("rotsink")
                .options(**query_options(catalog_url, endpoint, secret_file, table))
                .option("checkpointLocation", str(tmp_path / "ck"))
                .trigger(availableNow=True).start(f"s3://{bucket}/out"))

    with pytest.raises(Exception, match="(?i)access|signature|denied|forbidden"):
        start(catalog)  # the catalog itself vends nothing: the output's key is refused
    vending = Vending(key=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                      secret=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    url, stop = start_vending_catalog(catalog, vending)
    try:
        start(url).awaitTermination()
    finally:
        stop()
    assert vending.vended >= 1 and all(vending.asked)
    reader = load_catalog("reader", **{k[len("catalog."):]: v for k, v in
                                       rest_catalog_options(catalog, endpoint, table).items()
                                       if k.startswith("catalog.")} | {
        "client.secret-access-key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "s3.secret-access-key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]})
    rows = reader.load_table(f"rotsink.{table}").scan().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == list(range(written))
