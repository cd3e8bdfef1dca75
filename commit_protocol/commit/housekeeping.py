"""Deleting what no reader or writer needs any more, only after ``log.cleanupDelay``.

Runs on the driver after compaction commits (every ``log.compactInterval`` batches), so its
directory listings cost nothing on the other batches. The delay protects readers that listed
the log a moment ago and zombie tasks that may still write their temp files.
"""

from __future__ import annotations

import logging

from commit_protocol.log import MetadataLog
from commit_protocol.log.feed_states import delete_expired_segments, keep_states
from commit_protocol.log.files import is_compaction_batch
from commit_protocol.metrics import timed
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.state import SinkState
from commit_protocol.storage import FileInfo, Storage
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.naming import (
    CLAIMS_DIR,
    INPROGRESS_DIR,
    LOG_DIR,
    STATE_DIR,
    is_final_name,
)

logger = logging.getLogger("rotsink.commit")


@timed("cleanup")
def clean_up(storage: Storage, log: MetadataLog, state: SinkState, config: SinkConfig, *,
             now_ms: int) -> list[str]:
    """Delete expired log files, old intents, orphan temp files and old claims; return what
    was deleted."""
    if not is_compaction_batch(state.batch_id, config.compact_interval):
        return []
    expired_before = now_ms - config.cleanup_delay_ms
    expired = log.expired(latest=state.batch_id, now_ms=now_ms,
                          delay_ms=config.cleanup_delay_ms)
    deleted = []
    if config.feed_retention_ms is not None:  # kept for change feeds first
        keep_states(storage, readable_states(log, sorted(expired)), now_ms=now_ms)
        failpoints.hit("cleanup.after_feed_keep")
        deleted += delete_expired_segments(storage, retention_ms=config.feed_retention_ms,
                                           now_ms=now_ms)
    deleted += log.delete_expired(expired)
    failpoints.hit("cleanup.after_log_delete")
    deleted += log.delete_old_intents(latest=state.batch_id)
    failpoints.hit("cleanup.after_intent_delete")
    deleted += delete_orphans(storage, state, expired_before=expired_before)
    deleted += storage.abort_stale_uploads(expired_before, owned=rotsink_upload)
    failpoints.hit("cleanup.after_orphan_delete")
    claims = [c for c in storage.list(CLAIMS_DIR) if c.mtime_ms < expired_before]
    storage.delete_all(claims)
    return deleted + [c.path for c in claims]


def readable_states(log: MetadataLog, batch_ids: list[int]) -> list[SinkState]:
    """The states of the expired batches ``batch_ids``, to keep for change feeds. One that
    cannot be read is skipped with a WARNING, not raised: its log file is about to go, and
    the one way it gets there is a clean-up killed while deleting its group (log files are
    deleted in whole groups, :meth:`MetadataLog.expired`), which kept the group's states
    before deleting any. Raising would fail every later compaction batch, and the query
    with it, over files no reader needs."""
    states = []
    for batch_id in batch_ids:
        try:
            states.append(log.read_state(batch_id))
        except (CorruptLogError, FileNotFoundError) as e:
            logger.warning("clean-up: the state of expired batch %d is not kept for change "
                           "feeds (%s); its log file is deleted", batch_id, e)
    return states


def rotsink_upload(path: str) -> bool:
    """Whether a multipart upload to ``path`` (below the output's root) is one rotsink
    starts: a publish's compose of a finalized file, a log or state file. Only those are
    aborted when stale: another writer of a shared table may upload a big file into the
    output's directories for longer than ``log.cleanupDelay``.

    >>> rotsink_upload("day=1/part-00003-000012-000.parquet"), rotsink_upload(
    ...     "day=1/00000-0-4f2c6a52-1c3d-4b9f-9b7e-2a6f2b1e0c11.parquet")
    (True, False)
    >>> rotsink_upload("_spark_metadata/29.compact"), rotsink_upload("metadata/snap-1.avro")
    (True, False)
    """
    return path.startswith((f"{LOG_DIR}/", f"{STATE_DIR}/")) or is_final_name(path)


def orphans(storage: Storage, state: SinkState) -> list[FileInfo]:
    """Temp files that no committed state references (invisible to every reader)."""
    live = {f.temp for f in state.in_progress}
    return [i for i in storage.list(INPROGRESS_DIR) if i.path not in live]


def delete_orphans(storage: Storage, state: SinkState, *, expired_before: int) -> list[str]:
    """Delete orphans last written before ``expired_before`` (a zombie may own younger ones)."""
    expired = [i for i in orphans(storage, state) if i.mtime_ms < expired_before]
    storage.delete_all(expired)
    return [i.path for i in expired]
