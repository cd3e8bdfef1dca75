"""Reading a lake through Spark: filters pushed or not (the session decides), the fast path
``pyspark_rotsink.read`` in every format, reads pinned to a batch, and a large file read by
several tasks."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

import pyspark_rotsink
from commit_protocol.reading import open_committed
from commit_protocol.storage import LocalStorage
from tests.support.streams import rotsink_ids, run_to_completion, write_numbered_source

ROWS = 150  # in 5 input files, one per micro-batch
# Some files roll, some stay in progress in every directory.
ROLLING = {"rotation.maxRecords": "20", "partitionBy": "grp"}


def lines(df):
    """Text's one string column, partitioned like the others."""
    return df.select(F.to_json(F.struct("id", "name", "score")).alias("line"), "grp")


def binary_names(df):
    """CSV without a string column (Spark's CSV reader reads "" as null): names as binary,
    which rotsink writes as base64 and the fast path decodes."""
    return df.select("id", F.col("name").cast("binary").alias("raw"), "score", "grp")


def partition_last(df):
    """The partition column where Spark's readers put it: last."""
    return df.select("id", "name", "score", "grp")


# name -> (format, transform of the input, more sink options)
FORMATS = {"parquet": ("parquet", None, {}), "orc": ("orc", None, {}),
           "jsonl": ("jsonl", None, {}), "text": ("text", lines, {}),
           "csv": ("csv", binary_names, {}),
           "parquet-grp-last": ("parquet", partition_last, {}),
           # Spark's reader decompresses by the file suffix (.jsonl.gz)
           "jsonl-gzip": ("jsonl", None, {"compression": "gzip"})}


@pytest.fixture(scope="module")
def outputs(spark, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("lake")
    write_numbered_source(base / "in", files=5, rows_per_file=ROWS // 5)
    written = {}
    for name, (fmt, transform, options) in FORMATS.items():
        out = base / name
        run_to_completion(spark, base / "in", out, base / f"ck-{name}", transform=transform,
                          format=fmt, **ROLLING, **options)
        written[name] = out
    return written


def in_progress_rows(out: Path) -> int:
    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None
    return sum(f.records for f in committed[2].in_progress)


def test_filters_are_taken_only_when_the_session_lets_python_readers_take_them(spark, outputs):
    out = str(outputs["jsonl"])
    key = "spark.sql.python.filterPushdown.enabled"
    assert spark.conf.get(key) == "false"  # Spark's default
    # a task per file (numPartitions above the file count): the partitions count the files
    everything = spark.read.format("rotsink").option("numPartitions", "1000").load(out)
    off = everything.where("grp = 'g1'")
    # a reader class with pushFilters would fail every read here: rotsink's does not have it
    assert sorted(r.id for r in off.collect()) == [i for i in range(ROWS) if i % 3 == 1]
    assert off.rdd.getNumPartitions() == everything.rdd.getNumPartitions()
    spark.conf.set(key, "true")
    try:
        on = (spark.read.format("rotsink").option("numPartitions", "1000").load(out)
              .where("grp = 'g1'"))
        assert sorted(r.id for r in on.collect()) == [i for i in range(ROWS) if i % 3 == 1]
        assert on.rdd.getNumPartitions() < everything.rdd.getNumPartitions()
    finally:
        spark.conf.set(key, "false")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_the_fast_path_returns_every_committed_row_once(spark, outputs, fmt):
    """Finalized files through Spark's reader, in-progress prefixes through rotsink's: the
    same rows as rotsink's reader, Spark's finalized rows plus the committed in-progress
    ones."""
    out = str(outputs[fmt])
    fast = pyspark_rotsink.read(spark, out)
    ours = spark.read.format("rotsink").load(out)
    assert fast.schema == ours.schema
    assert sorted(map(str, fast.collect())) == sorted(map(str, ours.collect()))
    finalized = spark.read.format("rotsink").option("includeInProgress", "false").load(out)
    pending = in_progress_rows(outputs[fmt])
    assert 0 < pending < ROWS
    assert fast.count() == finalized.count() + pending == ROWS
    # filters and column pruning go to Spark's own reader
    assert fast.where("grp = 'g2'").select("grp").count() == ROWS // 3


def test_the_fast_path_reads_finalized_files_with_spark_s_own_scan(spark, outputs):
    plan = pyspark_rotsink.read(spark, str(outputs["parquet"]))._jdf.queryExecution() \
        .executedPlan().toString()
    assert "FileScan parquet" in plan and "BatchScan" in plan  # Spark's scan, rotsink's


def test_the_fast_path_falls_back_where_spark_s_reader_is_not_exact(spark, tmp_path):
    """CSV with string columns: Spark's CSV reader would read "" as null."""
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
    run_to_completion(spark, tmp_path / "in", tmp_path / "out", tmp_path / "ck", format="csv",
                      **{"rotation.maxRecords": "8"})
    fast = pyspark_rotsink.read(spark, str(tmp_path / "out"))
    assert "FileScan" not in fast._jdf.queryExecution().executedPlan().toString()
    assert sorted(r.id for r in fast.collect()) == list(range(20))


def test_reads_pinned_to_a_batch(spark, outputs, tmp_path):
    out = outputs["jsonl"]
    committed = open_committed(LocalStorage(str(out)))
    assert committed is not None
    latest = committed[1]
    first = rotsink_ids(spark, out, asOfBatch="0")
    assert len(first) == ROWS // 5  # batch 0 read one input file
    second = rotsink_ids(spark, out, asOfBatch="1")
    assert len(second) == 2 * ROWS // 5 and set(first) < set(second)
    assert rotsink_ids(spark, out, asOfBatch=str(latest)) == list(range(ROWS))
    fast = pyspark_rotsink.read(spark, str(out), asOfBatch="1")
    assert sorted(r.id for r in fast.collect()) == second
    only_open = rotsink_ids(spark, out, includeFinalized="false")
    assert len(only_open) == in_progress_rows(out)
    with pytest.raises(AnalysisException, match=rf"option asOfBatch='{latest + 1}': the sink "
                                                rf"has committed up to batch {latest}"):
        rotsink_ids(spark, out, asOfBatch=str(latest + 1))


def test_a_large_file_is_read_by_several_tasks(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=20_000)
    for fmt, options in (("jsonl", {}), ("parquet", {"parquet.rowGroupBytes": "64kb",
                                                      "rotation.maxRecords": "20000"})):
        out = tmp_path / fmt
        run_to_completion(spark, tmp_path / "in", out, tmp_path / f"ck-{fmt}", format=fmt,
                          **options)
        df = spark.read.format("rotsink").option("maxPartitionBytes", "100kb").load(str(out))
        assert df.rdd.getNumPartitions() >= 2, fmt
        ids = [r.id for r in df.select("id").collect()]
        assert sorted(ids) == list(range(20_000)), fmt
        per_task = df.select(F.spark_partition_id().alias("task")).groupBy("task").count()
        assert per_task.count() >= 2, f"{fmt}: one task read the whole file"


def test_bad_reader_options_name_the_option(spark, outputs):
    out = str(outputs["jsonl"])
    with pytest.raises(AnalysisException, match=r"schema\(struct<id:bigint>\): .* holds "
                                                r"struct<id:bigint,name:string,grp:string,"
                                                r"score:double>; leave the schema out"):
        spark.read.format("rotsink").schema("id long").load(out).collect()
    with pytest.raises(AnalysisException, match=r"option maxPartitionBytes='lots': expected "
                                                r"a byte count"):
        spark.read.format("rotsink").option("maxPartitionBytes", "lots").load(out).collect()
    with pytest.raises(AnalysisException, match=r"option includeFinalized='no': expected "
                                                r"true or false"):
        spark.read.format("rotsink").option("includeFinalized", "no").load(out).collect()
    with pytest.raises(Exception, match=r"option startingBatch='0' is not taken by "
                                        r"pyspark_rotsink.read"):
        pyspark_rotsink.read(spark, out, startingBatch=0)



def test_spark_fails_a_reader_with_push_filters_while_the_conf_is_off(spark):
    """The Spark fact ``datasource.reading.pushdown`` is built around (PySpark 4.3): with
    ``spark.sql.python.filterPushdown.enabled`` at its default, a reader class that
    overrides ``pushFilters`` fails every read. Pinned here, so a PySpark that changes it
    shows."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Reader(DataSourceReader):
        def pushFilters(self, filters):
            return filters

        def read(self, partition):
            return iter([(1,)])

    class Pushing(DataSource):
        @classmethod
        def name(cls):
            return "pushing_probe"

        def schema(self):
            return "id int"

        def reader(self, schema):
            return Reader()

    spark.dataSource.register(Pushing)
    with pytest.raises(Exception, match="DATA_SOURCE_PUSHDOWN_DISABLED"):
        spark.read.format("pushing_probe").load().collect()
