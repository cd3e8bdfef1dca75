"""rotsink through Spark Connect: a client session drives a local Spark Connect server that
the test starts (``tests/support/connect_server.py``), whose Python workers have rotsink.

``format("rotsink")`` is looked up, planned and run on the server (its Python workers import
``pyspark_rotsink``), so a client sends only the format name and options: a client without
rotsink reads rotsink's output. The client is ``pyspark.sql.connect.session.SparkSession``
created directly: the classic builder's ``.remote(...)`` would set
``SPARK_CONNECT_MODE_ENABLED`` in this process, which turns every later
``pyspark.sql.functions`` call of the classic tests sharing it into a Connect one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException

from pyspark_rotsink import with_heartbeat
from tests.support.connect_server import ConnectServer, start_connect_server
from tests.support.streams import SCHEMA, rotsink_ids, run_to_completion, write_numbered_source

# The runs roll files (25 records of 60) and leave some in progress: Spark's reader then sees
# a strict subset, rotsink's reader every row.
ROLL = {"rotation.maxRecords": "25"}

# A Connect client with no rotsink: importing any of these fails in it.
CLIENT_WITHOUT_ROTSINK = """
import json, sys
for name in ("pyspark_rotsink", "datasource", "commit_protocol"):
    sys.modules[name] = None
from pyspark.sql.connect.session import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).create()
rows = spark.read.format("rotsink").load(sys.argv[2]).select("id").collect()
print(json.dumps(sorted(row.id for row in rows)))
spark.stop()
"""


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory) -> Iterator[ConnectServer]:
    server = start_connect_server(tmp_path_factory.mktemp("connect-server"))
    try:
        yield server
    finally:  # whatever the tests did: no server outlives the module
        server.stop()


@pytest.fixture(scope="module")
def client(connect_server):
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(connect_server.url).create()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def written(client, tmp_path_factory):
    """A rotsink path written by two availableNow runs through Connect, more input between:
    ``(directory, out, total rows, micro-batches of the first run)``."""
    base = tmp_path_factory.mktemp("connect-sink")
    source, out, ck = base / "in", base / "out", base / "ck"
    first = write_numbered_source(source, files=2, rows_per_file=20)
    query = run_to_completion(client, source, out, ck, **ROLL)
    first_batches = query.lastProgress["batchId"] + 1
    more = write_numbered_source(source, files=1, rows_per_file=20, start_file=2)
    run_to_completion(client, source, out, ck, **ROLL)
    return base, out, first + more, first_batches


@pytest.mark.compat
def test_two_streaming_runs_are_read_back_exactly_once(client, written):
    _, out, total, first_batches = written
    assert first_batches == 2  # maxFilesPerTrigger=1 reached the server
    rows = client.read.format("rotsink").load(str(out)).collect()
    assert sorted(row.id for row in rows) == list(range(total))
    assert sorted((row.id, row.name) for row in rows) == \
        [(i, f'row "{i}", ü\\') for i in range(total)]
    finished = rotsink_ids(client, out, includeInProgress="false")
    spark_reader = sorted(r.id for r in client.read.schema(SCHEMA).json(str(out)).collect())
    assert spark_reader == finished  # Spark's reader honours the log over Connect too
    assert 0 < len(finished) < total


def test_the_fast_path_through_connect(client, written):
    """``pyspark_rotsink.read`` in a Connect client: Connect plans again at every action, so
    the finalized files go to Spark's reader as the explicit list of one batch, and the rows
    in progress at that batch to rotsink's reader pinned to it."""
    import pyspark_rotsink

    _, out, total, _ = written
    fast = pyspark_rotsink.read(client, str(out))
    assert sorted(r.id for r in fast.collect()) == list(range(total))
    assert fast.where("id < 10").count() == 10  # planned again, the same snapshot


def test_a_client_without_rotsink_reads_the_output(connect_server, written):
    _, out, total, _ = written
    result = subprocess.run([sys.executable, "-c", CLIENT_WITHOUT_ROTSINK, connect_server.url,
                             str(out)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == list(range(total))


def test_change_feed_through_connect(client, written):
    base, upstream, total, _ = written
    feed = (client.readStream.format("rotsink").option("maxBatchesPerTrigger", "2")
            .load(str(upstream)))
    query = (feed.writeStream.format("rotsink").option("checkpointLocation", str(base / "ck2"))
             .trigger(availableNow=True).start(str(base / "downstream")))
    query.awaitTermination()
    # The upstream committed 3 batches: admission control made 2 downstream micro-batches.
    assert query.lastProgress["batchId"] == 1
    assert rotsink_ids(client, base / "downstream") == list(range(total))


def test_bad_options_fail_naming_the_option(client, tmp_path):
    write_numbered_source(tmp_path / "in", files=1, rows_per_file=5)
    with pytest.raises(StreamingQueryException,
                       match=r"option rotation\.interval='soon': expected a duration"):
        run_to_completion(client, tmp_path / "in", tmp_path / "out", tmp_path / "ck",
                          **{"rotation.interval": "soon"})
    # Spark lower-cases option names before any data source sees them, classic or Connect.
    with pytest.raises(AnalysisException, match=r"unknown option includeinprogres='false'; "
                                                r"did you mean includeInProgress\?"):
        rotsink_ids(client, tmp_path / "out", includeInProgres="false")
    assert client.range(3).count() == 3  # the session lives on after both errors


def test_heartbeat_finishes_every_file_through_connect(client, tmp_path):
    """``with_heartbeat`` registers its source from the client (``spark.dataSource.register``
    over Connect); the second availableNow run's idle micro-batch rolls every file."""
    total = write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
    out = tmp_path / "out"
    for _ in range(2):
        df = with_heartbeat(client.readStream.schema(SCHEMA).json(str(tmp_path / "in")))
        (df.writeStream.format("rotsink").option("rotation.rollOnIdle", "true")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
         .start(str(out)).awaitTermination())
    spark_reader = client.read.schema(SCHEMA).json(str(out)).collect()
    assert sorted(row.id for row in spark_reader) == list(range(total))


def test_the_client_leaves_the_classic_session_alone(spark, client):
    """The classic session the other tests share stays this process's active session, and
    classic calls stay classic, with the Connect client open beside it."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from pyspark.sql.utils import is_remote

    assert not is_remote()
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ and "SPARK_REMOTE" not in os.environ
    # pyspark.sql.functions would build Connect columns, refused by a classic DataFrame.
    assert spark.range(4).select(F.sum("id")).collect()[0][0] == 6
    assert client.range(4).count() == 4
    assert SparkSession.getActiveSession() is spark
    assert ConnectSession.getActiveSession() is client


def test_a_named_partitioned_query_through_connect(client, tmp_path):
    """``.queryName`` and ``.partitionBy`` of Connect's own writer: the client's writer class
    hands rotsink the columns as the classic one does (``datasource.writing.writer_calls``)."""
    from datasource.commands.inspect import schema_lines
    from tests.support.streams import group_of

    total = write_numbered_source(tmp_path / "in", files=2, rows_per_file=10)
    out = tmp_path / "out"
    query = (client.readStream.schema(SCHEMA).json(str(tmp_path / "in")).writeStream
             .format("rotsink").queryName("events").partitionBy("grp")
             .option("rotation.maxBatches", "1").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start(str(out)))
    query.awaitTermination()
    assert query.name == "events"
    assert sorted(p.name for p in out.glob("grp=*")) == ["grp=g0", "grp=g1", "grp=g2"]
    spark_reader = client.read.schema(SCHEMA).json(str(out)).select("id", "grp").collect()
    assert sorted((r.id, r.grp) for r in spark_reader) == [(i, group_of(i)) for i in range(total)]
    assert schema_lines(str(out))[0].startswith("query: events (id ")
