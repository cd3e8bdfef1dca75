"""The driver's commit of a batch's refused rows (``errors.mode=quarantine``): the limit, then
the quarantine's own log commit, before the output's commit point (the tasks' side, and why
that order: :mod:`commit_protocol.task.quarantine`).

The quarantine's batches are its own, one for each batch of the output that refused rows
(batches with none commit nothing there), each recording the output's batch it holds
(:data:`OUTPUT_BATCH`): the replay of a batch whose rows the quarantine holds already
commits nothing to it, and the files that replay's tasks wrote are orphans its clean-up
deletes after ``log.cleanupDelay``.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence

from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import TaskReport
from commit_protocol.storage import open_storage
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import QuarantineLimitError

logger = logging.getLogger("rotsink.quarantine")

OUTPUT_BATCH = "quarantine.outputBatch"  # in the quarantine's state: the output's batch
# The quarantine's rows (records.QUARANTINE_SCHEMA), as Spark's StructType JSON: its log
# records its schema so; here, where the driver commits without pyarrow
QUARANTINE_SCHEMA_JSON = json.dumps({"type": "struct", "fields": [
    {"name": name, "type": kind, "nullable": True, "metadata": {}} for name, kind in (
        ("row", "string"), ("column", "string"), ("reason", "string"), ("message", "string"),
        ("batch_id", "long"), ("query_id", "string"), ("quarantined_at", "timestamp"))]})


def refused_counts(reports: Sequence[TaskReport]) -> Counter[str]:
    """The batch's refused rows by reason."""
    counts: Counter[str] = Counter()
    for report in reports:
        counts.update(dict(report.refused))
    return counts


def commit_quarantined(config: SinkConfig, batch_id: int, reports: Sequence[TaskReport], *,
                       now_ms: int, committer_class: type) -> Counter[str]:
    """Commit batch ``batch_id``'s refused rows to the quarantine (``config`` is the
    output's), unless it holds them already, with a ``committer_class`` (the output's own
    ``Committer``: the quarantine is an output committed as any); return them counted by
    reason.

    Raises
    ------
    QuarantineLimitError
        More of the batch's rows were refused than ``errors.maxQuarantinedShare`` allows.
    """
    counts = refused_counts(reports)
    if config.quarantine is None or not counts:
        return counts
    _check_share(config, batch_id, reports, counts)
    failpoints.hit("quarantine.before_commit")
    quarantine = config.quarantine
    committer = committer_class(open_storage(quarantine.path, config.fs_options),
                                quarantine, QUARANTINE_SCHEMA_JSON)
    latest = committer.recover()
    held = -1 if latest is None else int(
        committer.log.read_state(latest).extra.get(OUTPUT_BATCH, -1))
    if held >= batch_id:
        logger.warning("batch %d: its %d refused row(s) are in the quarantine %s already (a "
                       "replay): committing the output's rows alone", batch_id,
                       sum(counts.values()), quarantine.path)
    else:
        at = 0 if latest is None else latest + 1
        committer.commit(at, [
            TaskReport(batch_id=at, partition=r.partition, attempt=r.attempt,
                       query_id=r.query_id, files=r.quarantined, claimed=True)
            for r in reports if r.quarantined], now_ms=now_ms, extra={OUTPUT_BATCH: batch_id})
        logger.warning("batch %d: %d row(s) refused and kept in the quarantine %s (its batch "
                       "%d): %s", batch_id, sum(counts.values()), quarantine.path, at,
                       ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())))
    failpoints.hit("quarantine.after_commit")
    return counts


def _check_share(config: SinkConfig, batch_id: int, reports: Sequence[TaskReport],
                 counts: Counter[str]) -> None:
    limit = config.max_quarantined_share
    if limit is None:
        return
    refused = sum(counts.values())
    taken = sum(f.new_records for r in reports for f in r.files)
    share = refused / (refused + taken)
    if share > limit:
        raise QuarantineLimitError(
            f"batch {batch_id}: {refused} of its {refused + taken} rows ({share:.2%}) were "
            f"refused ({', '.join(f'{reason} {n}' for reason, n in sorted(counts.items()))}), "
            f"more than errors.maxQuarantinedShare={limit} allows: nothing of the batch is "
            "committed. Fix the input (or raise the limit) and restart the query; the replay "
            "of the batch refuses the same rows")
