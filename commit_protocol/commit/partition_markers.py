"""``partition.commitDelay``: which partition directories a commit marks complete (``_SUCCESS``).

Decided in the commit and recorded in its state (the committer writes the markers before the
log file), so a roll-forward writes exactly these and a replay none.
"""

from __future__ import annotations

from dataclasses import replace

from commit_protocol.commit.merge import Merged
from commit_protocol.records.messages import TaskReport
from commit_protocol.records.state import SinkState


def complete_partitions(state: SinkState, reports: list[TaskReport], merged: Merged,
                        now_ms: int, delay_ms: int) -> SinkState:
    """``state`` with this batch's markers: directories that had rows, have no in-progress
    file now and no new row for ``delay_ms``. A directory is tracked again if rows arrive
    later: its marker already exists and is never rewritten."""
    last_rows = dict(state.open_partitions)
    for report in reports:
        for f in report.files:
            if f.new_records:
                last_rows[f.directory] = now_ms
    busy = {f.directory for f in merged.in_progress}
    complete = tuple(sorted(d for d, at in last_rows.items()
                            if d not in busy and now_ms - at >= delay_ms))
    open_partitions = tuple(sorted((d, at) for d, at in last_rows.items()
                                   if d not in complete))
    return replace(state, open_partitions=open_partitions, markers=complete)
