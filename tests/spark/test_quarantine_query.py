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


def write_input(folder: Path, run: int) -> list[str]:
    """``FILES`` JSON lines files of ``ROWS`` values; every seventh holds a line break."""
    folder.mkdir(parents=True, exist_ok=True)
    values = []
    for f in range(run * FILES, (run + 1) * FILES):
        chunk = [f"v{f}-{i}" + ("\nsecond line" if (f * ROWS + i) % 7 == 0 else "")
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
