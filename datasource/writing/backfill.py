"""``pyspark_rotsink.backfill``: rows written once, to the end, as a batch write never could be.

A batch write (``df.write.format("rotsink")``) is refused (``datasource.source``): it has no
identity a retry could be known by. The same rows read as a stream and written by a one-off
query are exactly once, but a plain ``trigger(availableNow=True)`` run stops with its last
files still open (nothing rolls them: no more input comes), so Spark's readers would see none
of their rows. This runs the README's recipe ("Backfills") in one call: the stream with a
heartbeat, ``rotation.rollOnIdle``, run to its end twice; the second run has no new input but
the heartbeat's, so it makes one idle micro-batch, which finishes every file.

Run again with the same checkpoint (after a crash, or by a scheduler's retry), it continues
where the first stopped and writes no row twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from commit_protocol.vocabulary.errors import OptionError
from datasource.options.names import ROLL_ON_IDLE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

RUNS = 2  # the rows, then one idle micro-batch that rolls every file


def backfill(rows: DataFrame, path: str, *, checkpoint: str,
             options: Mapping[str, str] | None = None, query_name: str | None = None,
             heartbeat: str = "10 seconds") -> StreamingQuery:
    """Write the streaming DataFrame ``rows`` (``spark.readStream...`` over the input) to the
    rotsink output ``path`` to its end, every file finished and visible to Spark's readers,
    exactly once; returns the last run's query (ended).

    Runs on the driver (the user's process); blocks until done.

    Parameters
    ----------
    rows
        A streaming DataFrame whose input is finite (files: ``availableNow`` reads what is
        there when each run starts).
    path, checkpoint
        The output (a path of its own: one query per output) and the query's checkpoint.
    options
        rotsink's options (``{"format": "parquet", "partitionBy": "day", ...}``).
        ``rotation.rollOnIdle`` is set: it is what finishes the last files.
    query_name
        ``.queryName(...)`` of the query, for rotsink's log lines and ``inspect``.
    heartbeat
        The heartbeat's interval (:func:`datasource.writing.heartbeat.with_heartbeat`).

    Raises
    ------
    OptionError
        ``rows`` is not streaming, or ``options`` turn ``rotation.rollOnIdle`` off.
    """
    from datasource.writing.heartbeat import with_heartbeat

    given = {str(k): str(v) for k, v in (options or {}).items()}
    if given.get(ROLL_ON_IDLE, "true").strip().lower() != "true":
        raise OptionError(f"option {ROLL_ON_IDLE}={given[ROLL_ON_IDLE]!r}: backfill finishes "
                          "the last files with it; leave it unset")
    if not rows.isStreaming:
        raise OptionError("backfill takes a streaming DataFrame (spark.readStream...): read "
                          "the input as a stream; a batch DataFrame has no checkpoint to "
                          "make its write exactly once")
    query = None
    for _ in range(RUNS):
        writer = (with_heartbeat(rows, heartbeat).writeStream.format("rotsink")
                  .options(**given).option(ROLL_ON_IDLE, "true")
                  .option("checkpointLocation", checkpoint).trigger(availableNow=True))
        if query_name:
            writer = writer.queryName(query_name)
        query = writer.start(path)
        query.awaitTermination()
    assert query is not None
    return query
