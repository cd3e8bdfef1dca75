"""What ``abort`` of a micro-batch may delete: Spark calls it after an error at any step of
the batch, even after the commit point (a table commit or a clean-up that failed), so it
deletes only the fresh files that no committed log file and no staged intent names.

* A batch whose log file exists is committed, whatever happened after: the in-progress files
  it names hold committed rows, and a replay continues them.
* A batch whose intent exists is decided: the next start rolls it forward, renaming the
  files the intent names (:meth:`Committer.recover`).
* Otherwise nothing of the batch was ever visible: its fresh files go, and the bytes its tasks
  appended to committed in-progress files past their committed offsets are fenced off by the
  next task that continues them.

What abort cannot tell apart it keeps (the log unreadable, say): keeping a file is always
safe, since the clean-up deletes temp files no committed state names after
``log.cleanupDelay``.
"""

from __future__ import annotations

import logging

from commit_protocol.log import MetadataLog
from commit_protocol.records.messages import TaskReport
from commit_protocol.storage import Storage

logger = logging.getLogger("rotsink.commit")


def drop_fresh_files(storage: Storage, log: MetadataLog, batch_id: int,
                     messages: list[TaskReport | None]) -> None:
    """Delete the fresh files of ``messages`` (started by this batch, or encoded by its
    tasks) that batch ``batch_id``'s log file or intent does not name."""
    fresh = [path for message in messages if message is not None for f in message.files
             for path in (f.final_temp,) + ((f.temp,) if f.start == 0 and
                                             f.fenced_from is None else ())
             if path is not None]
    if not fresh:
        return
    try:
        named = named_by(storage, log, batch_id)
    except Exception as e:  # noqa: BLE001  keeping a file is always safe: see above
        logger.warning("batch %d: abort keeps its %d fresh file(s): whether the batch is "
                       "committed could not be read (%s: %s); the clean-up deletes them after "
                       "log.cleanupDelay if nothing names them", batch_id, len(fresh),
                       type(e).__name__, e)
        return
    if named:
        logger.warning("batch %d: aborted after its commit was decided; the files its log "
                       "file or intent names stay", batch_id)
    for path in fresh:
        if path not in named:
            storage.delete(path)


def named_by(storage: Storage, log: MetadataLog, batch_id: int) -> frozenset[str]:
    """The temp files the log file of ``batch_id`` (committed) or its intent (decided) names:
    in progress after it, or renamed by it; none when neither exists, or when another query
    wrote it (its files are not this batch's)."""
    for path, read in ((log.path_of(batch_id), log.read_state),
                       (log.intent_path(batch_id), log.read_intent_state)):
        if storage.exists(path):
            state = read(batch_id)
            return frozenset([f.temp for f in state.in_progress]
                             + [p.temp for p in state.publish])
    return frozenset()
