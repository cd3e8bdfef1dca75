"""The floor of any Python data source: sinks and readers that do nothing but move Arrow batches.

rotsink runs on Spark's Python Data Source API, which carries every row between the JVM and
Python workers as Arrow. These two do no work of their own, so their time is what the API
costs before a sink writes a byte or a reader decodes one; the benchmarks measure them in
the same run beside rotsink and Spark's built-in sink or reader.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from datasource.spark.compat import StreamWriterBase


class _CountingWriter(StreamWriterBase):  # Arrow batches, as rotsink's writer gets them
    def write(self, iterator):
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages, batchId):
        pass

    def abort(self, messages, batchId):
        pass


class _Files(InputPartition):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths


# As rotsink's reader and Spark's file sources do, files are packed into a few tasks: a lake
# of hundreds of small files costs a task start per file otherwise.
_MAX_TASKS = 8


class _PassThroughReader(DataSourceReader):
    def __init__(self, path: str, fmt: str, schema) -> None:
        self.path, self.fmt, self.schema = path, fmt, schema

    def partitions(self):
        paths = [str(p) for p in sorted(Path(self.path).rglob("part-*"))]
        tasks = max(1, min(_MAX_TASKS, len(paths)))
        return [_Files(paths[i::tasks]) for i in range(tasks)]

    def read(self, partition):
        # an empty plan is one InputPartition(None): a source with nothing to read
        for path in getattr(partition, "paths", ()):
            yield from self._read_file(path)

    def _read_file(self, path: str):
        from datasource.spark.compat import to_arrow_schema

        schema = to_arrow_schema(self.schema)
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            yield from pq.ParquetFile(path).iter_batches(columns=schema.names)
        elif self.fmt == "orc":
            import pyarrow.orc as po

            orc = po.ORCFile(path)
            for stripe in range(orc.nstripes):
                yield orc.read_stripe(stripe, columns=schema.names)
        else:
            import pyarrow.json as pj

            table = pj.read_json(path,
                                 parse_options=pj.ParseOptions(explicit_schema=schema))
            yield from table.to_batches()


class _PassThroughStreamReader(DataSourceStreamReader):
    """The streaming floor: one micro-batch with every file, read as the batch floor reads."""

    def __init__(self, path: str, fmt: str, schema) -> None:
        self.batch = _PassThroughReader(path, fmt, schema)

    def initialOffset(self):
        return {"files": 0}

    def latestOffset(self, start=None, limit=None):
        return {"files": len(list(Path(self.batch.path).rglob("part-*")))}

    def partitions(self, start, end):
        paths = [str(p) for p in sorted(Path(self.batch.path).rglob("part-*"))]
        return [_Files([p]) for p in paths[start["files"]:end["files"]]]

    def read(self, partition):
        yield from self.batch.read(partition)

    def commit(self, end):
        pass


class FloorSource(DataSource):
    """``format("floor")``: writes count rows; reads (batch and streaming) hand pyarrow's own
    decoding to Spark."""

    @classmethod
    def name(cls) -> str:
        return "floor"

    def streamWriter(self, schema, overwrite):
        return _CountingWriter()

    def reader(self, schema):
        return _PassThroughReader(self.options["path"], self.options.get("format", "parquet"),
                                  schema)

    def streamReader(self, schema):
        return _PassThroughStreamReader(self.options["path"],
                                        self.options.get("format", "parquet"), schema)


def register(spark) -> None:
    """Register ``format("floor")``; its classes travel to the workers by value (this file
    is not on their path)."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FloorSource)
