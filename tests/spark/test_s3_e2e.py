"""The sink on the local S3-compatible servers (127.0.0.1): no append, no rename.

The same streams as on local disk, read back exactly by rotsink's reader; failures in the
task, in the driver and in the store's requests end with exact output after retry or
restart. Every test runs on moto; those whose storage operations differ most run on
SeaweedFS too, a real server whose requests run concurrently: fencing a failed task's file,
rolling a cut-short commit forward, compaction with clean-up (which on SeaweedFS sees real
upload times). The formats' streams run on SeaweedFS in ``test_s3a_readers.py``, read by
Spark's readers beside rotsink's.
"""

from __future__ import annotations

import json
import uuid

import pytest
from pyspark.errors import StreamingQueryException

from tests.spark.test_sink_e2e import to_text
from tests.support.faulty_proxy import FailingProxy
from tests.support.s3server import SERVERS
from tests.support.streams import rotsink_ids, run_to_completion, write_numbered_source

BOTH = pytest.mark.parametrize("s3_server", SERVERS, indirect=True)


@pytest.fixture
def s3(s3_server):
    """A fresh bucket and the options that point rotsink at the test's server."""
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_server.endpoint)
    bucket = f"rotsink-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    return fs, f"s3://{bucket}/out", s3_server.options


def objects(fs, url: str) -> list[str]:
    fs.invalidate_cache()
    root = url[len("s3://"):]
    return sorted(p[len(root) + 1:] for p in fs.find(root))


def logged_files(url: str, options: dict[str, str]) -> list[str]:
    """Every finalized file the log lists as of its latest batch (what Spark would read),
    relative to ``url`` (the log names them ``s3a://``: ``test_s3a_readers.py``)."""
    from commit_protocol.reading import open_committed
    from commit_protocol.storage import open_storage
    from commit_protocol.vocabulary.uris import from_uri

    committed = open_committed(open_storage(url, {"endpoint_url": options["fs.endpoint_url"]}))
    assert committed is not None
    log, latest, _ = committed
    return [from_uri(url, e["path"]) for e in log.finalized_entries(latest)]


def visible_files(fs, url: str) -> list[str]:
    """Objects any directory listing shows (not under a ``_`` or ``.`` name), relative to
    ``url``."""
    return sorted(o for o in objects(fs, url)
                  if not any(part.startswith(("_", ".")) for part in o.split("/")))


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "text",
                                 pytest.param("parquet", marks=pytest.mark.compat), "orc"])
def test_every_row_exactly_once_on_s3(spark, tmp_path, s3, fmt):
    fs, out, options = s3
    total = write_numbered_source(tmp_path / "in", files=4, rows_per_file=50)
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", format=fmt,
                      transform=to_text if fmt == "text" else None,
                      **{"rotation.maxRecords": "70", **options})
    if fmt == "text":
        rows = spark.read.format("rotsink").options(**options).load(out).collect()
        assert sorted(json.loads(r.value)["id"] for r in rows) == list(range(total))
    else:
        assert rotsink_ids(spark, out, **options) == list(range(total))
    assert visible_files(fs, out) == sorted(logged_files(out, options))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_files_span_micro_batches_on_s3(spark, tmp_path, s3, shown, fmt):
    """Row files append segments; staged Parquet rows too, encoded into one object at the
    roll."""
    fs, out, options = s3
    write_numbered_source(tmp_path / "in", files=12, rows_per_file=5)
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", format=fmt,
                      **{"rotation.maxBatches": "5", "compression": "zstd", **options})
    finalized = [o for o in objects(fs, out) if o.startswith("part-")]
    shown(f"\n12 micro-batches on S3 ({fmt}): {len(finalized)} finalized objects; "
          f"{len(objects(fs, out))} objects in all")
    assert len(finalized) == 2  # rolled after batches 4 and 9; batches 10-11 in progress
    assert rotsink_ids(spark, out, **options) == list(range(60))


def test_encrypted_compressed_output_on_s3(spark, tmp_path, s3):
    fs, out, options = s3
    (tmp_path / "key").write_text("22" * 32)
    keys = {"encryption.key": f"file:{tmp_path / 'key'}"}
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=20)
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck",
                      **{"compression": "gzip", "rotation.maxBatches": "2", **keys, **options})
    assert rotsink_ids(spark, out, **keys, **options) == list(range(60))


@BOTH
def test_task_failing_mid_write_on_s3(spark, tmp_path, s3, failpoints):
    fs, out, options = s3
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=30)
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", **options)
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=30, start_file=2)
    failpoints.arm("task.after_append=raise:once")
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", **options)
    assert rotsink_ids(spark, out, **options) == list(range(120))


@BOTH
def test_driver_killed_before_log_write_on_s3(spark, tmp_path, s3, failpoints):
    fs, out, options = s3
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=10)
    failpoints.arm("driver.before_log_write=kill:once")
    with pytest.raises(StreamingQueryException):
        run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck",
                          **{"rotation.maxBatches": "1", **options})
    failpoints.disarm()
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck",
                      **{"rotation.maxBatches": "1", **options})
    assert rotsink_ids(spark, out, **options) == list(range(30))
    assert visible_files(fs, out) == sorted(logged_files(out, options))


@BOTH
def test_compaction_and_cleanup_on_s3(spark, tmp_path, s3):
    fs, out, options = s3
    write_numbered_source(tmp_path / "in", files=12, rows_per_file=2)
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck",
                      **{"rotation.maxBatches": "2", "log.compactInterval": "5",
                         "log.cleanupDelay": "0s", **options})
    logs = [o.split("/")[1] for o in objects(fs, out) if o.startswith("_spark_metadata/")]
    assert "9.compact" in logs and "4.compact" in logs and "0" not in logs
    assert rotsink_ids(spark, out, **options) == list(range(24))


def test_store_failing_mid_commit_then_restart_is_exact(spark, tmp_path, s3, s3_server):
    """The log write fails past the client's retries: the batch is not committed, the query
    stops; after the store recovers a restart commits everything exactly once. On moto only:
    the proxy answers the failures itself, so the server behind it changes nothing, and the
    client's retries make this the slowest test here."""
    fs, out, _ = s3
    proxy = FailingProxy(s3_server.endpoint)
    options = {"fs.endpoint_url": proxy.endpoint}
    try:
        write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
        run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", **options)
        write_numbered_source(tmp_path / "in", files=2, rows_per_file=10, start_file=2)
        proxy.fail("PUT", "_spark_metadata", times=1000)
        with pytest.raises(StreamingQueryException):
            run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", **options)
        assert proxy.failed
        proxy.clear()
        proxy.fail("PUT", "_spark_metadata", times=1)  # one more blip: the client retries it
        run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", **options)
        assert rotsink_ids(spark, out, **options) == list(range(40))
    finally:
        proxy.stop()
