"""``rotsink verify --repair``: finish what a dead driver left decided but undone.

Its stalled commits (intents past the latest log file that no live driver is publishing,
:mod:`commit_protocol.checks.in_flight`) are rolled forward exactly as the query's next planning
would, then a table that follows the log (``table.format``) is brought up to it. A driver that
wakes after all finishes the same steps beside it, which every step allows.
"""

from __future__ import annotations

from collections.abc import Callable

from commit_protocol.checks.in_flight import PendingIntent, intent_state, settle
from commit_protocol.commit.committer import Committer
from commit_protocol.log import open_committed
from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import Storage
from commit_protocol.tables.recorded import table_config
from commit_protocol.vocabulary.errors import RotsinkError


def repair_output(storage: Storage, problems: list[str], timeout_s: float,
                  on_wait: Callable[[PendingIntent], None] | None,
                  fs_options: dict[str, str] | None) -> list[int]:
    """Roll stalled intents forward as the query's next commit would, then catch up a table
    that follows the log; the ids published. Commits in flight are waited for, never
    finished here: their driver is alive. Should it wake after all, both finish the same
    intent (or table commit), which every step allows."""
    stalled = settle(storage, timeout_s=timeout_s, on_wait=on_wait)
    after = None
    try:
        if stalled:
            state = intent_state(storage, stalled[0].name, stalled[0].batch_id)
            config = SinkConfig(path=storage.root_uri, compact_interval=state.compact_interval)
            after = Committer(storage, config, state.schema_json).recover(
                only={intent.batch_id for intent in stalled})
        _catch_up_table(storage, fs_options)
    except (RotsinkError, OSError) as e:  # e.g. a renamed file is gone: report, never guess
        problems.append(f"{storage.root_uri}: cannot repair ({type(e).__name__}: {e})")
        return []
    return [i.batch_id for i in stalled if after is not None and i.batch_id <= after]


def _catch_up_table(storage: Storage, fs_options: dict[str, str] | None) -> None:
    """Bring a table that follows the log up to the latest batch (a driver killed between
    the log file and the table commit left it behind)."""
    committed = open_committed(storage)
    if committed is None:
        return
    log, latest, state = committed
    config = table_config(storage, state, fs_options)
    if config is not None:
        # the log's schema alone: a batch planned since may have given the table its columns
        Committer(storage, config, state.schema_json).start_table(state, planned_columns=True)
