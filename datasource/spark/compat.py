"""What rotsink takes from each PySpark release, in one place.

rotsink runs on PySpark 4.0 through 4.3. Everything that depends on the running PySpark's
version is decided here, from its version number, and callers ask for a feature, never for
a version. A feature a release lacks fails when it is used, naming the feature, the release
that has it and the release found (:class:`UnsupportedSparkVersionError`); importing rotsink
never fails on a supported release.

=====================================  =======  =========================================
feature                                PySpark  on earlier releases
=====================================  =======  =========================================
the sink (``DataSourceStreamWriter``)  4.0      (none: 4.0 is the oldest supported)
Arrow batches into the sink's tasks    4.1      4.0 hands them through its batch writer's
(``DataSourceStreamArrowWriter``)               Arrow path (:func:`stream_writer_bases`)
filters pushed into Python readers     4.1      no pruning: every file is planned and read
(``DataSourceReader.pushFilters``)
``spark.dataSource.register`` of a     4.1      refused (``DATA_SOURCE_ALREADY_EXISTS``):
name found statically (replaced, with           ``format("rotsink")`` uses the installed
a log line)                                     rotsink
streaming-source admission control     4.2      the change feed reads all that is
(``latestOffset(start, limit)``,                committed at each trigger; its read limits
``ReadLimit``,                                  are refused; ``availableNow`` runs through
``SupportsTriggerAvailableNow``)                Spark's wrapper of older sources
=====================================  =======  =========================================

The sources measured: ``pyspark/sql/datasource.py``, ``pyspark/sql/worker/
write_into_data_source.py`` and ``pyspark/sql/streaming/python_streaming_source_runner.py`` of
4.0.5, 4.1.4, 4.2.1 and 4.3.0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from commit_protocol.vocabulary.errors import UnsupportedSparkVersionError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

OLDEST = (4, 0)


@cache
def pyspark_version() -> tuple[int, int]:
    """The running PySpark's (major, minor): ``"4.1.4"`` gives ``(4, 1)``.

    >>> isinstance(pyspark_version(), tuple) and pyspark_version() >= OLDEST
    True
    """
    import pyspark

    return parse_version(pyspark.__version__)


def parse_version(text: str) -> tuple[int, int]:
    """``"4.1.4"`` -> ``(4, 1)``; ``"4.2.0.dev1"`` -> ``(4, 2)``.

    >>> parse_version("4.1.4"), parse_version("4.2.0.dev1"), parse_version("4.0")
    ((4, 1), (4, 2), (4, 0))
    """
    major, minor = text.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def check_supported() -> None:
    """Refuse a PySpark older than 4.0, which has no Python streaming sink, by name (pip
    refuses to install rotsink beside one; this catches a forced install)."""
    if pyspark_version() < OLDEST:
        import pyspark

        raise UnsupportedSparkVersionError(
            f"rotsink needs PySpark {'.'.join(map(str, OLDEST))} or newer (the Python "
            f"streaming sink); this is PySpark {pyspark.__version__}")


@dataclass(frozen=True)
class Feature:
    """Something rotsink uses that PySpark brought in ``since``."""

    name: str
    since: tuple[int, int]

    @property
    def available(self) -> bool:
        return pyspark_version() >= self.since

    def require(self, what: str) -> None:
        """Raise :class:`UnsupportedSparkVersionError` for ``what`` (a use of this feature)
        unless the running PySpark has it.

        >>> Feature("time travel", (9, 0)).require("option x")
        Traceback (most recent call last):
        ...
        commit_protocol.vocabulary.errors.UnsupportedSparkVersionError: \
option x needs time travel, \
which PySpark 9.0 brought; this is PySpark ...
        """
        if not self.available:
            import pyspark

            wanted = ".".join(map(str, self.since))
            raise UnsupportedSparkVersionError(
                f"{what} needs {self.name}, which PySpark {wanted} brought; this is PySpark "
                f"{pyspark.__version__}: run the query on PySpark {wanted} or newer")


ARROW_STREAM_WRITER = Feature("Arrow batches into streaming sinks", (4, 1))
FILTER_PUSHDOWN = Feature("filter pushdown into Python data sources", (4, 1))
REGISTER_OVER_STATIC = Feature("spark.dataSource.register of a name Spark found installed",
                               (4, 1))
ADMISSION_CONTROL = Feature("admission control for Python streaming sources "
                            "(latestOffset(start, limit))", (4, 2))


def stream_writer_bases() -> tuple[type, ...]:
    """The base classes of rotsink's stream writer: classes whose ``write`` Spark feeds Arrow
    batches.

    4.1 and newer have ``DataSourceStreamArrowWriter``. 4.0 has only the row-based
    ``DataSourceStreamWriter``, but its executor-side write function (in
    ``write_into_data_source.py``, shared by batch and streaming writes) hands a writer the
    Arrow batches themselves whenever it is a ``DataSourceArrowWriter``, and its streaming
    path checks no other type: a writer that is both gets Arrow batches, as on 4.1, with no
    per-row conversion (identical in 4.0.0 through 4.0.5;
    ``tests/spark/test_spark_versions.py`` pins it).
    """
    from pyspark.sql import datasource

    if ARROW_STREAM_WRITER.available:
        return (datasource.DataSourceStreamArrowWriter,)  # type: ignore[attr-defined]
    return (datasource.DataSourceStreamWriter, datasource.DataSourceArrowWriter)


def available_now_bases() -> tuple[type, ...]:
    """``(SupportsTriggerAvailableNow,)`` where PySpark has it (4.2), else ``()``."""
    if not ADMISSION_CONTROL.available:
        return ()
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    return (SupportsTriggerAvailableNow,)


def to_arrow_schema(schema: StructType) -> pa.Schema:
    """``schema`` as Arrow, timestamps with time zone in UTC (what a Python data source hands
    Spark and gets from it); 4.2 renamed the keyword that says so (``timestamp_utc=True``
    before it)."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema as convert

    options: dict[str, Any] = ({"timezone": "UTC"}
                               if "timezone" in inspect.signature(convert).parameters
                               else {"timestamp_utc": True})
    return convert(schema, **options)


if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as AvailableNow
else:
    class StreamWriterBase(*stream_writer_bases()):
        """The base of rotsink's stream writer on this PySpark: a class Spark feeds Arrow
        batches (:func:`stream_writer_bases`)."""

    class AvailableNow(*available_now_bases()):
        """4.2's marker of a streaming source with ``availableNow`` hooks; nothing before
        4.2, where Spark wraps the source instead (:data:`ADMISSION_CONTROL`)."""
