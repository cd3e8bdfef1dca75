"""The totals a query's log carries, and the gauges a committed state gives.

Each batch's state carries the output's running totals (``extra["totals"]``, beside the
fields older writers ignore), so a query restarted after its driver died goes on counting
from the log instead of from 0, and the gauges of a query that has not committed since its
start can be read from the log alone (:func:`gauges_of`). An output written before the totals
existed counts them from its first batch that carries them; ``batches-total`` is always whole
(the batch id says it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from commit_protocol.messages import FileReport
    from commit_protocol.state import SinkState

TOTALS = "totals"


def advanced(extra: dict[str, Any], files: Sequence[FileReport], appended: tuple[int, int, int],
             finalized: int) -> dict[str, Any]:
    """``extra`` with the totals moved on by one batch: its tasks' ``files`` and what they
    ``appended`` (tasks, rows, bytes, as the state records it), and the ``finalized`` files
    its commit publishes."""
    _, rows, size = appended
    before = extra.get(TOTALS) or {}
    added = {"rows": rows, "bytes": size,
             "filesCreated": sum(1 for f in files if f.new_records and f.records == f.new_records),
             "filesFinalized": finalized, "idleBatches": int(rows == 0)}
    totals = {key: int(before.get(key, 0)) + value for key, value in added.items()}
    return {**extra, TOTALS: {**totals, "lastBatchFiles": len(files)}}


def gauges_of(state: SinkState) -> dict[str, int]:
    """The gauges that ``state``, the state after a committed batch, gives."""
    totals = state.extra.get(TOTALS) or {}
    open_files = state.in_progress
    _, rows, size = state.appended
    return {
        "batches-total": state.batch_id + 1, "batchId": state.batch_id,
        "batchesIdle-total": totals.get("idleBatches", 0), "rows-total": totals.get("rows", 0),
        "bytes-total": totals.get("bytes", 0),
        "filesCreated-total": totals.get("filesCreated", 0),
        "filesFinalized-total": totals.get("filesFinalized", 0),
        "rows-lastBatch": rows, "bytes-lastBatch": size,
        "files-lastBatch": totals.get("lastBatchFiles", 0),
        "filesFinalized-lastBatch": len(state.publish),
        "filesInProgress": len(open_files),
        "filesInProgress-bytes": sum(f.size for f in open_files),
        "filesInProgress-rows": sum(f.records for f in open_files),
        "oldestInvisibleRow-timestampMs": min(
            (f.opened_ms for f in open_files if f.records), default=0),
    }
