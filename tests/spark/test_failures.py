"""Failures through real Spark: a task dying mid-write, a commit dying before the log write,
queries a file sink cannot honour. Each ends with exact output or a clear error."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from tests.support.streams import (
    SCHEMA,
    refused_at_start,
    rotsink_ids,
    run_to_completion,
    write_numbered_source,
)


@pytest.mark.parametrize("filters", [pytest.param("plain", marks=pytest.mark.compat),
                                     "zstd+encrypted"])
def test_task_failing_mid_write_is_retried_with_exact_output(spark, tmp_path, failpoints, filters):
    options = {"rotation.maxRecords": "25"}
    if filters != "plain":
        (tmp_path / "key").write_text("11" * 32)
        options.update({"compression": "zstd", "encryption.key": f"file:{tmp_path / 'key'}"})
    read = {k: v for k, v in options.items() if k.startswith("encryption")}
    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=40)
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", **options)
    assert rotsink_ids(spark, out, **read) == list(range(total))
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=40, start_file=3)
    failpoints.arm("task.after_append=raise:once")  # the first attempt dies after appending
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", **options)
    assert rotsink_ids(spark, out, **read) == list(range(total + 80))
    if filters == "plain":
        assert spark.read.json(str(out)).count() == \
            len(rotsink_ids(spark, out, includeInProgress="false"))


@pytest.mark.compat
def test_driver_killed_before_log_write_recovers_on_restart(spark, tmp_path, failpoints):
    total = write_numbered_source(tmp_path / "in", files=4, rows_per_file=10)
    out, ck = tmp_path / "out", tmp_path / "ck"
    failpoints.arm("driver.before_log_write=kill:once")  # the commit process dies (SIGKILL-like)
    with pytest.raises(StreamingQueryException):
        run_to_completion(spark, tmp_path / "in", out, ck, **{"rotation.maxBatches": "1"})
    failpoints.disarm()
    renamed_unlogged = [p for p in out.glob("part-*")]
    assert renamed_unlogged, "the failpoint fires after the rename"
    run_to_completion(spark, tmp_path / "in", out, ck, **{"rotation.maxBatches": "1"})
    assert rotsink_ids(spark, out) == list(range(total))
    assert sorted(r.id for r in spark.read.json(str(out)).collect()) == list(range(total))


@pytest.mark.compat
def test_an_error_after_the_commit_point_loses_nothing_and_the_restart_goes_on(
        spark, tmp_path, failpoints):
    """The issue 67 case: a rolling, partitioned Parquet query whose first commit raises
    after its log file is written; Spark aborts the epoch, and the abort used to delete the
    in-progress files the log had just committed (every restart then failed on a missing
    file). Now the restart goes on and every row is there once."""
    from commit_protocol.checks.verification import verify_output
    from commit_protocol.storage import open_storage

    total = write_numbered_source(tmp_path / "in", files=3, rows_per_file=20)
    out, ck = tmp_path / "out", tmp_path / "ck"
    options = {"format": "parquet", "partitionBy": "grp", "rotation.maxBatches": "3"}
    failpoints.arm("driver.after_log_write=raise:once")
    with pytest.raises(StreamingQueryException, match="failpoint"):
        run_to_completion(spark, tmp_path / "in", out, ck, **options)
    failpoints.disarm()
    found = verify_output(open_storage(str(out)), commit_timeout_s=0).problems
    assert not [p for p in found if "missing" in p], found  # what the abort used to delete
    run_to_completion(spark, tmp_path / "in", out, ck, **options)
    assert rotsink_ids(spark, out) == list(range(total))
    assert sorted(r.id for r in spark.read.parquet(str(out)).collect()) == \
        rotsink_ids(spark, out, includeInProgress="false")


def _stream(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    return spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))


@pytest.mark.compat
def test_complete_mode_is_refused(spark, tmp_path):
    counts = _stream(spark, tmp_path).groupBy("grp").count()
    query = (counts.writeStream.format("rotsink").outputMode("complete")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start(str(tmp_path / "out")))
    with pytest.raises(StreamingQueryException,
                       match="outputMode\\('complete'\\) is not supported"):
        query.awaitTermination()


@pytest.mark.compat
@pytest.mark.parametrize("options, message", [
    ({"rotation.interval": "soon"}, "option rotation.interval='soon'"),
    ({"format": "text"}, "text"),
    ({"partitionBy": "nope"}, "option partitionBy='nope': no column nope"),
], ids=["bad-duration", "text-needs-one-string-column", "unknown-partition-column"])
def test_bad_options_fail_at_start_naming_the_option(spark, tmp_path, options, message):
    """Raised by ``start()`` itself, before Spark starts the query (datasource/writing/
    preflight.py)."""
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=2)
    with refused_at_start(message):
        run_to_completion(spark, tmp_path / "in", tmp_path / "out", tmp_path / "ck", **options)
    assert not (tmp_path / "out" / "_spark_metadata").exists()


def test_second_query_on_the_same_path_is_refused(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck1")
    with pytest.raises(StreamingQueryException, match="rotsink allows one query per output path"):
        run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck2")
    assert rotsink_ids(spark, out) == list(range(5))


@pytest.mark.compat
def test_format_rotsink_works_without_register(spark, tmp_path):
    """Static registration: the installed top-level module ``pyspark_rotsink``."""
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=3)
    run_to_completion(spark, tmp_path / "in", tmp_path / "out", tmp_path / "ck")
    assert spark.read.format("rotsink").load(str(tmp_path / "out")).count() == 3


@pytest.mark.compat
def test_explicit_register_also_works(spark, tmp_path):
    """From PySpark 4.1 a registration replaces the static one (and logs so); 4.0 refuses to
    register a name a static data source has (pinned: the README says so)."""
    from datasource.source import RotSinkDataSource
    from datasource.spark.compat import REGISTER_OVER_STATIC

    if REGISTER_OVER_STATIC.available:
        spark.dataSource.register(RotSinkDataSource)
    else:
        with pytest.raises(Exception, match="DATA_SOURCE_ALREADY_EXISTS"):
            spark.dataSource.register(RotSinkDataSource)
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=3)
    run_to_completion(spark, tmp_path / "in", tmp_path / "out", tmp_path / "ck")
    assert spark.read.format("rotsink").load(str(tmp_path / "out")).count() == 3


def test_schema_change_between_restarts_is_refused(spark, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    out, ck = tmp_path / "out", tmp_path / "ck"
    run_to_completion(spark, tmp_path / "in", out, ck)
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5, start_file=1)
    with refused_at_start("holds rows of schema .* this query writes"):
        run_to_completion(spark, tmp_path / "in", out, ck, transform=lambda df: df.select("id"))
    assert rotsink_ids(spark, out) == list(range(5))


@pytest.mark.parametrize("options, message", [
    ({"includeInProgres": "false"},
     # Spark hands a data source its option keys lower-cased
     r"unknown option includeinprogres='false'; did you mean includeInProgress\?"),
    ({"format": "csv"}, "option format='csv' is a sink option"),
    ({"startingOffsets": "earliest"}, "unknown option startingoffsets='earliest'. See "
                                      "docs/options.md"),
    ({"maxFilesPerTrigger": "1"}, r"option maxFilesPerTrigger='1' is for the change feed "
                                  r"\(spark.readStream.format\('rotsink'\)\)"),
], ids=["misspelt", "sink-option", "unknown", "feed-option-in-a-batch-read"])
def test_reader_refuses_options_it_does_not_take(spark, tmp_path, options, message):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException

    write_numbered_source(tmp_path / "in", files=1, rows_per_file=3)
    run_to_completion(spark, tmp_path / "in", tmp_path / "out", tmp_path / "ck")
    with pytest.raises((AnalysisException, Py4JJavaError), match=message):
        spark.read.format("rotsink").options(**options).load(str(tmp_path / "out")).collect()
