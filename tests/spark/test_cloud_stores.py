"""The sink on Google Cloud Storage and Azure Blob Storage, through their emulators on
127.0.0.1 (fake-gcs-server, Azurite): streams written by Spark, read back by Spark's own
readers as a user's packages give them (gcs-connector for ``gs://``, hadoop-azure for
``wasb://``), by rotsink's reader and by the change feed.

The log names each finalized file as Spark's sink on that store does (``gs://bucket/...``,
``wasb://container@account.blob.core.windows.net/...``), so Spark's file index reads exactly
the finalized rows; rotsink's reader also reads the rows of files still open. Expected rows
come from the input the test wrote.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from tests.support.cloud_readers import (
    azurite_on_emulator_port,
    point_gs_at,
    point_wasb_at_emulator,
)
from tests.support.streams import refused_at_start, run_to_completion, write_numbered_source

ROWS = 150  # three micro-batches of 50


@pytest.fixture(params=["gcs", "azure"])
def store(request, spark) -> Iterator[tuple[str, dict[str, str]]]:
    """A fresh bucket or container: its URL (as the user writes it) and the sink's options."""
    if request.param == "gcs":
        from tests.support.gcsserver import OPTIONS, create_bucket

        endpoint = request.getfixturevalue("gcs_endpoint")
        point_gs_at(spark, endpoint)
        bucket = create_bucket(endpoint, f"rotsink-{uuid.uuid4().hex[:12]}")
        yield f"gs://{bucket}/out", {f"fs.{k}": v for k, v in
                                     {"endpoint_url": endpoint, **OPTIONS}.items()}
        return
    from tests.support.azurite import ACCOUNT, create_container, options

    with azurite_on_emulator_port() as endpoint:
        point_wasb_at_emulator(spark)
        container = create_container(endpoint, f"rotsink-{uuid.uuid4().hex[:12]}")
        yield (f"wasb://{container}@{ACCOUNT}.blob.core.windows.net/out",
               {f"fs.{k}": v for k, v in options(endpoint).items()})


def rows_of(df) -> Counter:
    return Counter((r.id, r.grp) for r in df.select("id", "grp").collect())


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_spark_reads_exactly_the_finalized_rows(spark, tmp_path, store, fmt):
    url, options = store
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=ROWS // 3)
    run_to_completion(spark, tmp_path / "in", cast(Path, url), tmp_path / "ck", format=fmt,
                      partitionBy="grp", **{"rotation.maxRecords": "40", **options})
    # gcs-connector 3.1 predates Hadoop 3.5's vectored reads, which Parquet's reader makes
    # (NoSuchMethodError in VectoredReadUtils): off for this read (docs/object-storage.md)
    read = spark.read.option("parquet.hadoop.vectored.io.enabled", "false")
    by_spark = rows_of(getattr(read, "parquet" if fmt == "parquet" else "json")(url))
    finalized = rows_of(spark.read.format("rotsink").options(**options)
                        .option("includeInProgress", "false").load(url))
    everything = rows_of(spark.read.format("rotsink").options(**options).load(url))
    assert by_spark == finalized
    # a meaningful comparison: rows in files still open, which Spark must not see
    assert 0 < sum(finalized.values()) < sum(everything.values())
    assert everything == Counter((i, f"g{i % 3}") for i in range(ROWS))
    # pyspark_rotsink.read: Spark's reader of the finalized files takes the same setting
    import pyspark_rotsink

    fast = pyspark_rotsink.read(spark, url, **options,
                                **{"parquet.hadoop.vectored.io.enabled": "false"})
    assert rows_of(fast) == everything


def test_the_change_feed_follows_a_path_on_the_store(spark, tmp_path, store):
    url, options = store
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=ROWS // 3)
    run_to_completion(spark, tmp_path / "in", cast(Path, url), tmp_path / "ck",
                      **{"rotation.maxRecords": "40", **options})
    feed = spark.readStream.format("rotsink").options(**options).load(url)
    query = (feed.writeStream.format("rotsink").option("checkpointLocation",
                                                       str(tmp_path / "ck-down"))
             .trigger(availableNow=True).start(str(tmp_path / "down")))
    query.awaitTermination()
    downstream = spark.read.format("rotsink").load(str(tmp_path / "down"))
    assert rows_of(downstream) == Counter((i, f"g{i % 3}") for i in range(ROWS))


def test_a_stream_to_a_bucket_that_does_not_exist_fails_at_start_saying_so(
        spark, tmp_path, gcs_endpoint):
    from tests.support.gcsserver import OPTIONS

    write_numbered_source(tmp_path / "in", files=1, rows_per_file=10)
    options = {f"fs.{k}": v for k, v in {"endpoint_url": gcs_endpoint, **OPTIONS}.items()}
    with refused_at_start("the bucket 'no-such-bucket' does not exist"):
        run_to_completion(spark, tmp_path / "in", cast(Path, "gs://no-such-bucket/out"),
                          tmp_path / "ck", **options)


def test_an_azure_url_without_its_account_is_refused_by_start(spark, tmp_path, azure_endpoint):
    """``abfss://lake@/out`` ran 45 micro-batches against the account of the connection
    string, its log naming a root no Spark reader opens: now ``start()`` refuses it, before
    Spark starts anything (no checkpoint either)."""
    from tests.support.azurite import options

    write_numbered_source(tmp_path / "in", files=1, rows_per_file=10)
    fs = {f"fs.{k}": v for k, v in options(azure_endpoint).items()}
    with refused_at_start(r"path: 'abfss://lake@/out' names no storage account after 'lake@'"):
        run_to_completion(spark, tmp_path / "in", cast(Path, "abfss://lake@/out"),
                          tmp_path / "ck", **fs)
    assert not (tmp_path / "ck").exists()
