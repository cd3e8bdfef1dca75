"""Spark's own writer API, called as Spark's guide and production pipelines call it:
``.queryName(...)``, ``.partitionBy(...)`` on the ``DataStreamWriter`` (and as ``start``'s
keywords), and a batch ``df.write``. Expected rows come from the input the test wrote and
Spark's own reader; the layout from the directories on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from commit_protocol.vocabulary.errors import UnsupportedQueryError
from datasource.commands import cli
from tests.support.streams import (
    SCHEMA,
    group_of,
    refused_at_start,
    rotsink_ids,
    write_numbered_source,
)

ROWS = 30


def source(spark, directory: Path):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(directory))


def input_rows() -> list[tuple[int, str]]:
    return [(i, group_of(i)) for i in range(ROWS)]


@pytest.mark.compat
@pytest.mark.parametrize("style", ["calls", "start keywords"])
def test_a_named_partitioned_query_written_as_sparks_guide_writes_it(spark, tmp_path, capsys,
                                                                    style):
    write_numbered_source(tmp_path / "in", files=3, rows_per_file=ROWS // 3)
    out, ck = tmp_path / "out", tmp_path / "ck"
    writer = (source(spark, tmp_path / "in").writeStream.option("rotation.maxBatches", "1")
              .option("checkpointLocation", str(ck)).trigger(availableNow=True))
    if style == "calls":
        query = writer.format("rotsink").queryName("events").partitionBy("grp").start(str(out))
    else:
        query = writer.start(str(out), format="rotsink", queryName="events", partitionBy="grp")
    assert query.name == "events"
    query.awaitTermination()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("_")) == \
        ["grp=g0", "grp=g1", "grp=g2"]
    assert not list(out.glob("part-*"))  # nothing at the root: partitioned, not ignored
    spark_reader = spark.read.schema(SCHEMA).json(str(out)).select("id", "grp").collect()
    assert sorted((r.id, r.grp) for r in spark_reader) == input_rows()
    assert cli.main(["inspect", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("query: events (id ") and "partitioned by grp" in printed[3]


@pytest.mark.compat
def test_a_second_query_on_the_path_is_refused_naming_the_first_by_its_name(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    out = str(tmp_path / "out")
    for name, ck in (("events", "ck"), ("backfill", "ck2")):
        writer = (source(spark, tmp_path / "in").writeStream.format("rotsink").queryName(name)
                  .option("checkpointLocation", str(tmp_path / ck))
                  .trigger(availableNow=True))
        if name == "events":
            writer.start(out).awaitTermination()
            continue
        with pytest.raises(StreamingQueryException, match=r"is written by query events \(id "):
            writer.start(out).awaitTermination()


def test_partition_by_and_the_option_naming_other_columns_fail_at_start(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    writer = (source(spark, tmp_path / "in").writeStream.format("rotsink").partitionBy("grp")
              .option("partitionBy", "name").option("checkpointLocation", str(tmp_path / "ck"))
              .trigger(availableNow=True))
    with refused_at_start(r"option partitionBy='name' and \.partitionBy\('grp'\) name "
                          "different columns"):
        writer.start(str(tmp_path / "out"))
    assert not (tmp_path / "out" / "_spark_metadata").exists() or \
        not list((tmp_path / "out" / "_spark_metadata").iterdir())


def test_other_sinks_get_the_call_as_spark_gives_it(spark, tmp_path):
    """The wrapper adds nothing to another sink's options: a Python sink registered beside
    rotsink sees exactly Spark's own, and Spark's file sink partitions as it always did."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

    seen = tmp_path / "options.json"

    class OptionsWriter(DataSourceStreamWriter):
        def __init__(self, options):
            self.options = options

        def write(self, iterator):
            return WriterCommitMessage()

        def commit(self, messages, batchId):
            seen.write_text(json.dumps(dict(self.options)))

    class OptionsSink(DataSource):
        @classmethod
        def name(cls):
            return "optionsprobe"

        def streamWriter(self, schema, overwrite):
            return OptionsWriter(self.options)

    spark.dataSource.register(OptionsSink)
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    (source(spark, tmp_path / "in").writeStream.format("optionsprobe").partitionBy("grp")
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
     .start(str(tmp_path / "probe")).awaitTermination())
    assert sorted(json.loads(seen.read_text())) == ["checkpointlocation", "path"]
    (source(spark, tmp_path / "in").writeStream.format("json").partitionBy("grp")
     .option("checkpointLocation", str(tmp_path / "ck2")).trigger(availableNow=True)
     .start(str(tmp_path / "files")).awaitTermination())
    assert sorted(p.name for p in (tmp_path / "files").glob("grp=*")) == \
        ["grp=g0", "grp=g1", "grp=g2"]


@pytest.mark.compat
def test_a_batch_write_is_refused_before_anything_is_written(spark, tmp_path):
    """A backfill tried as ``df.write`` is refused at planning, saying what to run instead;
    the output a live query writes is left exactly as it was."""
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
    out = tmp_path / "out"
    (source(spark, tmp_path / "in").writeStream.format("rotsink")
     .option("checkpointLocation", str(tmp_path / "ck")).option("rotation.maxBatches", "1")
     .trigger(availableNow=True).start(str(out)).awaitTermination())
    log_before = sorted(p.name for p in (out / "_spark_metadata").iterdir())
    files_before = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    batch = spark.read.schema(SCHEMA).json(str(tmp_path / "in"))
    refusal = (r"rotsink is a streaming sink: a batch write \(df\.write\) could not be "
               r"written exactly once.*pyspark_rotsink\.backfill")
    for mode in ("append", "overwrite", "ignore", "errorifexists", None):
        writer = batch.write.format("rotsink")
        with pytest.raises(UnsupportedQueryError, match=refusal):
            (writer if mode is None else writer.mode(mode)).save(str(out))
    with pytest.raises(UnsupportedQueryError, match=refusal):
        batch.write.save(str(tmp_path / "new"), format="rotsink")
    with pytest.raises(UnsupportedQueryError, match=refusal):
        batch.write.saveAsTable("events", format="rotsink")
    assert sorted(p.name for p in (out / "_spark_metadata").iterdir()) == log_before
    assert sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file()) == files_before
    assert not (tmp_path / "new").exists()
    assert rotsink_ids(spark, out) == list(range(20))


@pytest.mark.compat
def test_a_rotsink_query_runs_without_sparks_arrow_size_check(spark, tmp_path):
    """A session that left ``spark.sql.execution.arrow.maxBytesPerBatch`` at Spark's default:
    the rotsink query's own session (the one its micro-batches run with) has 2147483647,
    the application's session is left unset; a value the application set is kept."""
    from datasource.writing.arrow_transfer import KEY, UNCHECKED

    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    before = spark.conf.get(KEY, None)  # the tests' session sets it, as rotsink's sessions do

    def query_setting(run: str) -> str:
        query = (source(spark, tmp_path / "in").writeStream.format("rotsink")
                 .option("checkpointLocation", str(tmp_path / f"ck-{run}"))
                 .trigger(availableNow=True).start(str(tmp_path / f"out-{run}")))
        query.awaitTermination()
        return query._jsq.streamingQuery().lastExecution().sparkSession().conf().get(KEY)

    try:
        spark.conf.unset(KEY)
        assert query_setting("default") == UNCHECKED
        assert spark.conf.get(KEY, None) is None
        spark.conf.set(KEY, "32m")
        assert query_setting("own") == "32m"
    finally:
        spark.conf.unset(KEY) if before is None else spark.conf.set(KEY, before)


def test_what_the_batch_write_refusal_says_to_run_writes_every_row_for_sparks_readers(
        spark, tmp_path):
    """The refusal's own code, run as it stands, over Parquet input: Spark's reader of the
    output returns every input row (no file left open)."""
    import re

    import pyspark_rotsink

    input_path = str(tmp_path / "in")
    spark.range(0, 300, numPartitions=3).selectExpr("id", "cast(id % 3 as string) as grp") \
        .write.parquet(input_path)
    df = spark.read.parquet(input_path)
    with pytest.raises(UnsupportedQueryError) as refused:
        df.write.format("rotsink").save(str(tmp_path / "out"))
    (code,) = re.findall(r"`([^`]+)`", str(refused.value))
    backfill_path, checkpoint_path = str(tmp_path / "backfill"), str(tmp_path / "ck")
    namespace = {"pyspark_rotsink": pyspark_rotsink, "spark": spark, "df": df,
                 "input_path": input_path, "backfill_path": backfill_path,
                 "checkpoint_path": checkpoint_path}
    eval(code, namespace)  # noqa: S307 -- the message's own text is what a user runs
    assert sorted(r.id for r in spark.read.parquet(backfill_path).collect()) == \
        list(range(300))
    eval(code, namespace)  # run again, as after a failure: it continues, no row twice
    assert spark.read.parquet(backfill_path).count() == 300
