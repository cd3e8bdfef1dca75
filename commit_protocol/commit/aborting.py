"""What ``abort`` of a micro-batch does with the files the batch's tasks wrote: nothing.

Spark calls ``abort`` after an error at any step of the batch, even after the commit point (a
table commit or a clean-up that failed), and after an error whose outcome is unknown: a
request that timed out on the client may still reach the store, later (a network that holds
it, a store that answers late). So abort cannot know from the log whether the batch's commit
is decided: the intent it finds missing now may be created a moment later by the commit's
own request, naming the very files abort would delete (on Cloud Storage, with a client
timeout below a slow answer, that wedged the query: every restart found a committed file
missing). The fresh files therefore stay: a replay writes files of its own, a late intent
rolls the earlier attempt's files forward, and the clean-up deletes the temp files no
committed state names after ``log.cleanupDelay`` (a failed batch's files cost disk space
until then, never a reader's row: no reader lists a temp file).

The bytes its tasks appended to committed in-progress files past their committed offsets are
fenced off by the next task that continues them.
"""

from __future__ import annotations

import logging

from commit_protocol.records.messages import TaskReport

logger = logging.getLogger("rotsink.commit")


def keep_fresh_files(batch_id: int, messages: list[TaskReport | None]) -> None:
    """Say what the abort of ``batch_id`` leaves to the clean-up (see the module docstring)."""
    fresh = [path for message in messages if message is not None for f in message.files
             for path in (f.final_temp,) + ((f.temp,) if f.start == 0 and
                                             f.fenced_from is None else ())
             if path is not None]
    if fresh:
        logger.info("batch %d aborted: its %d fresh file(s) stay until the clean-up deletes "
                    "those no commit names (after log.cleanupDelay)", batch_id, len(fresh))
