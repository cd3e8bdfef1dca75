"""Bad rows through real Spark (``errors.mode=quarantine``): a query writing text whose input
holds values with line breaks stays up; Spark's own text reader of the output returns every
other value once, and Spark's JSON reader of the quarantine (and rotsink's) the refused rows
once, run after run; over ``errors.maxQuarantinedShare`` the query fails and commits nothing.

The expected rows come from the input the test writes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

RUNS, FILES, ROWS = 2, 3, 20


def write_input(folder: Path, run: int, *, every: int = 7) -> list[str]:
    """``FILES`` JSON lines files of ``ROWS`` values; every ``every``-th holds a line break."""
    folder.mkdir(parents=True, exist_ok=True)
    values = []
    for f in range(run * FILES, (run + 1) * FILES):
        chunk = [f"v{f}-{i}" + ("\nsecond line" if (f * ROWS + i) % every == 0 else "")
                 for i in range(ROWS)]
        (folder / f"in-{f:03d}.json").write_text(
            "".join(json.dumps({"value": v}) + "\n" for v in chunk))
        values += chunk
    return values


def start(spark, tmp_path: Path, **options: str):
    return (spark.readStream.schema("value STRING").option("maxFilesPerTrigger", 1)
            .json(str(tmp_path / "in")).writeStream.format("rotsink")
            .option("format", "text").option("errors.mode", "quarantine")
            .option("rotation.maxBatches", "2").options(**options)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True).start(str(tmp_path / "out")))


def test_a_query_keeps_values_its_format_refuses_aside_and_stays_up(spark, tmp_path, shown):
    written: list[str] = []
    query_ids = set()
    for run in range(RUNS):
        written += write_input(tmp_path / "in", run)
        query = start(spark, tmp_path)
        query.awaitTermination()
        query_ids.add(query.id)
    bad = Counter(v for v in written if "\n" in v)
    finalized = Counter(r.value for r in spark.read.text(str(tmp_path / "out")).collect())
    everything = Counter(r.value for r in spark.read.format("rotsink").load(
        str(tmp_path / "out")).collect())
    assert everything == Counter(v for v in written if "\n" not in v)
    assert finalized and not finalized - everything  # finished files: a part of the output
    quarantine = spark.read.json(str(tmp_path / "out" / "_quarantine")).collect()
    assert Counter(json.loads(r.row)["value"] for r in quarantine) == bad
    assert {(r.column, r.reason) for r in quarantine} == {("value", "line_break")}
    assert {r.query_id for r in quarantine} == {str(i) for i in query_ids}
    by_rotsink = spark.read.format("rotsink").load(str(tmp_path / "out" / "_quarantine"))
    assert Counter(json.loads(r.row)["value"] for r in by_rotsink.collect()) == bad
    shown(f"{sum(bad.values())} of {len(written)} values kept in the quarantine over {RUNS} "
          "runs, every other one in the output, each once")


def test_a_query_over_the_limit_fails_and_commits_nothing(spark, tmp_path):
    write_input(tmp_path / "in", 0)  # 3 of each 20 values refused: 15%
    query = start(spark, tmp_path, **{"errors.maxQuarantinedShare": "0.1"})
    with pytest.raises(StreamingQueryException, match=r"errors.maxQuarantinedShare=0.1"):
        query.awaitTermination()
    assert not list((tmp_path / "out" / "_spark_metadata").glob("[0-9]*"))
    assert not (tmp_path / "out" / "_quarantine" / "_spark_metadata").exists()
    query = start(spark, tmp_path, **{"errors.maxQuarantinedShare": "0.2"})
    query.awaitTermination()  # the limit raised: the same batches commit
    assert spark.read.json(str(tmp_path / "out" / "_quarantine")).count() == sum(
        1 for i in range(FILES * ROWS) if i % 7 == 0)


def test_spark_s_own_writers_change_the_values_rotsink_refuses(spark, tmp_path):
    """docs/bad-rows.md's parity table: Spark's text and ORC writers take each value rotsink
    refuses and give another one back (session zone UTC, as the docs' figures are)."""
    import datetime as dt

    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        spark.sql("SELECT 'a\nb' AS value").write.text(str(tmp_path / "text"))
        assert [r.value for r in spark.read.text(str(tmp_path / "text")).collect()] == ["a", "b"]
        spark.sql("SELECT date'1582-10-10' AS d, timestamp'1969-12-31 23:59:59.5' AS f, "
                  "timestamp'2300-01-01 00:00:00' AS t").write.orc(str(tmp_path / "orc"))
        (row,) = spark.read.orc(str(tmp_path / "orc")).collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert row.d == dt.date(1582, 10, 15)  # moved to the first day the hybrid calendar has
    assert row.f == dt.datetime(1970, 1, 1, 0, 0, 0, 500000)  # a second late (ORC-763)
    assert row.t == dt.datetime(2300, 1, 1)  # Spark reads it back; pyarrow cannot:
    import pyarrow as pa
    import pyarrow.orc as po

    (written,) = (tmp_path / "orc").glob("*.orc")
    with pytest.raises(pa.ArrowInvalid, match="out of range for nanosecond"):
        po.read_table(str(written))


def test_the_snippet_of_the_docs_runs_as_printed(spark, tmp_path):
    """docs/bad-rows.md's query and read, its paths under a temporary directory and an
    ``availableNow`` trigger: the read finds the values with line breaks, by reason."""
    import re

    page = (Path(__file__).resolve().parents[2] / "docs" / "bad-rows.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S)
               if b.startswith("# Quarantine\n")]
    written = write_input(tmp_path / "in", 0, every=40)  # 2 of 60 rows: under the snippet's 5%
    lines = spark.readStream.schema("value STRING").json(str(tmp_path / "in"))
    runnable = (code.replace("/data/checkpoints/logs", str(tmp_path / "ck"))
                .replace("/data/logs", str(tmp_path / "out"))
                .replace('.start(', '.trigger(availableNow=True).start('))
    end = runnable.index("\n", runnable.index(".start("))
    namespace = {"lines": lines, "spark": spark}
    exec(compile(runnable[:end], "docs/bad-rows.md", "exec"), namespace)  # noqa: S102
    for query in spark.streams.active:
        query.awaitTermination()
    exec(compile(runnable[end:], "docs/bad-rows.md", "exec"), namespace)  # noqa: S102
    counted = {(r.reason, r.column): r["count"] for r in namespace["bad"].groupBy(
        "reason", "column").count().collect()}
    assert counted == {("line_break", "value"): sum("\n" in v for v in written)}


def test_a_type_wider_than_committed_writes_what_fits_and_keeps_the_rest(spark, tmp_path):
    """The path committed ``id`` as int; the upstream widened it to long. Without
    ``widenTypes`` the restart writes the ids an int holds, as int (the path's schema stays,
    for every reader), and keeps the others in the quarantine (``committed_type``); with
    ``errors.mode=fail`` the restart is refused before it writes."""
    from tests.support.streams import refused_at_start

    folder = tmp_path / "in"
    folder.mkdir()

    def add(ids: list[int]) -> None:
        (folder / f"in-{len(list(folder.iterdir())):03d}.json").write_text(
            "".join(json.dumps({"id": i, "v": f"v{i}"}) + "\n" for i in ids))

    def run(schema: str, **options: str) -> None:
        (spark.readStream.schema(schema).json(str(folder)).writeStream.format("rotsink")
         .option("format", "parquet").option("rotation.maxBatches", "1").options(**options)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
         .start(str(tmp_path / "out")).awaitTermination())

    quarantine = {"errors.mode": "quarantine"}
    add([1, 2])
    run("id INT, v STRING", **quarantine)
    add([3, 2**31 - 1, 2**31, -(2**31) - 1, 2**40])
    with refused_at_start(r"this query writes struct<id:bigint,v:string>\. Write a changed "
                          r"schema to a new path, or widen id from integer to long"):
        run("id LONG, v STRING")
    run("id LONG, v STRING", **quarantine)
    theirs = spark.read.parquet(str(tmp_path / "out"))
    assert dict(theirs.dtypes)["id"] == "int"
    assert sorted(r.id for r in theirs.collect()) == [1, 2, 3, 2**31 - 1]
    kept = spark.read.json(str(tmp_path / "out" / "_quarantine")).collect()
    assert sorted(json.loads(r.row)["id"] for r in kept) == [-(2**31) - 1, 2**31, 2**40]
    assert {(r.column, r.reason) for r in kept} == {("id", "committed_type")}
