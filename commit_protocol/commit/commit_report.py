"""What a commit tells operators: one INFO line per committed batch (tasks, rows and bytes
appended, files finalized and why, files in progress, partitions completed, commit time),
and a WARNING for orphan temp files it deleted. Never key bytes: keys are references."""

from __future__ import annotations

import logging
from collections import Counter

from commit_protocol.commit.merge import Merged
from commit_protocol.records.state import SinkState
from commit_protocol.vocabulary.naming import INPROGRESS_DIR

logger = logging.getLogger("rotsink.commit")


def log_commit(batch_id: int, merged: Merged, state: SinkState, deleted: list[str],
               seconds: float) -> None:
    """The INFO line of a committed batch (and a WARNING for orphans deleted)."""
    tasks, rows, size = state.appended
    rolled = Counter(f.reason for f in merged.finalized)
    why = ", ".join(f"{n} by {reason}" for reason, n in sorted(rolled.items()))
    layout = (f"partitioned by {', '.join(state.partition_by)}" if state.partition_by
              else "not partitioned")
    logger.info("batch %d committed in %.0f ms: %d task(s), %d row(s), %d byte(s) appended "
                "(%s); %d file(s) finalized%s; %d in progress%s", batch_id, seconds * 1000,
                tasks, rows, size, layout, len(merged.finalized), f" ({why})" if why else "",
                len(state.in_progress),
                f"; partitions complete: {', '.join(state.markers)}" if state.markers else "")
    orphans = [p for p in deleted if p.startswith(INPROGRESS_DIR)]
    if orphans:
        logger.warning("batch %d: deleted %d orphan temp file(s) older than log.cleanupDelay "
                       "(failed attempts, zombies, fenced files)", batch_id, len(orphans))
