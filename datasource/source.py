"""``RotSinkDataSource``: the class Spark finds as ``format("rotsink")``."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.types import StructType

from commit_protocol.errors import UnsupportedQueryError


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
        from datasource.reader import committed_schema

        return committed_schema(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Runs on the driver before each micro-batch (and again for its commit)."""
        from datasource.options import parse_sink_options
        from datasource.schema_check import check_schema, check_table_schema
        from datasource.writer import RotSinkStreamWriter

        if overwrite:
            raise UnsupportedQueryError(
                "rotsink is an append-only file sink: outputMode('complete') is not supported; "
                "use outputMode('append')")
        config = parse_sink_options(dict(self.options))
        check_schema(config.format, config.partition_by, schema)
        if config.table_format is not None:
            check_table_schema(config.table_format.name, config.partition_by, schema)
        return RotSinkStreamWriter(config, schema.json())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Runs on the driver: the change feed of the path (``readStream``)."""
        from datasource.stream_reader import RotSinkStreamReader

        return RotSinkStreamReader(dict(self.options), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        """Runs on the driver: plans the read of committed output, taking Spark's filters
        when the session lets Python readers take them (``datasource.pushdown``)."""
        from datasource.pushdown import planning_allows_pushdown
        from datasource.reader import PruningRotSinkReader, RotSinkReader

        reader = PruningRotSinkReader if planning_allows_pushdown() else RotSinkReader
        return reader(dict(self.options), schema)
