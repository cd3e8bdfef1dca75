"""What differs between PySpark releases (``datasource.spark.compat``), run on every supported one
(``pytest -m compat`` in each older release's virtualenv, ``.ci/run``): the Spark facts each
release gives rotsink, pinned, and every feature a release lacks refused by name and version
when it is used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest

from datasource.spark.compat import (
    ADMISSION_CONTROL,
    ARROW_STREAM_WRITER,
    FILTER_PUSHDOWN,
    stream_writer_bases,
)
from tests.support.streams import SCHEMA, rotsink_ids, run_to_completion, write_numbered_source

pytestmark = pytest.mark.compat
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("installed", ["checkout", "wheel"])
def test_installing_rotsink_keeps_the_installed_pyspark(tmp_path, installed):
    """rotsink's requirements admit every supported release: pip, asked to install rotsink
    here as the README and docs/cluster.md say (a checkout, or the wheel built from it:
    rotsink is not on PyPI), with this PySpark pinned beside it, would install rotsink and
    change nothing of the installed PySpark (a cluster's Python must keep its Spark's)."""
    import pyspark

    from tests.support.python_envs import build_wheel

    target = str(build_wheel(tmp_path / "dist") if installed == "wheel" else ROOT)
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                    "--disable-pip-version-check", "--report", str(report), target,
                    f"pyspark=={pyspark.__version__}"], check=True, stdin=subprocess.DEVNULL)
    planned = {item["metadata"]["name"].lower()
               for item in json.loads(report.read_text())["install"]}
    assert "rotsink" in planned
    assert not planned & {"pyspark", "py4j"}, planned


def test_a_writer_of_rotsink_s_bases_gets_arrow_batches(spark, tmp_path):
    """The fact rotsink's sink stands on: Spark hands ``write`` Arrow record batches, through
    ``DataSourceStreamArrowWriter`` from 4.1, and on 4.0 through a writer that is both a
    stream writer and a (batch) Arrow writer (``datasource.spark.compat.stream_writer_bases``)."""
    from pyspark.sql.datasource import DataSource, WriterCommitMessage

    seen = tmp_path / "seen.jsonl"

    class Message(WriterCommitMessage):
        def __init__(self, kinds: list[str]) -> None:
            self.kinds = kinds

    class Probe(*stream_writer_bases()):  # type: ignore[misc]
        def write(self, iterator):
            return Message(sorted({type(item).__name__ for item in iterator}))

        def commit(self, messages, batchId):
            with open(seen, "a") as lines:
                lines.write(json.dumps([m.kinds for m in messages if m is not None]) + "\n")

        def abort(self, messages, batchId):
            pass

    class ProbeSource(DataSource):
        @classmethod
        def name(cls):
            return "arrow_probe"

        def streamWriter(self, schema, overwrite):
            return Probe()

    spark.dataSource.register(ProbeSource)
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=5)
    df = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
    (df.writeStream.format("arrow_probe").option("checkpointLocation", str(tmp_path / "ck"))
     .trigger(availableNow=True).start().awaitTermination())
    kinds = {kind for line in seen.read_text().splitlines() for task in json.loads(line)
             for kind in task}
    assert kinds == {pa.RecordBatch.__name__}
    assert ARROW_STREAM_WRITER.available == (len(stream_writer_bases()) == 1)


@pytest.mark.parametrize("option, value", [("maxFilesPerTrigger", "1")])
def test_feed_limits_are_refused_before_4_2_naming_the_version(spark, tmp_path, option, value):
    """The change feed runs on every release; its read limits need 4.2's admission control
    (on 4.2 and newer ``tests/spark/test_feed_e2e.py`` shows each at work; all three are
    refused by the same check, ``tests/unit/test_options.py``)."""
    up = tmp_path / "up"
    write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
    run_to_completion(spark, tmp_path / "in", up, tmp_path / "ck_up")
    feed = spark.readStream.format("rotsink").option(option, value).load(str(up))
    query = (feed.writeStream.format("rotsink").option("checkpointLocation",
                                                       str(tmp_path / "ck_down"))
             .trigger(availableNow=True))
    if ADMISSION_CONTROL.available:
        query.start(str(tmp_path / "down")).awaitTermination()
        assert rotsink_ids(spark, tmp_path / "down") == list(range(20))
        return
    with pytest.raises(Exception, match=rf"option {option}='{value}' needs admission control "
                       rf"for Python streaming sources .*PySpark 4\.2 brought; this is PySpark "
                       rf"{pyspark.__version__}"):
        query.start(str(tmp_path / "down")).awaitTermination()
    assert not (tmp_path / "down" / "_spark_metadata").exists()


def test_a_feed_reads_all_that_is_committed_at_each_trigger(spark, tmp_path):
    """Without admission control (before 4.2) a micro-batch of the feed reads everything
    committed when it starts; with it, the default limit is all available too."""
    up, down = tmp_path / "up", tmp_path / "down"
    total = write_numbered_source(tmp_path / "in", files=4, rows_per_file=10)
    run_to_completion(spark, tmp_path / "in", up, tmp_path / "ck_up",
                      **{"rotation.maxBatches": "2"})
    feed = spark.readStream.format("rotsink").load(str(up))
    query = (feed.writeStream.format("rotsink").option("checkpointLocation",
                                                       str(tmp_path / "ck_down"))
             .trigger(availableNow=True).start(str(down)))
    query.awaitTermination()
    assert query.lastProgress is not None and query.lastProgress.batchId == 0
    assert rotsink_ids(spark, down) == list(range(total))


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> Path:
    """Parquet partitioned by ``grp``, 150 rows in 5 micro-batches: some files finished,
    some in progress in every directory."""
    base = tmp_path_factory.mktemp("lake")
    write_numbered_source(base / "in", files=5, rows_per_file=30)
    run_to_completion(spark, base / "in", base / "out", base / "ck", format="parquet",
                      partitionBy="grp", **{"rotation.maxRecords": "20"})
    return base / "out"


def input_ids_of_batches(checkpoint: Path, batches: range) -> list[int]:
    """The ids of the input files Spark's file source read in ``batches``, from its own log
    in the query's checkpoint (``sources/0/<batch>``: a JSON line per file)."""
    from urllib.parse import unquote, urlparse

    ids = []
    for batch in batches:
        _, *entries = (checkpoint / "sources" / "0" / str(batch)).read_text().splitlines()
        for entry in map(json.loads, entries):
            path = Path(unquote(urlparse(entry["path"]).path))
            ids += [json.loads(line)["id"] for line in path.read_text().splitlines()]
    return sorted(ids)


def test_every_read_of_the_output_on_this_release(spark, lake, pushdown):
    """rotsink's reader, pinned to a batch, the fast path and filters: the same rows on every
    release; filters prune the files read where the release hands them to Python readers
    (4.1), and on 4.0 every file is read."""
    import pyspark_rotsink

    def ids(df) -> list[int]:
        return sorted(r.id for r in df.select("id").collect())

    def read():  # a task per file: the tasks count the files read
        return spark.read.format("rotsink").option("numPartitions", "1000").load(str(lake))

    everything = read()
    assert ids(everything) == list(range(150))
    assert ids(pyspark_rotsink.read(spark, str(lake))) == list(range(150))
    pinned = spark.read.format("rotsink").option("asOfBatch", "2").load(str(lake))
    assert ids(pinned) == input_ids_of_batches(lake.parent / "ck", range(3))
    finalized = ids(spark.read.parquet(str(lake)))
    assert 0 < len(finalized) < 150 and set(finalized) < set(range(150))
    one = read().where("grp = 'g1'")
    assert ids(one) == [i for i in range(150) if i % 3 == 1]
    pruned = one.rdd.getNumPartitions() < everything.rdd.getNumPartitions()
    assert pruned == FILTER_PUSHDOWN.available
