"""``table.format=iceberg`` through Spark: readers no one here wrote -- pyiceberg's scan and
polars ``scan_iceberg`` -- read the table while a query rolls and compacts beside them; every
read is one snapshot and returns exactly the rows of the files Spark's log listed as
finalized at the batch that snapshot carries (``tests.support.spark_log``). Spark's own
Iceberg reader does the same, and Iceberg's maintenance procedures run, in
``tests/spark/test_table_spark_readers.py``, on the PySpark releases it is published for."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.storage import LocalStorage
from tests.spark.test_delta_table import FILES, MIN_READS
from tests.support.spark_log import finalized_ids
from tests.support.streams import SCHEMA, refused_at_start, rotsink_ids, write_numbered_source

OPTIONS = {"format": "parquet", "table.format": "iceberg", "table.identifier": "lake.events",
           "partitionBy": "grp", "rotation.maxBatches": "3", "rotation.maxRecords": "60",
           "log.compactInterval": "4", "log.cleanupDelay": "10m"}


def start_query(spark, source: Path, out: Path, checkpoint: Path, **options: str):
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    return (df.writeStream.format("rotsink").options(**{**OPTIONS, **options})
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
            .start(str(out)))


def load(out: Path):
    from pyiceberg.catalog import load_catalog

    from commit_protocol.tables.iceberg.table import catalog_properties

    return load_catalog("rotsink", **catalog_properties(f"file://{out}", {})) \
        .load_table("lake.events")


def by_pyiceberg(out: Path) -> tuple[int, Counter]:
    table = load(out)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    ids = table.scan(snapshot_id=snapshot.snapshot_id, selected_fields=("id",)).to_arrow()
    return snapshot.snapshot_id, Counter(ids.column("id").to_pylist())


def by_polars(out: Path) -> tuple[int, Counter]:
    import polars as pl

    table = load(out)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    frame = pl.scan_iceberg(table, snapshot_id=snapshot.snapshot_id).select("id").collect()
    return snapshot.snapshot_id, Counter(frame["id"].to_list())


def test_outside_readers_read_exactly_the_finalized_rows_while_the_query_runs(
        spark, tmp_path, shown, monkeypatch):
    from tests.support.table_reads import numbered_runs, reading

    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # polars' own planner: a plugin
    out = tmp_path / "out"
    run = numbered_runs(start_query, spark, tmp_path / "in", out, tmp_path / "ck")
    run(0, 2)  # the table
    with reading(out, {"pyiceberg": by_pyiceberg, "polars": by_polars},
                 min_reads=MIN_READS) as readers:
        run(2, FILES - 2)

    table = load(out)
    batch_of = {s.snapshot_id: int(s.summary.additional_properties["rotsink.batch"])
                for s in table.snapshots()}
    expected: dict[int, Counter] = {}
    for name, reads in readers.items():
        assert reads.failed == [], (name, reads.failed[:3])
        for snapshot, ids in reads.seen:
            if snapshot not in expected:
                expected[snapshot] = finalized_ids(out, batch_of[snapshot])
            assert ids == expected[snapshot], (name, snapshot, batch_of[snapshot])
    spark_now = Counter(r.id for r in spark.read.parquet(str(out)).select("id").collect())
    assert by_pyiceberg(out)[1] == spark_now
    assert verify_output(LocalStorage(str(out)), commit_timeout_s=0, deep=True).ok
    assert sorted(rotsink_ids(spark, out)) == list(range(FILES * 40))
    counts = {name: len(reads.seen) for name, reads in readers.items()}
    shown(f"Iceberg table beside a rolling, compacting query ({FILES} batches, "
          f"{len(batch_of)} snapshots): reads {counts}, 0 failed, each equal to the finalized "
          f"rows of its snapshot's batch ({len(expected)} snapshots checked)")
    assert min(counts["pyiceberg"], counts["polars"]) >= MIN_READS
    assert len(expected) >= 3


def test_a_table_the_output_cannot_join_is_refused_before_writing(spark, tmp_path):
    """An Iceberg table is shared (a new output joins a table partitioned and typed as it
    is: tests/unit/test_shared_tables.py); one partitioned otherwise is refused before
    anything is written."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from commit_protocol.tables.iceberg.table import catalog_properties

    out = tmp_path / "out"
    catalog = load_catalog("rotsink", **catalog_properties(f"file://{out}", {}))
    catalog.create_namespace("lake")
    catalog.create_table("lake.events", schema=Schema(NestedField(1, "id", LongType())))
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=10)
    with refused_at_start(re.escape(
            "Iceberg table lake.events is partitioned by nothing, the output by grp "
            "(partitionBy)")):
        start_query(spark, tmp_path / "in", out, tmp_path / "ck")
    assert sorted(p.name for p in out.iterdir()) == ["_iceberg"]  # no log, no file


@pytest.mark.parametrize("options, expected", [
    ({"format": "orc"}, "table.format='iceberg' with option format='orc'"),
    ({"table.identifier": "events"}, "option table.identifier='events': expected namespace"),
], ids=["orc", "identifier"])
def test_what_an_iceberg_table_cannot_follow_is_refused_at_start(spark, tmp_path, options,
                                                                 expected):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=10)
    with refused_at_start(expected):
        start_query(spark, tmp_path / "in", tmp_path / "out", tmp_path / "ck", **options)
    assert not (tmp_path / "out").exists()


def test_a_stream_into_a_table_partitioned_by_days_and_buckets(spark, tmp_path, pushdown):
    """``partitionBy="days(ts), bucket(4, id)"``: the table rotsink creates has Iceberg's
    hidden partitioning, every data file's partition tuple is what the spec gives each of its
    rows (the day of ``ts`` in UTC, computed by Spark; the bucket by ``mmh3`` from the spec's
    byte form), pyiceberg reads every row once, Spark's path reader too, with the directory
    columns ``ts_day`` and ``id_bucket`` beside the stream's, and rotsink's reader returns the
    stream's columns alone, skipping the directories a filter on ``ts`` or ``id`` rules out."""
    import datetime as dt
    import json
    import shutil
    import struct

    import mmh3
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    source, out, rows_per_file = tmp_path / "in", tmp_path / "out", 50
    source.mkdir()
    start = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)
    for f in range(3):
        ids = range(f * rows_per_file, (f + 1) * rows_per_file)
        (source / f"in-{f}.json").write_text("".join(json.dumps({
            "id": i, "name": f"n{i}",
            "ts": None if i % 17 == 0 else (start + dt.timedelta(hours=5 * i)).isoformat()})
            + "\n" for i in ids))
    schema = "id LONG, ts TIMESTAMP, name STRING"
    query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
             .writeStream.format("rotsink")
             .options(**{**OPTIONS, "partitionBy": "days(ts), bucket(4, id)",
                         "rotation.maxBatches": "1"})  # every file finalized
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start(str(out)))
    query.awaitTermination()

    # the spec's day (days from 1970-01-01 in UTC) of each row, by Spark; its bucket by mmh3
    days = {r.id: r.day for r in spark.read.schema(schema).json(str(source)).select(
        "id", F.floor(F.unix_seconds("ts") / 86400).cast("int").alias("day")).collect()}
    bucket = {i: (mmh3.hash(struct.pack("<q", i)) & 0x7FFFFFFF) % 4 for i in days}
    epoch = dt.date(1970, 1, 1)
    table = load(out)
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == \
        [("ts_day", "day"), ("id_bucket", "bucket[4]")]
    finalized = table.inspect.files().to_pylist()
    for f in finalized:
        ids = pq.read_table(f["file_path"].removeprefix("file://"), columns=["id"])["id"]
        day = f["partition"]["ts_day"]
        assert {days[i] for i in ids.to_pylist()} == {None if day is None else
                                                      (day - epoch).days}
        assert {bucket[i] for i in ids.to_pylist()} == {f["partition"]["id_bucket"]}
    in_table = Counter(table.scan().to_arrow().column("id").to_pylist())
    assert in_table == Counter(list(days))  # every input row once

    by_path = spark.read.parquet(str(out))
    assert {"ts_day", "id_bucket"} <= set(by_path.columns)
    for row in by_path.collect():
        assert row.id_bucket == bucket[row.id]
        assert row.ts_day == (None if days[row.id] is None
                              else epoch + dt.timedelta(days=days[row.id]))
    assert Counter(r.id for r in by_path.collect()) == in_table
    own = spark.read.format("rotsink").load(str(out))
    assert own.columns == ["id", "ts", "name"]
    assert sorted(r.id for r in own.collect()) == sorted(days)

    # rotsink's reader skips the days a filter on ts rules out and the buckets one on id
    # does: with them gone from storage, the filtered reads still return what Spark's filter
    # of the input does (a directory read would fail on its missing files)
    cutoff = start + dt.timedelta(days=20)
    late = F.col("ts") >= F.lit(cutoff)
    for directory in out.glob("ts_day=*"):
        if not directory.name.startswith("ts_day=2") or \
                directory.name < f"ts_day={cutoff.date()}":
            shutil.rmtree(directory)  # an earlier day, or the null one
    for where, removed in ((late, "id_bucket"), (late & (F.col("id") == 140), None)):
        read = spark.read.format("rotsink").load(str(out)).where(where)
        assert sorted(r.id for r in read.collect()) == sorted(
            r.id for r in spark.read.schema(schema).json(str(source)).where(where).collect())
        for directory in out.glob(f"ts_day=*/{removed}=*"):
            if directory.name != f"id_bucket={bucket[140]}":
                shutil.rmtree(directory)


@pytest.mark.parametrize("partition_by", ["days(ts), bucket(4, id)", None],
                         ids=["same-terms", "no-partitionBy"])
def test_a_stream_joins_a_table_pyiceberg_partitioned(spark, tmp_path, partition_by):
    """A table pyiceberg made, partitioned by ``day(ts)`` and ``bucket[4](id)`` (named
    ``ts_day`` and ``id_bucket_4``): a stream with the same terms, or with no partitionBy,
    joins it; both runs (a restart) write under the table's names, and pyiceberg reads every
    input row once, each file's tuple the bucket ``mmh3`` computes for its rows."""
    import datetime as dt
    import json
    import struct

    import mmh3
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, DayTransform
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    from commit_protocol.tables.iceberg.table import catalog_properties

    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    catalog = load_catalog("rotsink", **catalog_properties(f"file://{out}", {}))
    catalog.create_namespace("lake")
    theirs = catalog.create_table("lake.events", schema=Schema(
        NestedField(1, "id", LongType()), NestedField(2, "ts", TimestamptzType()),
        NestedField(3, "name", StringType())), location=str(out))
    with theirs.update_spec() as spec:
        spec.add_field("ts", DayTransform())
        spec.add_field("id", BucketTransform(4))
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    options = {key: value for key, value in OPTIONS.items() if key != "partitionBy"}
    if partition_by is not None:
        options["partitionBy"] = partition_by
    for run in range(2):  # the second run: a restart of the query
        (source / f"in-{run}.json").write_text("".join(json.dumps(
            {"id": i, "name": f"n{i}", "ts": (start + dt.timedelta(hours=7 * i)).isoformat()})
            + "\n" for i in range(run * 30, (run + 1) * 30)))
        query = (spark.readStream.schema("id LONG, ts TIMESTAMP, name STRING")
                 .json(str(source)).writeStream.format("rotsink")
                 .options(**{**options, "rotation.maxBatches": "1"})
                 .option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start(str(out)))
        query.awaitTermination()

    table = catalog.load_table("lake.events")
    files = table.inspect.files().to_pylist()
    assert {f["file_path"].split("/")[-2].split("=")[0] for f in files} == {"id_bucket_4"}
    for f in files:
        ids = pq.read_table(f["file_path"].removeprefix("file://"), columns=["id"])["id"]
        assert {(mmh3.hash(struct.pack("<q", i)) & 0x7FFFFFFF) % 4 for i in ids.to_pylist()} \
            == {f["partition"]["id_bucket_4"]}
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(60))
