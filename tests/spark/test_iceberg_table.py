"""``table.format=iceberg`` through Spark: readers no one here wrote -- pyiceberg's scan, polars
``scan_iceberg`` and Spark's own Iceberg reader -- read the table while a query rolls and
compacts beside them; every read is one snapshot and returns exactly the rows
``spark.read.parquet(path)`` returned for the batch that snapshot carries."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest

from commit_protocol.storage import LocalStorage
from commit_protocol.verification import verify_output
from tests.spark.test_delta_table import FILES, MIN_READS, finalized_as_of
from tests.support.streams import SCHEMA, rotsink_ids, write_numbered_source

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

    from commit_protocol.tables.iceberg import catalog_properties

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


@pytest.fixture(scope="module")
def iceberg_spark_python(tmp_path_factory):
    from tests.support.table_spark import reader_python

    return reader_python("iceberg", tmp_path_factory.mktemp("pyspark-4.1"))


def test_outside_readers_read_exactly_the_finalized_rows_while_the_query_runs(
        spark, tmp_path, iceberg_spark_python, shown, monkeypatch):
    from tests.support.table_reads import Reads, numbered_runs, reading
    from tests.support.table_spark import (
        SPARK_READS_BESIDE,
        run_beside_reader,
        start_reader,
        wait_for_first_read,
    )

    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # polars' own planner: a plugin
    out = tmp_path / "out"
    run = numbered_runs(start_query, spark, tmp_path / "in", out, tmp_path / "ck")
    run(0, 2)  # the table
    stop, spark_reads = tmp_path / "stop", tmp_path / "iceberg-spark.jsonl"
    orphans = tmp_path / "orphans.txt"
    spark_reader = start_reader("iceberg", iceberg_spark_python, "lake.events", spark_reads,
                                stop, min_reads=3, catalog_db=str(out / "_iceberg/catalog.db"),
                                orphans_file=str(orphans))
    wait_for_first_read(spark_reader, spark_reads)  # then the query runs beside its reads
    with reading(out, {"pyiceberg": by_pyiceberg, "polars": by_polars},
                 min_reads=MIN_READS) as readers:
        _, written, read_beside = run_beside_reader(run, spark_reads, first_file=2,
                                                    files=FILES - 2)
    batches = 2 + written
    # Iceberg's orphan removal then runs on the output as if everything were 10 days old,
    # with one stray file it must take: none of rotsink's own (in progress, staged, intents,
    # claims, log) may go, nor any finalized file
    (out / "grp=g0" / "stray.parquet").write_bytes(b"not rotsink's")
    ten_days_ago = time.time() - 10 * 86400
    for path in out.rglob("*"):
        os.utime(path, (ten_days_ago, ten_days_ago))
    stop.touch()
    assert spark_reader.wait(600) == 0, spark_reader.stderr.read()[-3000:] \
        if spark_reader.stderr else ""
    readers["Spark's Iceberg reader"] = by_spark = Reads.of_lines(spark_reads)

    table = load(out)
    batch_of = {s.snapshot_id: int(s.summary.additional_properties["rotsink.batch"])
                for s in table.snapshots()}
    expected: dict[int, Counter] = {}
    for name, reads in readers.items():
        assert reads.failed == [], (name, reads.failed[:3])
        for snapshot, ids in reads.seen:
            if snapshot not in expected:
                expected[snapshot] = finalized_as_of(spark, out, batch_of[snapshot])
            assert ids == expected[snapshot], (name, snapshot, batch_of[snapshot])
    spark_now = Counter(r.id for r in spark.read.parquet(str(out)).select("id").collect())
    assert by_pyiceberg(out)[1] == spark_now
    assert orphans.read_text().split() == [f"file:{out}/grp=g0/stray.parquet"]
    assert verify_output(LocalStorage(str(out)), commit_timeout_s=0, deep=True).ok
    assert sorted(rotsink_ids(spark, out)) == list(range(batches * 40))
    counts = {name: len(reads.seen) for name, reads in readers.items()}
    shown(f"Iceberg table beside a rolling, compacting query ({batches} batches, "
          f"{len(batch_of)} snapshots): reads {counts}, 0 failed, each equal to the finalized "
          f"rows of its snapshot's batch ({len(expected)} snapshots checked; Spark's Iceberg "
          f"reader read {read_beside} times while the query ran)")
    assert min(counts["pyiceberg"], counts["polars"]) >= MIN_READS
    assert read_beside >= SPARK_READS_BESIDE, \
        "Spark's Iceberg reader must read while the query commits"
    assert len({snapshot for snapshot, _ in by_spark.seen}) >= 3, "it must see the table move"
    assert len(expected) >= 3


def test_another_writer_s_table_is_refused_before_writing(spark, tmp_path):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from commit_protocol.tables.iceberg import catalog_properties

    out = tmp_path / "out"
    catalog = load_catalog("rotsink", **catalog_properties(f"file://{out}", {}))
    catalog.create_namespace("lake")
    catalog.create_table("lake.events", schema=Schema(NestedField(1, "id", LongType())))
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=10)
    with pytest.raises(Exception, match="Iceberg table lake.events exists, written by another"):
        start_query(spark, tmp_path / "in", out, tmp_path / "ck").awaitTermination()
    assert sorted(p.name for p in out.iterdir()) == ["_iceberg"]  # no log, no file


@pytest.mark.parametrize("options, expected", [
    ({"format": "orc"}, "table.format='iceberg' with option format='orc'"),
    ({"table.identifier": "events"}, "option table.identifier='events': expected namespace"),
], ids=["orc", "identifier"])
def test_what_an_iceberg_table_cannot_follow_is_refused_at_start(spark, tmp_path, options,
                                                                 expected):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=10)
    with pytest.raises(Exception, match=expected):
        start_query(spark, tmp_path / "in", tmp_path / "out", tmp_path / "ck",
                    **options).awaitTermination()
    assert not (tmp_path / "out").exists()
