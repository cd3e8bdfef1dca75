"""``writeStream.partitionBy(...)`` handed to rotsink (``datasource.writing.writer_calls``): the
wrapper of PySpark's writer classes adds the columns to a rotsink query's options, and to no
other query's; it is in place in every Python process of the environment before PySpark is
imported (``rotsink_workers.pth``), and off with ``ROTSINK_KEEP_SPARK_WRITER``. The real
writers through Spark: ``tests/spark/test_writer_api.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from datasource.writing.writer_calls import PARTITION_COLUMNS, wrap_writer


class FakeWriter:
    """PySpark's ``DataStreamWriter`` as far as the wrapper uses it (classic and Connect
    have these methods, with this ``start`` signature)."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}
        self.started_with: dict[str, str] = {}

    def format(self, source):
        return self

    def partitionBy(self, *cols):
        return self

    def option(self, key, value):
        self.given[key] = value
        return self

    def options(self, **options):
        self.given.update(options)
        return self

    def start(self, path=None, format=None, outputMode=None, partitionBy=None,
              queryName=None, **options):
        if format is not None:
            self.format(format)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        self.started_with = dict(self.given)
        return self


wrap_writer(FakeWriter)


@pytest.mark.parametrize("calls, columns", [
    (lambda w: w.format("rotsink").partitionBy("day", "hour").start("/o"), ["day", "hour"]),
    (lambda w: w.partitionBy(["day"]).format("RotSink").start("/o"), ["day"]),
    (lambda w: w.start("/o", format="rotsink", partitionBy="day"), ["day"]),
    (lambda w: w.format("rotsink").start("/o", partitionBy=["day", "hour"]), ["day", "hour"]),
    (lambda w: w.partitionBy("day").start("/o", "rotsink"), ["day"]),
], ids=["calls", "a list, format after", "start's keywords", "start's list", "start's format"])
def test_a_rotsink_query_gets_the_columns_however_they_are_given(calls, columns):
    writer = calls(FakeWriter())
    assert json.loads(writer.started_with[PARTITION_COLUMNS]) == columns


@pytest.mark.parametrize("calls", [
    lambda w: w.format("parquet").partitionBy("day").start("/o"),
    lambda w: w.format("rotsink").start("/o"),
    lambda w: w.partitionBy("day").start("/o"),  # Spark's default format (parquet)
], ids=["another format", "no columns", "no format"])
def test_any_other_query_gets_nothing(calls):
    assert calls(FakeWriter()).started_with == {}


def test_a_rotsink_query_starts_without_sparks_arrow_size_check():
    """The session's setting for the moment of ``start()`` (the query copies it then);
    another format's query, and the session afterwards, as they were."""
    from datasource.writing.arrow_transfer import KEY, UNCHECKED
    from tests.unit.test_arrow_transfer import FakeSession

    class WithSession(FakeWriter):
        def __init__(self, session):
            super().__init__()
            self._spark = session

        def start(self, *args, **kwargs):  # what the query's own session copies
            self.copied = self._spark.conf.get(KEY)
            return super().start(*args, **kwargs)

    wrap_writer(WithSession)
    session = FakeSession()
    assert WithSession(session).format("rotsink").start("/o").copied == UNCHECKED
    assert WithSession(session).format("parquet").start("/o").copied is None
    assert session.conf.settings == {}


def test_the_metrics_read_the_options_as_spark_spells_them(monkeypatch):
    """What rotsink's metrics seed from (the output's log, found by the options) gets the
    values as Spark's writer hands them to the sink: ``True`` as ``"true"``, not ``"True"``."""
    from datasource.spark import spark_metrics
    from tests.unit.test_arrow_transfer import FakeSession

    seen: dict[str, str] = {}

    def watched(session, writer, start, options):
        seen.update(options)
        return start()

    monkeypatch.setattr(spark_metrics, "start_watched", watched)

    class WithSession(FakeWriter):
        def __init__(self, session):
            super().__init__()
            self._spark = session

    wrap_writer(WithSession)
    WithSession(FakeSession()).format("rotsink").option("commit.fsync", False) \
        .options(**{"compact.enabled": True, "rotation.maxBatches": 2}).start("/o")
    assert {k: seen[k] for k in ("commit.fsync", "compact.enabled", "rotation.maxBatches",
                                 "path")} == {"commit.fsync": "false", "compact.enabled": "true",
                                              "rotation.maxBatches": "2", "path": "/o"}


def test_wrapping_twice_wraps_once():
    start = FakeWriter.start
    wrap_writer(FakeWriter)
    assert FakeWriter.start is start


def run_python(code: str, **env: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


WRAPPED = """
import pyspark.sql.streaming.readwriter as classic
import pyspark.sql.connect.streaming.readwriter as connect
print(all(m.DataStreamWriter.__dict__.get("_rotsink_wrapped", False) for m in (classic, connect)))
"""


def test_pyspark_s_writers_are_wrapped_in_a_fresh_process_without_importing_rotsink():
    """The installed ``rotsink_workers.pth`` sets the hook at interpreter start: a user who
    relies on Spark finding ``pyspark_rotsink`` by itself imports nothing of rotsink."""
    assert run_python(WRAPPED, ROTSINK_KEEP_SPARK_WRITER="") == "True"
    assert run_python("import sys; print('pyspark' in sys.modules)") == "False"  # lazily


def test_the_wrapper_is_off_on_request():
    env = {"ROTSINK_KEEP_SPARK_WRITER": "1"}
    assert run_python(WRAPPED, **env) == "False"
    assert run_python("import pyspark_rotsink\n" + WRAPPED, **env) == "False"
