"""``table.format=delta`` through Spark: readers no one here wrote -- delta-rs and polars --
read the table while a query rolls and compacts beside them; every read is one committed
table version and returns exactly the rows of the files Spark's log listed as finalized at
the batch that version carries (``tests.support.spark_log``: the tests' own reading of
``_spark_metadata``). Spark's own Delta reader does the same in
``tests/spark/test_table_spark_readers.py``, on the PySpark releases it is published for."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support.spark_log import finalized_ids
from tests.support.streams import SCHEMA, refused_at_start, write_numbered_source
from tests.support.table_spark import delta_batch

FILES = 30  # micro-batches of the query the readers run beside
MIN_READS = 50  # per outside reader living in this process
OPTIONS = {"format": "parquet", "table.format": "delta", "partitionBy": "grp",
           "rotation.maxBatches": "3", "rotation.maxRecords": "60", "log.compactInterval": "4",
           "log.cleanupDelay": "10m"}  # every batch's log file kept: each read is re-checked


def start_query(spark, source: Path, out: Path, checkpoint: Path, **options: str):
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    return (df.writeStream.format("rotsink").options(**{**OPTIONS, **options})
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
            .start(str(out)))


def by_delta_rs(out: Path) -> tuple[int, Counter]:
    from deltalake import DeltaTable

    table = DeltaTable(str(out))  # one version, as loaded
    ids = table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    return table.version(), Counter(ids)


def by_polars(out: Path) -> tuple[int, Counter]:
    import polars as pl
    from deltalake import DeltaTable

    version = DeltaTable(str(out)).version()
    frame = pl.read_delta(str(out), version=version, columns=["id"])
    return version, Counter(frame["id"].to_list())


def test_outside_readers_read_exactly_the_finalized_rows_while_the_query_runs(
        spark, tmp_path, shown):
    from deltalake import DeltaTable

    from tests.support.table_reads import numbered_runs, reading

    out = tmp_path / "out"
    run = numbered_runs(start_query, spark, tmp_path / "in", out, tmp_path / "ck")
    run(0, 2)  # the table
    with reading(out, {"delta-rs": by_delta_rs, "polars": by_polars},
                 min_reads=MIN_READS) as readers:
        query = run(2, FILES - 2)

    batch_of: dict[int, int] = {}  # table version -> the rotsink batch it carries
    expected: dict[int, Counter] = {}
    for name, reads in readers.items():
        assert reads.failed == [], (name, reads.failed[:3])
        for version, ids in reads.seen:
            if version not in batch_of:
                carried = delta_batch(out, version)
                assert carried is not None, f"table version {version} carries no batch"
                batch_of[version] = carried
                expected[version] = finalized_ids(out, carried)
            assert ids == expected[version], (name, version, batch_of[version])
    assert all(DeltaTable(str(out), version=v).transaction_version(f"rotsink-{query.id}") == b
               for v, b in batch_of.items())
    # the last version is what Spark's Parquet reader returns now
    final = DeltaTable(str(out))
    spark_now = Counter(r.id for r in spark.read.parquet(str(out)).select("id").collect())
    assert Counter(final.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == spark_now
    counts = {name: len(reads.seen) for name, reads in readers.items()}
    shown(f"Delta table beside a rolling, compacting query ({FILES} batches, "
          f"{final.version() + 1} table versions): reads {counts}, 0 failed, each equal to "
          f"the finalized rows of its version's batch ({len(expected)} versions checked)")
    assert min(counts["delta-rs"], counts["polars"]) >= MIN_READS
    assert len(expected) >= 3  # the reads saw the table move


def test_another_writer_s_table_with_a_feature_rotsink_cannot_honour_is_refused_at_start(
        spark, tmp_path):
    """A CHECK constraint (rotsink does not evaluate Delta's SQL): refused when the query
    starts, naming it, before anything is written; joining without one:
    tests/unit/test_delta_joined_tables.py and tests/spark/test_table_spark_writers.py."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    out = tmp_path / "out"
    write_deltalake(str(out), pa.table({"id": [1], "name": ["x"], "grp": ["g0"],
                                        "score": [0.5]}), partition_by=["grp"])
    DeltaTable(str(out)).alter.add_constraint({"scored": "score >= 0"})
    before = sorted(p for p in out.rglob("*"))
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=10)
    with refused_at_start(r"the CHECK constraint scored \(score >= 0\)"):
        start_query(spark, tmp_path / "in", out, tmp_path / "ck")
    assert sorted(p for p in out.rglob("*")) == before  # nothing written, not even the log


@pytest.mark.parametrize("options, expected", [
    ({"format": "jsonl"}, "table.format='delta' with option format='jsonl'"),
], ids=["row-format"])
def test_what_a_table_cannot_follow_is_refused_at_start(spark, tmp_path, options, expected):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=10)
    df = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in")) \
        .selectExpr("*", "current_timestamp() AS ts")
    writer = (df.writeStream.format("rotsink").options(**{**OPTIONS, **options})
              .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True))
    with refused_at_start(expected):
        writer.start(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_timestamp_partition_column_is_recorded_as_the_instant_it_is(spark, tmp_path):
    """partitionBy a timestamp in a session of another zone than UTC: the directories name
    its wall-clock time (Spark's cast, read back by Spark's path reader), the table the
    instant, so delta-rs reads the instants Spark read from the input (polars 1.x reads a
    timestamp partition from the directory's name, in UTC: docs/tables.md says so)."""
    from deltalake import DeltaTable

    write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    timed = "timestamp_seconds(1796068800 + id * 10000) AS ts"
    try:
        (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
         .json(str(tmp_path / "in")).selectExpr("id", timed)
         .writeStream.format("rotsink").options(**{**OPTIONS, "partitionBy": "ts",
                                                   "rotation.maxBatches": "1"})
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
         .start(str(tmp_path / "out")).awaitTermination())
        expected = {r.id: r.ts for r in spark.read.schema(SCHEMA).json(
            str(tmp_path / "in")).selectExpr("id", timed).collect()}
        by_path = {r.id: r.ts for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    instants = {i: ts.timestamp() for i, ts in expected.items()}  # naive: the session's wall
    assert {i: ts.timestamp() for i, ts in by_path.items()} == instants
    table = DeltaTable(str(tmp_path / "out")).to_pyarrow_table().to_pylist()
    assert {r["id"]: r["ts"].timestamp() for r in table} == instants
