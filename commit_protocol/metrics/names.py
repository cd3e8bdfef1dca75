"""The metrics of a rotsink query, as Spark's metrics system shows them.

One metrics source per query, ``rotsink.<query name>`` (the query's id when it has no name),
as Spark names its own streaming metrics ``spark.streaming.<query name>``; each metric a gauge
named like Spark's (``inputRate-total``, ``latency``): the quantity, then its unit or scope after
a dash. A sink of Spark's metrics system shows ``<app id>.driver.rotsink.<query>.<metric>``
(JMX), ``metrics_<app id>_driver_rotsink_<query>_<metric>_Value`` (Prometheus, each character
Prometheus refuses made ``_``).

``-total`` counts since the output's first batch where the log knows it (its state carries the
totals: a restarted query goes on from them; ``batchesUncounted-total`` says how many batches an
earlier release committed without counting), else since the query started (marked *started*).
``-lastBatch`` and the ``commit*-ms`` durations are of the last committed batch;
``commitCompaction-ms`` of the last batch that compacted the log.
"""

from __future__ import annotations

# name: what it means (docs/operations.md "Watching a query" explains each in full)
METRICS: dict[str, str] = {
    "batches-total": "micro-batches committed to the output",
    "batchesIdle-total": "of those, batches with no row (a heartbeat's, or an empty trigger's)",
    "batchesAborted-total": "batches Spark aborted after a failed task (started)",
    "batchId": "the id of the last committed batch",
    "rows-total": "rows committed",
    "bytes-total": "bytes the tasks wrote (for Parquet and ORC: the staged rows)",
    "filesCreated-total": "part files started",
    "filesFinalized-total": "part files finished and renamed to their final names",
    "rowsFinalized-total": "rows in those files: what Spark's readers of the path return "
                           "(less what a table's deletes removed)",
    "batchesUncounted-total": "batches the -total counts miss: committed by a release that "
                              "kept no totals (0: the totals are whole)",
    "rows-lastBatch": "rows of the last batch",
    "bytes-lastBatch": "bytes of the last batch",
    "files-lastBatch": "part files the last batch appended to",
    "rowsQuarantined-total": "rows refused and kept in the quarantine (errors.mode=quarantine)",
    "rowsQuarantined-lastBatch": "rows the last batch refused",
    "filesFinalized-lastBatch": "part files the last batch finished",
    "filesInProgress": "files open across batches: committed rows Spark's readers cannot see yet",
    "filesInProgress-bytes": "their bytes",
    "filesInProgress-rows": "their rows",
    "oldestInvisibleRow-timestampMs": "commit time of the oldest row in an open file (0: none)",
    "visibilityLag-ms": "its age: how long a committed row has waited to be readable",
    "commit-ms": "the last commit on the driver, every step",
    "commitLog-ms": "its log step: staging and publishing the _spark_metadata file",
    "commitPublish-ms": "its renames of finished files and partition markers",
    "commitTable-ms": "its table commit (table.format), snapshot expiry included",
    "commitFollow-ms": "its reading of other writers' table commits",
    "commitCleanup-ms": "its clean-up of expired log files and orphans",
    "commitCompaction-ms": "the log step of the last compacting batch",
    "lastCommit-timestampMs": "when the last commit finished",
    "tableVersion": "the table's version (Delta) or sequence number (Iceberg) after it",
    "tableCommitRetries-total": "table commits retried after another writer's landed (started)",
    "afterCommitRetries-total": "steps after the commit point (the table commit, the clean-up) "
                                "tried again after an error (started)",
    "cleanupsDeferred-total": "clean-ups that still failed after their retries, left to the "
                              "next compaction batch (started)",
    "tableFollowed-total": "commits that followed other writers' table changes (started)",
    "tableFilesFollowed-total": "files those changes removed or added (started)",
    "failures-total": "failed commits and aborts, every kind (started)",
    "failures-concurrentWriter-total": "another query wrote the output (started)",
    "failures-table-total": "the table refused or failed a commit (started)",
    "failures-storage-total": "storage failed a request (started)",
    "failures-commit-total": "a report or file failed its checks (started)",
    "failures-other-total": "any other error (started)",
}

# the gauges only the user's process can compute (the time now against a published time)
VISIBILITY_LAG, OLDEST_INVISIBLE = "visibilityLag-ms", "oldestInvisibleRow-timestampMs"
FAILURE_KINDS = ("concurrentWriter", "table", "storage", "commit", "other")
