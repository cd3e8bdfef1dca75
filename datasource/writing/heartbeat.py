"""``with_heartbeat``: micro-batches while the input is idle, so rotsink's commit still runs.

Spark runs a micro-batch only when a source has new input, and rotsink applies
``rotation.interval`` and ``rotation.inactivity`` at its commit: without new input, files
stay in progress and Spark's readers never see their rows. ``with_heartbeat(df)`` returns
``df`` united with a streaming source that has "new input" once per interval and no rows: its
offset is the number of whole intervals since 1970, and it plans no partition, so an idle
micro-batch runs no task of its own and moves no row (Spark still runs the sink's write with
one empty task, then its commit).

Why not a ``rate`` source filtered out before the sink: it would make a micro-batch at every
trigger, not once per interval, and its rows would be generated, moved and dropped each time.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from commit_protocol.vocabulary.durations import parse_duration_ms
from datasource.spark.compat import AvailableNow

HEARTBEAT_FORMAT = "rotsink_heartbeat"
INTERVAL = "interval"


def with_heartbeat(df: DataFrame, interval: str = "10 seconds") -> DataFrame:
    """``df`` (a streaming DataFrame) with a heartbeat: Spark runs a micro-batch at least
    every ``interval`` (``"10 seconds"``, ``"1 minute"``) even when ``df`` has no new input.

    Same schema and rows as ``df``. The heartbeat is a source of the query: add it from the
    query's first run (Spark refuses to restart a checkpoint with a different set of sources).
    With ``trigger(availableNow=True)`` it adds one interval per run, so a run without new
    input makes exactly one idle micro-batch (see ``rotation.rollOnIdle``).

    Raises ``OptionError`` for a bad interval or a DataFrame that is not streaming.
    """
    interval_ms = parse_duration_ms(INTERVAL, interval)
    if interval_ms < 1:
        from commit_protocol.vocabulary.errors import OptionError

        raise OptionError(f"option {INTERVAL}={interval!r}: a heartbeat needs an interval > 0")
    if not df.isStreaming:
        from commit_protocol.vocabulary.errors import OptionError

        raise OptionError("with_heartbeat takes a streaming DataFrame (spark.readStream...)")
    spark = df.sparkSession
    spark.dataSource.register(HeartbeatDataSource)
    beats = (spark.readStream.format(HEARTBEAT_FORMAT).schema(df.schema)
             .option(INTERVAL, str(interval_ms)).load())
    return df.unionByName(beats)


class HeartbeatDataSource(DataSource):
    """The heartbeat as a Python streaming source (registered by :func:`with_heartbeat`)."""

    @classmethod
    def name(cls) -> str:
        return HEARTBEAT_FORMAT

    def schema(self) -> StructType:
        return StructType([])  # with_heartbeat always passes the stream's schema

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HeartbeatReader(int(self.options.get(INTERVAL, "10000")))


class HeartbeatReader(DataSourceStreamReader, AvailableNow):
    """Offsets ``{"tick": whole intervals since 1970}``; no partitions, so no rows.

    Before PySpark 4.2 Spark asks a Python source for ``latestOffset()`` alone, and in an
    ``availableNow`` run asks it once, at the start, through its wrapper of sources without
    availableNow hooks: the reader cannot tell such a run from a trigger. There the offset
    also names this reader (``run``: one per query start), so each start, an availableNow
    run's included, differs from the checkpoint's offset once and makes one idle
    micro-batch, as 4.2's hooks make one per availableNow run.
    """

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self.available_now = False
        self.target: int | None = None
        self.run = time.time_ns()

    def _tick(self) -> int:
        return int(time.time() * 1000) // self.interval_ms

    def initialOffset(self) -> dict:
        return {"tick": self._tick()}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """PySpark 4.2 passes the micro-batch's start and a read limit; earlier ones nothing
        (see the class docstring)."""
        tick = self._tick()
        if start is None:
            return {"tick": tick, "run": self.run}
        if self.available_now:
            if self.target is None:  # one interval per availableNow run
                self.target = start["tick"] + 1
            tick = self.target
        return {"tick": max(tick, start["tick"])}

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = True

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return []

    def read(self, partition: InputPartition):  # never called: there are no partitions
        return iter(())

    def commit(self, end: dict) -> None:
        pass
