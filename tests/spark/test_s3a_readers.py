"""Spark's own readers on rotsink's S3 output: ``spark.read.json/parquet("s3a://...")``.

The session has ``hadoop-aws`` (PySpark's Hadoop version) and its AWS SDK bundle on the
classpath (``tests/support/jvm.py``), as a user's ``--packages`` would put them. Spark's file
index reads ``_spark_metadata`` and opens each entry's URI as written: entries must be
``s3a://`` (open-source Hadoop has no ``s3://`` filesystem), whether the output was given as
``s3://`` or ``s3a://``. Spark's readers must return exactly the rows of the finalized files,
on both local servers; rotsink's reader, ``rotsink verify`` and ``rotsink inspect`` keep
reading logs whose entries an earlier version wrote as ``s3://``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import cast

import pytest

from tests.support.s3server import SERVERS, LocalS3, new_bucket
from tests.support.streams import run_to_completion, write_numbered_source

BOTH = pytest.mark.parametrize("s3_server", SERVERS, indirect=True)


def rotsink_rows(spark, url: str, server: LocalS3, **options: str) -> Counter:
    """(id, grp) of every row rotsink's reader returns, counted."""
    df = spark.read.format("rotsink").options(**server.options, **options).load(url)
    return Counter((r.id, r.grp) for r in df.select("id", "grp").collect())


def logged_paths(url: str, server: LocalS3) -> list[str]:
    from commit_protocol.log import open_committed
    from commit_protocol.storage import open_storage

    committed = open_committed(open_storage(url, {"endpoint_url": server.endpoint}))
    assert committed is not None
    log, latest, _ = committed
    return [e["path"] for e in log.finalized_entries(latest)]


SCHEMA_JSON = ('{"type":"struct","fields":['
               '{"name":"id","type":"long","nullable":true,"metadata":{}},'
               '{"name":"grp","type":"string","nullable":true,"metadata":{}}]}')


def commit_batch(cfg, batch_id: int, rows: int = 10) -> None:
    """One micro-batch as Spark drives the protocol (plan on the driver, one task, commit),
    without a streaming query: ids ``batch_id * rows`` onwards."""
    import pyarrow as pa

    from commit_protocol.commit.committer import Committer
    from commit_protocol.records.plan import WritePlan
    from commit_protocol.storage import open_storage
    from commit_protocol.task.task_writer import TaskWriter

    storage = open_storage(cfg.path, cfg.fs_options)
    plan = WritePlan.from_state(Committer(storage, cfg, SCHEMA_JSON).latest_state(),
                                storage.root_uri)
    ids = range(batch_id * rows, (batch_id + 1) * rows)
    batch = pa.record_batch({"id": pa.array(ids, pa.int64()),
                             "grp": pa.array([f"g{i % 3}" for i in ids])})
    report = TaskWriter(storage, cfg, plan, batch_id=batch_id, partition=0, attempt=0,
                        query_id="q").write([batch])
    Committer(storage, cfg, SCHEMA_JSON).commit(batch_id, [report])


def as_written_before_s3a(fs, url: str) -> int:
    """Rewrite the log as rotsink wrote it before its entries were s3a://: every finalized
    entry (and the state entry) ``s3://``. Returns the entries rewritten."""
    root = url.split("://", 1)[1]
    rewritten = 0
    for name in fs.ls(f"{root}/_spark_metadata", refresh=True):
        old = fs.cat_file(name)
        rewritten += old.count(b'{"path":"s3a://')
        fs.pipe_file(name, old.replace(b'{"path":"s3a://', b'{"path":"s3://'))
    return rewritten


@BOTH
@pytest.mark.parametrize("scheme, fmt, partition_by, name", [
    ("s3", "jsonl", "grp", "out"),  # JSON lines in grp=... directories, given as s3://
    ("s3a", "parquet", "", "out"),  # Parquet (encoded at each roll), given as s3a://
    # a space, a literal %20, '#' and non-ASCII: the log quotes them as Spark's sink does
    ("s3", "parquet", "grp", "a b %20 #1 é"),
])
def test_spark_reads_exactly_the_finalized_rows(spark, tmp_path, s3_server, scheme, fmt,
                                                partition_by, name):
    from commit_protocol.vocabulary.uris import uri_path

    bucket = new_bucket(spark, s3_server)
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=50)  # 3 micro-batches
    written = f"{scheme}://{bucket}/{name}"
    partitions = {"partitionBy": partition_by} if partition_by else {}
    run_to_completion(spark, tmp_path / "in", cast(Path, written),  # a URL does as well
                      tmp_path / "ck", format=fmt,
                      **{"rotation.maxRecords": "40", **partitions, **s3_server.options})
    assert all(p.startswith(f"s3a://{bucket}{uri_path('/' + name)}/")
               for p in logged_paths(written, s3_server))
    read = getattr(spark.read, "parquet" if fmt == "parquet" else "json")
    by_spark = read(f"s3a://{bucket}/{name}")
    spark_rows = Counter((r.id, r.grp) for r in by_spark.select("id", "grp").collect())
    finalized = rotsink_rows(spark, written, s3_server, includeInProgress="false")
    everything = rotsink_rows(spark, written, s3_server)
    assert spark_rows == finalized
    # a meaningful comparison: rows in files still in progress, which Spark must not see
    assert 0 < sum(finalized.values()) < sum(everything.values()) == 150
    assert set(everything) == {(i, f"g{i % 3}") for i in range(150)}


def test_logs_an_earlier_version_wrote_with_s3_entries_keep_working(spark, s3_server, capsys):
    """rotsink's reader, ``verify`` and ``inspect`` read a log whose entries name the output
    ``s3://``, appends to it, and its next compaction renames the entries ``s3a://``, after
    which Spark's reader (which has no s3:// filesystem) reads it exactly too. On moto only:
    what differs here is the log's bytes, the same on any server."""
    import s3fs

    from commit_protocol.records.config import RotationPolicy, SinkConfig
    from datasource.commands.cli import main

    bucket = new_bucket(spark, s3_server)
    url = f"s3://{bucket}/out"
    cfg = SinkConfig(path=url, fs_options={"endpoint_url": s3_server.endpoint},
                     compact_interval=5, partition_by=("grp",),
                     rotation=RotationPolicy(max_batches=2, interval_ms=0, inactivity_ms=0))
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    assert as_written_before_s3a(s3fs.S3FileSystem(endpoint_url=s3_server.endpoint), url) > 0
    assert all(p.startswith("s3://") for p in logged_paths(url, s3_server))
    fs_option = ["--fs", f"endpoint_url={s3_server.endpoint}"]
    assert main(["verify", url, *fs_option]) == 0
    assert main(["inspect", url, *fs_option]) == 0
    assert "finalized 3 file(s)" in capsys.readouterr().out  # batch 1 rolled grp=g0..g2
    assert sorted(rotsink_rows(spark, url, s3_server)) == [(i, f"g{i % 3}") for i in range(30)]
    with pytest.raises(Exception, match='No FileSystem for scheme "s3"'):
        spark.read.json(f"s3a://{bucket}/out").collect()  # why the entries must be s3a://
    for batch_id in range(3, 7):  # batch 4 compacts: every entry copied, renamed s3a://
        commit_batch(cfg, batch_id)
    assert all(p.startswith(f"s3a://{bucket}/out/") for p in logged_paths(url, s3_server))
    assert main(["verify", url, *fs_option]) == 0
    finalized = rotsink_rows(spark, url, s3_server, includeInProgress="false")
    assert sorted(rotsink_rows(spark, url, s3_server)) == [(i, f"g{i % 3}") for i in range(70)]
    spark_rows = spark.read.json(f"s3a://{bucket}/out").select("id", "grp").collect()
    assert Counter((r.id, r.grp) for r in spark_rows) == finalized
    assert 0 < sum(finalized.values()) < 70


def test_compaction_renames_s3_entries_however_they_are_spelled():
    """The sink's own lines are renamed as bytes, other lines (a hand edit's spacing) after
    parsing; other schemes stay as they are."""
    from commit_protocol.log.lines import kept_lines
    from commit_protocol.vocabulary.uris import EntryPaths

    block = (b'{"path":"s3://b/out/a","size":1,"isDir":false,"modificationTime":5,'
             b'"blockReplication":1,"blockSize":33554432,"action":"add"}\n'
             b'{"path": "s3://b/out/b", "size": 2, "isDir": false, "action": "add"}\n'
             b'{"path":"s3a://b/out/c","size":3,"isDir":false,"action":"add"}\n'
             b'{"path":"file:///s3://d","size":4,"isDir":false,"action":"add"}\n')
    lines = b"".join(kept_lines("_spark_metadata/4", 1, block, None,
                                   EntryPaths("s3://b/out"))).splitlines()
    assert [json.loads(line)["path"] for line in lines] == [
        "s3a://b/out/a", "s3a://b/out/b", "s3a://b/out/c", "file:///s3://d"]
