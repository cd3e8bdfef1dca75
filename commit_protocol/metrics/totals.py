"""The totals a query's log carries, and the gauges a committed state gives.

Each batch's state carries the output's running totals (``extra["totals"]``, beside the
fields older writers ignore), so a query restarted after its driver died goes on counting
from the log instead of from 0, and the gauges of a query that has not committed since its
start can be read from the log alone (:func:`gauges_of`).

The totals name the batch they count through (``batch``) and their commit's time
(``committedMs``). A batch they do not count is *uncounted*, never silently missing: an output
written by a release that kept no totals counts from the first batch this one commits (its
earlier batches uncounted), and a release that copies the totals without moving them on (one
from before totals, after a downgrade) leaves a gap between their ``batch`` and the batch
before the next commit, which is added to the uncounted batches. Those are kept beside the
totals (``extra["totalsUncounted"]``), not in them: release 0.1.0 moves the totals on but
rebuilds them with the keys it knows (no ``batch``: its batches are counted) and copies every
other field as it is. Everything that shows the totals says how many batches they miss
(``batchesUncounted-total``). ``batches-total`` is always whole (the batch id says it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from commit_protocol.records.messages import FileReport
    from commit_protocol.records.state import SinkState

TOTALS = "totals"
UNCOUNTED = "totalsUncounted"  # batches the totals miss, kept where every release copies it


def advanced(extra: dict[str, Any], *, after: int, batch_id: int,
             files: Sequence[FileReport], appended: tuple[int, int, int],
             finalized: int, now_ms: int,
             refused: Mapping[str, int] | None = None) -> dict[str, Any]:
    """``extra`` (of the state of batch ``after``; -1: none) with the totals moved on to batch
    ``batch_id``: its tasks' ``files``, what they ``appended`` (tasks, rows, bytes, as the
    state records it), the ``finalized`` files its commit publishes (how many) and the rows
    it ``refused`` by reason (``errors.mode=quarantine``), at ``now_ms``.

    >>> first = advanced({}, after=-1, batch_id=0, files=[], appended=(1, 5, 50),
    ...                  finalized=0, now_ms=7)
    >>> first[TOTALS]["rows"], first[TOTALS]["batch"], first[UNCOUNTED]
    (5, 0, 0)
    >>> advanced({}, after=4, batch_id=5, files=[], appended=(1, 5, 50), finalized=0,
    ...          now_ms=7)[UNCOUNTED]  # batches 0-4: a release's that kept no totals
    5
    >>> advanced(first, after=3, batch_id=4, files=[], appended=(1, 5, 50),
    ...          finalized=0, now_ms=7)[UNCOUNTED]  # 1-3 committed without moving them on
    3
    """
    _, rows, size = appended
    before = extra.get(TOTALS) or {}
    added = {"rows": rows, "bytes": size,
             "filesCreated": sum(1 for f in files if f.new_records and f.records == f.new_records),
             "filesFinalized": finalized, "idleBatches": int(rows == 0)}
    totals: dict[str, Any] = {key: int(before.get(key, 0)) + value
                              for key, value in added.items()}
    refused = dict(refused or {})
    by_reason = Counter(before.get("quarantinedByReason") or {})
    by_reason.update(refused)
    if by_reason:  # (an output that never refused a row carries no such fields)
        totals.update(quarantined=sum(by_reason.values()),
                      quarantinedByReason=dict(sorted(by_reason.items())),
                      lastBatchQuarantined=sum(refused.values()))
    return {**extra, TOTALS: {**totals, "lastBatchFiles": len(files), "batch": batch_id,
                              "committedMs": now_ms},
            UNCOUNTED: int(extra.get(UNCOUNTED, 0)) + _uncounted(before, after)}


def _uncounted(before: dict[str, Any], after: int) -> int:
    """Batches up to ``after`` that totals ``before`` (carried by batch ``after``'s state)
    newly miss: all of them without totals; the gap past the batch they count through when a
    release that copies them unchanged committed the batches since. Totals without that mark
    were moved on by release 0.1.0, which counts every batch it commits."""
    if not before:
        return after + 1
    counted_through = before.get("batch")
    return 0 if counted_through is None else max(0, after - int(counted_through))


def gauges_of(state: SinkState) -> dict[str, int]:
    """The gauges that ``state``, the state after a committed batch, gives."""
    totals = state.extra.get(TOTALS) or {}
    open_files = state.in_progress
    in_progress_rows = sum(f.records for f in open_files)
    _, rows, size = state.appended
    gauges = {
        "batches-total": state.batch_id + 1, "batchId": state.batch_id,
        "batchesIdle-total": totals.get("idleBatches", 0), "rows-total": totals.get("rows", 0),
        "bytes-total": totals.get("bytes", 0),
        "filesCreated-total": totals.get("filesCreated", 0),
        "filesFinalized-total": totals.get("filesFinalized", 0),
        # every committed row is in a finalized file or in an open one
        "rowsFinalized-total": max(0, totals.get("rows", 0) - in_progress_rows),
        "batchesUncounted-total": uncounted(state),
        "rows-lastBatch": rows, "bytes-lastBatch": size,
        "files-lastBatch": totals.get("lastBatchFiles", 0),
        "filesFinalized-lastBatch": len(state.publish),
        "rowsQuarantined-total": totals.get("quarantined", 0),
        "rowsQuarantined-lastBatch": totals.get("lastBatchQuarantined", 0)
        if totals.get("batch") == state.batch_id else 0,
        "filesInProgress": len(open_files),
        "filesInProgress-bytes": sum(f.size for f in open_files),
        "filesInProgress-rows": in_progress_rows,
        "oldestInvisibleRow-timestampMs": min(
            (f.opened_ms for f in open_files if f.records), default=0),
    }
    if "committedMs" in totals:
        gauges["lastCommit-timestampMs"] = int(totals["committedMs"])
    return gauges


def uncounted(state: SinkState) -> int:
    """Batches up to ``state``'s that its totals do not count (see the module's docstring)."""
    totals = state.extra.get(TOTALS) or {}
    if not totals:
        return state.batch_id + 1
    return int(state.extra.get(UNCOUNTED, 0)) + _uncounted(totals, state.batch_id)
