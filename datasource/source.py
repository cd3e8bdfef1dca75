"""``RotSinkDataSource``: the class Spark finds as ``format("rotsink")``."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from commit_protocol.vocabulary.errors import UnsupportedQueryError
from datasource.writing.writer_calls import BATCH_WRITE_REFUSED


class RotSinkDataSource(DataSource):
    """Exactly-once rotating file sink (streaming write), reader of its output (batch read)
    and its change feed (streaming read).

    Register with ``spark.dataSource.register(RotSinkDataSource)``; after ``pip install`` the
    top-level module ``pyspark_rotsink`` makes Spark register it by itself.
    """

    @classmethod
    def name(cls) -> str:
        return "rotsink"

    def schema(self) -> StructType:
        """Runs on the driver for reads: the schema committed in the log, never inferred."""
        from datasource.reading.reader import committed_schema

        return committed_schema(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Runs on the driver before each micro-batch (and again for its commit)."""
        from datasource.writing.writer import stream_writer

        if overwrite:
            raise UnsupportedQueryError(
                "rotsink is an append-only file sink: outputMode('complete') is not supported; "
                "use outputMode('append')")
        return stream_writer(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Runs on the driver when a batch write (``df.write.format("rotsink")``) is planned,
        before any task: refused.

        Exactly once needs to know a write again when it is retried: a micro-batch has its
        id in the query's checkpoint, so a replay after a crash is recognised and skipped.
        A batch write has no such identity (Spark hands a Python batch writer's commit no
        job id, and a job run again after a driver died is a new job), so a backfill retried
        by its scheduler would write its rows twice. The same rows written by a one-off
        streaming query over the same input are exactly once, rolled, and in the table.
        """
        raise UnsupportedQueryError(BATCH_WRITE_REFUSED)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Runs on the driver: the change feed of the path (``readStream``)."""
        from datasource.reading.stream_reader import RotSinkStreamReader

        return RotSinkStreamReader(dict(self.options), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        """Runs on the driver: plans the read of committed output, taking Spark's filters
        when the session lets Python readers take them (``datasource.reading.pushdown``)."""
        from datasource.reading.pushdown import planning_allows_pushdown
        from datasource.reading.reader import PruningRotSinkReader, RotSinkReader

        reader = PruningRotSinkReader if planning_allows_pushdown() else RotSinkReader
        return reader(dict(self.options), schema)
