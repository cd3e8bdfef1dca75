"""Spark's own Parquet reader on files rotsink encrypts, through the JVM key-ring KMS client.

The client jar is compiled from ``datasource/spark/jvm`` and added to the shared, already started
session with ``ADD JAR``: tasks load classes through the executor's class loader, which sees
added jars, and both the footer reads of schema inference and the scan run in tasks.

parquet-mr caches one initialized KMS client (with the key list it was given) per access
token for ten minutes, in a static map that the whole local-mode JVM shares. Each read here
therefore uses its own ``parquet.encryption.key.access.token``, so no test sees a ring
cached by another; ``test_changed_key_list_needs_a_new_access_token`` pins why.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from py4j.protocol import Py4JJavaError

from commit_protocol.crypto.parquet import decryption_properties, encryption_properties
from datasource.spark.kms_jar import KMS_CLIENT_CLASS, build_kms_jar

OLD, NEW, OTHER = bytes(range(32)), bytes(range(100, 132)), bytes(range(200, 232))
CRYPTO_FACTORY = "org.apache.parquet.crypto.keytools.PropertiesDrivenCryptoFactory"


@pytest.fixture(scope="module")
def kms_jar(spark, tmp_path_factory) -> str:
    jar = build_kms_jar(str(tmp_path_factory.mktemp("kms-jar")))
    spark.sql(f"ADD JAR '{jar}'")
    return jar


def key_list(keys: Mapping[str, bytes]) -> str:
    """parquet-mr's InMemoryKMS key-list format: ``"id1:base64key1, id2:base64key2"``."""
    return ", ".join(f"{key_id}:{base64.b64encode(key).decode('ascii')}"
                     for key_id, key in keys.items())


def kms_options(keys: Mapping[str, bytes]) -> dict[str, str]:
    return {
        "parquet.crypto.factory.class": CRYPTO_FACTORY,
        "parquet.encryption.kms.client.class": KMS_CLIENT_CLASS,
        "parquet.encryption.key.list": key_list(keys),
        "parquet.encryption.key.access.token": uuid.uuid4().hex,  # see the module docstring
    }


def table(first_id: int) -> pa.Table:
    return pa.table({
        "id": pa.array([first_id, first_id + 1, first_id + 2], pa.int64()),
        "f": pa.array([0.5, None, -1e300], pa.float64()),
        "s": pa.array(["a", None, "ü€😀"], pa.string()),
        "b": pa.array([True, False, None], pa.bool_()),
        "bin": pa.array([b"\x00\xff", b"", None], pa.binary()),
        "d": pa.array([dt.date(2024, 2, 29), None, dt.date(1970, 1, 1)], pa.date32()),
        "dec": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-99999999.99")],
                        pa.decimal128(10, 2)),
        "tags": pa.array([["x", "y"], [], None], pa.list_(pa.string())),
        "pt": pa.array([{"x": 1, "y": "p"}, None, {"x": None, "y": None}],
                       pa.struct([("x", pa.int32()), ("y", pa.string())])),
    })


def write_encrypted(path: Path, rows: pa.Table, keys: Mapping[str, bytes], key_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    props = encryption_properties(keys, key_id)
    with pq.ParquetWriter(path, rows.schema, encryption_properties=props) as writer:
        writer.write_table(rows)


def spark_rows(df) -> list[dict]:
    rows = [r.asDict(recursive=True) for r in df.orderBy("id").collect()]
    for row in rows:
        row["bin"] = None if row["bin"] is None else bytes(row["bin"])
    return rows


def test_spark_reads_files_written_under_old_and_new_key(spark, kms_jar, tmp_path):
    write_encrypted(tmp_path / "data" / "before.parquet", table(0), {"k1": OLD}, "k1")
    write_encrypted(tmp_path / "data" / "after.parquet", table(10), {"k2": NEW}, "k2")
    df = spark.read.options(**kms_options({"k1": OLD, "k2": NEW})).parquet(
        str(tmp_path / "data"))
    expected = table(0).to_pylist() + table(10).to_pylist()
    assert spark_rows(df) == expected


def test_reading_without_kms_settings_fails(spark, kms_jar, tmp_path):
    write_encrypted(tmp_path / "data" / "p.parquet", table(0), {"k1": OLD}, "k1")
    with pytest.raises(Py4JJavaError, match="encrypted footer"):
        spark.read.parquet(str(tmp_path / "data")).collect()


@pytest.mark.parametrize("reader_keys, message", [
    pytest.param({"k1": OTHER}, "the master key for id 'k1' in parquet.encryption.key.list "
                                "does not decrypt this file", id="same id, other key bytes"),
    pytest.param({"k2": NEW, "k3": OTHER}, r"master key id 'k1' is not in "
                                           r"parquet.encryption.key.list; it holds \[k2, k3\]",
                 id="key id retired from the ring"),
])
def test_wrong_or_missing_key_names_the_key_id(spark, kms_jar, tmp_path, reader_keys, message):
    write_encrypted(tmp_path / "data" / "p.parquet", table(0), {"k1": OLD}, "k1")
    with pytest.raises(Py4JJavaError, match=message) as failure:
        spark.read.options(**kms_options(reader_keys)).parquet(str(tmp_path / "data")).collect()
    for key in (OLD, NEW, OTHER):
        assert base64.b64encode(key).decode() not in str(failure.value)


def test_changed_key_list_needs_a_new_access_token(spark, kms_jar, tmp_path):
    """parquet-mr's KeyToolkit caches the KMS client per access token, key list included."""
    write_encrypted(tmp_path / "data" / "p.parquet", table(0), {"k1": OLD}, "k1")
    options = kms_options({"k1": OLD})
    assert spark.read.options(**options).parquet(str(tmp_path / "data")).count() == 3
    stale = {**options, "parquet.encryption.key.list": key_list({"k1": OTHER})}
    assert spark.read.options(**stale).parquet(str(tmp_path / "data")).count() == 3


def test_rotsink_reads_what_spark_wrote_with_the_kms(spark, kms_jar, tmp_path):
    options = {**kms_options({"k2": NEW}), "parquet.encryption.uniform.key": "k2",
               "parquet.encryption.double.wrapping": "false"}
    rows = [(1, "a", ["x"]), (2, None, None)]
    spark.createDataFrame(rows, "id long, s string, tags array<string>").coalesce(1) \
        .write.options(**options).parquet(str(tmp_path / "out"))
    (part,) = (tmp_path / "out").glob("*.parquet")
    with pytest.raises(OSError, match="no decryption found"):
        pq.read_table(part)
    read = pq.ParquetFile(part, decryption_properties=decryption_properties({"k2": NEW})).read()
    assert sorted(read.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "s": "a", "tags": ["x"]}, {"id": 2, "s": None, "tags": None}]


def test_spark_reads_what_the_sink_encrypted_with_the_kms(spark, kms_jar, tmp_path):
    """The whole path: rotsink's streaming sink writes encrypted Parquet, Spark's own reader
    returns exactly its finalized rows given the KMS client and the key ring."""
    from tests.support.streams import run_to_completion, write_numbered_source

    key = bytes(range(32, 64))
    (tmp_path / "key").write_text(base64.b64encode(key).decode())
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=20)
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", format="parquet",
                      **{"encryption.key": f"file:{tmp_path / 'key'}",
                         "encryption.keyId": "lake-2026", "rotation.maxBatches": "2"})
    df = spark.read.options(**kms_options({"lake-2026": key})).parquet(str(out))
    rows = sorted((r.id, r.name, r.grp, r.score) for r in df.collect())
    # the first two batches' rows were encoded into one file; the third's are still staged
    assert rows == [(i, f"row \"{i}\", ü\\", f"g{i % 3}", i / 4) for i in range(40)]
    staged = spark.read.format("rotsink").option("encryption.keys",
                                                  f"lake-2026=file:{tmp_path / 'key'}")
    assert sorted(r.id for r in staged.load(str(out)).collect()) == list(range(total))
    with pytest.raises(Py4JJavaError, match="encrypted footer"):
        spark.read.parquet(str(out)).collect()
