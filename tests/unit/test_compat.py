"""What each PySpark release gives, decided in ``datasource.spark.compat``: a feature a release
lacks is refused when it is used, naming the feature, the release that brought it and the one found.
The running release is played by replacing ``pyspark_version``; what each release really does is
shown by ``tests/spark/test_spark_versions.py`` on every one of them."""

from __future__ import annotations

import pyspark
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from commit_protocol.vocabulary.errors import UnsupportedSparkVersionError
from datasource.spark import compat
from tests.unit.test_cli import committed_path

pytestmark = pytest.mark.compat


@pytest.mark.parametrize("release, refused", [
    ((4, 0), True), ((4, 1), True), ((4, 2), False), ((4, 3), False),
], ids=["4.0", "4.1", "4.2", "4.3"])
@pytest.mark.parametrize("option", ["maxBatchesPerTrigger", "maxFilesPerTrigger",
                                    "maxBytesPerTrigger"])
def test_the_feed_s_read_limits_need_admission_control(tmp_path, monkeypatch, release,
                                                       refused, option):
    from datasource.reading.stream_reader import RotSinkStreamReader

    monkeypatch.setattr(compat, "pyspark_version", lambda: release)
    options = {"path": str(committed_path(tmp_path)), option: "2"}
    schema = StructType([StructField("id", LongType())])
    if not refused:
        assert RotSinkStreamReader(options, schema).latestOffset is not None
        return
    with pytest.raises(UnsupportedSparkVersionError,
                       match=rf"^option {option}='2' needs admission control for Python "
                             rf"streaming sources \(latestOffset\(start, limit\)\), which "
                             rf"PySpark 4\.2 brought; this is PySpark {pyspark.__version__}: "
                             r"run the query on PySpark 4\.2 or newer$"):
        RotSinkStreamReader(options, schema)


def test_the_sink_s_writer_class_on_each_release(monkeypatch):
    """4.0 has no Arrow stream writer: the sink's writer is a stream writer and a (batch)
    Arrow writer, which 4.0's write path hands Arrow batches."""
    from pyspark.sql import datasource as spark_datasource

    played_4_0 = (spark_datasource.DataSourceStreamWriter,
                  spark_datasource.DataSourceArrowWriter)
    if compat.pyspark_version() >= (4, 1):
        assert compat.stream_writer_bases() == (
            spark_datasource.DataSourceStreamArrowWriter,)  # type: ignore[attr-defined]
    else:
        assert compat.stream_writer_bases() == played_4_0
    monkeypatch.setattr(compat, "pyspark_version", lambda: (4, 0))
    assert compat.stream_writer_bases() == played_4_0


def test_a_release_is_parsed_from_its_version():
    assert compat.parse_version(pyspark.__version__) == compat.pyspark_version()
    assert compat.pyspark_version() >= compat.OLDEST


def test_a_pyspark_older_than_4_0_is_refused_by_name(monkeypatch):
    compat.check_supported()  # the running one is supported
    monkeypatch.setattr(compat, "pyspark_version", lambda: (3, 5))
    with pytest.raises(UnsupportedSparkVersionError,
                       match=rf"^rotsink needs PySpark 4\.0 or newer \(the Python streaming "
                             rf"sink\); this is PySpark {pyspark.__version__}$"):
        compat.check_supported()
