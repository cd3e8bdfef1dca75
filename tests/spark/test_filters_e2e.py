"""Compression and encryption through real streams: every format x codec x encryption,
read back by rotsink's reader (everything committed) and Spark's (finalized, unencrypted)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

from tests.spark.test_sink_e2e import spark_ids, to_text
from tests.support.streams import refused_at_start, run_to_completion, write_numbered_source

ROW_CASES = [(fmt, codec) for fmt in ("jsonl", "csv", "text")
             for codec in ("none", "gzip", "bz2", "zstd")]
PARQUET_CODECS = ["snappy", "zstd", "gzip", "lz4_raw", "none"]
# Spark's workers inherit the environment of the JVM, fixed when the shared session started,
# so these tests use file: references (env: ones are covered by the unit tests).


@pytest.fixture
def key_ref(tmp_path) -> str:
    path = tmp_path / "key"
    path.write_text(base64.b64encode(os.urandom(32)).decode())
    return f"file:{path}"


def ids_of(df, fmt: str) -> list[int]:
    if fmt == "text":
        return sorted(json.loads(r.value)["id"] for r in df.collect())
    return sorted(int(r.id) for r in df.select("id").collect())


def rotsink_read(spark, out: Path, fmt: str, **options: str) -> list[int]:
    reader = spark.read.format("rotsink")
    for key, value in options.items():
        reader = reader.option(key, value)
    return ids_of(reader.load(str(out)), fmt)


def stream(spark, tmp_path: Path, fmt: str, **options: str) -> tuple[Path, int]:
    """Four micro-batches; every second one rolls, so files are both finalized and open."""
    total = write_numbered_source(tmp_path / "in", files=4, rows_per_file=40)
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", format=fmt,
                      transform=to_text if fmt == "text" else None,
                      **{"rotation.maxBatches": "3", **options})
    return out, total


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("fmt, codec", ROW_CASES, ids=[f"{f}-{c}" for f, c in ROW_CASES])
def test_row_formats_round_trip(spark, tmp_path, key_ref, fmt, codec, encrypted):
    keys = {"encryption.key": key_ref} if encrypted else {}
    out, total = stream(spark, tmp_path, fmt, compression=codec, **keys)
    names = [p.name for p in out.glob("part-*")]
    suffix = {"none": "", "gzip": ".gz", "bz2": ".bz2", "zstd": ".zst"}[codec]
    assert names and all(n.endswith(suffix + (".enc" if encrypted else "")) for n in names)
    assert rotsink_read(spark, out, fmt, **keys) == list(range(total))
    finalized = rotsink_read(spark, out, fmt, includeInProgress="false", **keys)
    assert 0 < len(finalized) < total
    if not encrypted:  # Spark decompresses by suffix and honours the log
        assert spark_ids(spark, fmt, out) == finalized


@pytest.mark.parametrize("codec", PARQUET_CODECS)
def test_parquet_codecs_round_trip(spark, tmp_path, codec):
    out, total = stream(spark, tmp_path, "parquet", compression=codec)
    assert rotsink_read(spark, out, "parquet") == list(range(total))
    # Parquet spans micro-batches like the row formats: Spark sees the finished files only
    finalized = rotsink_read(spark, out, "parquet", includeInProgress="false")
    assert 0 < len(finalized) < total
    assert spark_ids(spark, "parquet", out) == finalized


def test_encrypted_output_needs_its_key_to_be_read(spark, tmp_path, key_ref):
    out, _ = stream(spark, tmp_path, "jsonl", compression="gzip",
                    **{"encryption.key": key_ref})
    with pytest.raises(Exception, match="is encrypted: set the option encryption.key"):
        spark.read.format("rotsink").load(str(out)).collect()
    other = tmp_path / "other-key"
    other.write_text(os.urandom(32).hex())
    with pytest.raises(Exception, match="no configured key has that id"):
        spark.read.format("rotsink").option("encryption.key", f"file:{other}") \
            .load(str(out)).collect()


def test_key_rotation_keeps_old_files_readable(spark, tmp_path, key_ref):
    """Restart with a new key: old files continue and stay readable with the old key in
    encryption.keys; new files use the new key."""
    total = write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
    out, ck = tmp_path / "out", tmp_path / "ck"
    run_to_completion(spark, tmp_path / "in", out, ck, **{"encryption.key": key_ref,
                                                           "rotation.maxBatches": "1"})
    new = tmp_path / "new-key"
    new.write_text(os.urandom(32).hex())
    total += write_numbered_source(tmp_path / "in", files=2, rows_per_file=10, start_file=2)
    rotated = {"encryption.key": f"file:{new}", "encryption.keys": key_ref}
    run_to_completion(spark, tmp_path / "in", out, ck, **rotated, **{"rotation.maxBatches": "1"})
    assert rotsink_read(spark, out, "jsonl", **rotated) == list(range(total))
    with pytest.raises(Exception, match="no configured key has that id"):
        rotsink_read(spark, out, "jsonl", **{"encryption.key": f"file:{new}"})


def test_changing_the_codec_of_a_path_is_refused(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    out, ck = tmp_path / "out", tmp_path / "ck"
    run_to_completion(spark, tmp_path / "in", out, ck, compression="gzip")
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5, start_file=1)
    with refused_at_start("option compression='zstd': .* was written with 'gzip'"):
        run_to_completion(spark, tmp_path / "in", out, ck, compression="zstd")


def test_no_key_bytes_in_log_checkpoint_errors_or_plans(spark, tmp_path, key_ref):
    out, _ = stream(spark, tmp_path, "csv", compression="zstd", **{"encryption.key": key_ref})
    key = base64.b64decode(Path(key_ref[len("file:"):]).read_text())
    forms = [key, key.hex().encode(), base64.b64encode(key)]
    for path in [*out.rglob("*"), *(tmp_path / "ck").rglob("*")]:
        if path.is_file():
            assert not any(f in path.read_bytes() for f in forms), path
    df = spark.read.format("rotsink").option("encryption.key", key_ref).load(str(out))
    plan = df._jdf.queryExecution().toString()
    wrong = tmp_path / "wrong"
    wrong.write_text(os.urandom(32).hex())
    with pytest.raises(Exception) as caught:
        spark.read.format("rotsink").option("encryption.key", f"file:{wrong}").load(str(out)) \
            .collect()
    for text in (plan, str(caught.value)):
        assert not any(f.decode("latin-1") in text for f in forms)


def test_encrypted_parquet_round_trip(spark, tmp_path, key_ref):
    keys = {"encryption.key": key_ref}
    out, total = stream(spark, tmp_path, "parquet", compression="zstd", **keys)
    assert rotsink_read(spark, out, "parquet", **keys) == list(range(total))
    # Spark's reader needs the KMS settings: test_parquet_encryption_spark reads it with them
    with pytest.raises(Py4JJavaError, match="encrypted footer"):
        spark.read.parquet(str(out)).collect()
