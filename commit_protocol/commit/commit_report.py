"""What a commit tells operators: one INFO line per committed batch (tasks, rows and bytes
appended, files finalized and why, files in progress, partitions completed, commit time),
and one for the temp files its clean-up deleted. Never key bytes: keys are references.

Deleting temp files no committed state names is routine, so it is INFO: most are the staged
rows of Parquet and ORC files finished since (the finished file is encoded to a fresh temp,
and readers that planned before the roll may still read the staged rows until
``log.cleanupDelay``), or copies a seal or a fence replaced. What the protocol defends against
is warned where it happens: a zombie's claim (the commit's fence, a task's fresh copy), a
commit finished by a later driver."""

from __future__ import annotations

import logging
from collections import Counter

from commit_protocol.commit.merge import Merged
from commit_protocol.records.state import SinkState
from commit_protocol.vocabulary.naming import INPROGRESS_DIR

logger = logging.getLogger("rotsink.commit")


def log_commit(batch_id: int, merged: Merged, state: SinkState, deleted: list[str],
               seconds: float) -> None:
    """The INFO line of a committed batch, and one for the temp files its clean-up deleted."""
    tasks, rows, size = state.appended
    rolled = Counter(f.reason for f in merged.finalized)
    why = ", ".join(f"{n} by {reason}" for reason, n in sorted(rolled.items()))
    layout = (f"partitioned by {', '.join(state.partitioned_by)}" if state.partitioned_by
              else "not partitioned")
    logger.info("batch %d committed in %.0f ms: %d task(s), %d row(s), %d byte(s) appended "
                "(%s); %d file(s) finalized%s; %d in progress%s", batch_id, seconds * 1000,
                tasks, rows, size, layout, len(merged.finalized), f" ({why})" if why else "",
                len(state.in_progress),
                f"; partitions complete: {', '.join(state.markers)}" if state.markers else "")
    temps = [p for p in deleted if p.startswith(INPROGRESS_DIR)]
    if temps:
        logger.info("batch %d: deleted %d temp file(s) no committed state names, older than "
                    "log.cleanupDelay (staged rows of files finished since, replaced copies, "
                    "failed attempts)", batch_id, len(temps))
