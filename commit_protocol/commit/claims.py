"""The commit's fence against late attempts: claims of the task partitions whose committed
attempt did not take one.

Only the holder of a (batch, task partition) claim appends in place to that partition's
committed in-progress files (see :mod:`commit_protocol.task.task_writer`). A task attempt that
arrives after its batch was committed (a zombie of a stopped run, a straggler) would win a
claim nobody took, so the commit takes the claim of every partition with in-progress files
its committed attempt did not claim; where some other attempt holds it, those files continue
from copies at fresh temp names (Apex's fence) and the other attempt's appends land in
orphans. Claims and copies are independent: they go out together on object stores.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from commit_protocol.records.messages import TaskReport
from commit_protocol.records.state import InProgressFile, Slot
from commit_protocol.storage import Storage
from commit_protocol.storage.concurrent import each
from commit_protocol.vocabulary.naming import partition_claim, temp_name

logger = logging.getLogger("rotsink.commit")


def fence_unclaimed(storage: Storage, slots: dict[Slot, InProgressFile],
                    reports: list[TaskReport], batch_id: int) -> dict[Slot, InProgressFile]:
    """Take the claim of each partition with in-progress files that its committed attempt
    did not claim; where another attempt holds it, continue those files from copies."""
    touched = {f.slot for r in reports for f in r.files}
    claimed = {r.partition for r in reports if r.claimed}
    idle = {slot for slot in slots if slot not in touched and slot[0] not in claimed}
    partitions = sorted({slot[0] for slot in idle})
    won = each(storage, lambda p: storage.create_marker(
        partition_claim(batch_id, p)), partitions)
    lost = {p for p, took in zip(partitions, won, strict=True) if not took}
    if lost:
        logger.warning("batch %d: another attempt holds the claim of task partition(s) %s "
                       "(a zombie or a straggler): their in-progress files continue from "
                       "fresh copies", batch_id, sorted(lost))

    def copy(f: InProgressFile) -> InProgressFile:
        fresh = temp_name(f.name)
        storage.copy_prefix(f.temp, fresh, f.size)
        return replace(f, temp=fresh)

    moved = sorted(s for s in idle if s[0] in lost)
    return {**slots, **dict(zip(moved, each(storage, copy, [slots[s] for s in moved]),
                                strict=True))}
