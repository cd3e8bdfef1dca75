"""rotsink's metrics of a query (docs/operations.md, "Watching a query").

The committer's side, which knows no Spark: each commit is recorded as it runs
(:func:`recording`, steps :func:`timed` where they are defined, :func:`count` and
:func:`note` where the table retries, follows and commits) and left in the query's
*mailbox* (:mod:`~commit_protocol.metrics.mailbox`); the log carries the totals
(:mod:`~commit_protocol.metrics.totals`). ``datasource.spark.spark_metrics`` takes them into Spark's
metrics system.
"""

from commit_protocol.metrics.names import METRICS
from commit_protocol.metrics.recording import count, note, recording, timed
from commit_protocol.metrics.totals import advanced, gauges_of

__all__ = ["METRICS", "advanced", "count", "gauges_of", "note", "recording", "timed"]
