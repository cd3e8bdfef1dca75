"""Deleting what no reader or writer needs any more, only after ``log.cleanupDelay``.

Runs on the driver after compaction commits (every ``log.compactInterval`` batches), so its
directory listings cost nothing on the other batches. The delay protects readers that listed
the log a moment ago and zombie tasks that may still write their temp files.
"""

from __future__ import annotations

from commit_protocol.log import MetadataLog
from commit_protocol.log.feed_states import delete_expired_segments, keep_states
from commit_protocol.log.files import is_compaction_batch
from commit_protocol.metrics import timed
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.state import SinkState
from commit_protocol.storage import FileInfo, Storage
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.naming import CLAIMS_DIR, INPROGRESS_DIR


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
        keep_states(storage, [log.read_state(b) for b in sorted(expired)], now_ms=now_ms)
        failpoints.hit("cleanup.after_feed_keep")
        deleted += delete_expired_segments(storage, retention_ms=config.feed_retention_ms,
                                           now_ms=now_ms)
    deleted += log.delete_expired(expired)
    failpoints.hit("cleanup.after_log_delete")
    deleted += log.delete_old_intents(latest=state.batch_id)
    failpoints.hit("cleanup.after_intent_delete")
    deleted += delete_orphans(storage, state, expired_before=expired_before)
    deleted += storage.abort_stale_uploads(expired_before)  # a dead publish's upload
    failpoints.hit("cleanup.after_orphan_delete")
    claims = [c for c in storage.list(CLAIMS_DIR) if c.mtime_ms < expired_before]
    storage.delete_all(claims)
    return deleted + [c.path for c in claims]


def orphans(storage: Storage, state: SinkState) -> list[FileInfo]:
    """Temp files that no committed state references (invisible to every reader)."""
    live = {f.temp for f in state.in_progress}
    return [i for i in storage.list(INPROGRESS_DIR) if i.path not in live]


def delete_orphans(storage: Storage, state: SinkState, *, expired_before: int) -> list[str]:
    """Delete orphans last written before ``expired_before`` (a zombie may own younger ones)."""
    expired = [i for i in orphans(storage, state) if i.mtime_ms < expired_before]
    storage.delete_all(expired)
    return [i.path for i in expired]
