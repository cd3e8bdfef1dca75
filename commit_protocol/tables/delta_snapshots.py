"""delta-rs snapshots of a table kept in this process, with what they are known to hold.

Two delta-rs costs shape a commit per micro-batch. ``transaction_version`` scans every commit
since the last checkpoint (on an object store, a GET per commit: up to a hundred), and a
``DeltaTable`` is not moved by its own commits, so committing again from it means refreshing
it first (a LIST and a GET, in the commit's path). A process that makes the table's commits
knows better:

* the batch its own commit carried is the table's high-water mark at the version that commit
  made: a snapshot at that version answers from memory (any other version is scanned);
* it refreshes the snapshot to the version of its own commit right after it, in the
  background, while the next micro-batch runs; the next commit waits for that refresh (long
  done), and commits with no retry at exactly the next version, so a commit another writer
  made meanwhile fails it, and then the snapshot is refreshed and the mark read afresh;
* checkpoints (every :data:`CHECKPOINT_EVERY` versions, as Delta's default) and the clean-up
  of expired log files run in that background refresh too, not in the commit.
"""

from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deltalake import DeltaTable

CHECKPOINT_EVERY = 100  # versions: delta.checkpointInterval's default
logger = logging.getLogger("rotsink.table")


@dataclass
class Snapshot:
    """One table's snapshot in this process; ``marks`` (owner -> batch) hold at version
    ``marks_version``."""

    table: DeltaTable
    marks: dict[str, int | None] = field(default_factory=dict)
    marks_version: int = -1
    refreshing: threading.Thread | None = None
    # held by a commit from reading the mark to remembering what it committed: two threads
    # of one process (a query and a `verify --repair`, two drivers played in a test) share
    # the snapshot and take their turns; the background refresh never takes it
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def ready(self) -> DeltaTable:
        """The table, once a background refresh is done."""
        with self.lock:
            if self.refreshing is not None:
                self.refreshing.join()
                self.refreshing = None
            return self.table

    def refresh(self) -> None:
        """To the newest version now (a LIST, and a GET per new commit)."""
        with self.lock:
            self.ready().update_incremental()

    def mark(self, owner: str) -> int | None:
        """The newest batch of ``owner`` the snapshot's version holds."""
        with self.lock:
            version = self.ready().version()
            if version != self.marks_version:
                self.marks, self.marks_version = {}, version
            if owner not in self.marks:
                self.marks[owner] = self.table.transaction_version(owner)
            return self.marks[owner]

    def committed(self, owner: str, batch_id: int, version: int) -> None:
        """This process committed ``owner``'s batch ``batch_id`` as ``version``: remember
        it, and bring the snapshot there in the background."""
        with self.lock:
            self.marks, self.marks_version = {owner: batch_id}, version
            refreshing = threading.Thread(target=self._catch_up, args=(version,), daemon=True,
                                          name="rotsink-delta-refresh")
            refreshing.start()  # before it is seen: ready() joins only a started thread
            self.refreshing = refreshing

    def _catch_up(self, version: int) -> None:
        try:
            self.table.update_incremental()
            if version % CHECKPOINT_EVERY == 0 and self.table.version() == version:
                self.table.create_checkpoint()
                self.table.cleanup_metadata()
        except Exception as e:  # noqa: BLE001 -- the next commit refreshes and reads again
            self.marks_version = -1
            logger.warning("table delta: refreshing the snapshot after version %d failed "
                           "(%s: %s); the next commit reads the table again", version,
                           type(e).__name__, e)


_SNAPSHOTS: dict[tuple[str, tuple[tuple[str, str], ...]], Snapshot] = {}


@atexit.register
def _finish_refreshes() -> None:
    """A refresh still running in delta-rs when the interpreter exits crashes it: wait."""
    for known in list(_SNAPSHOTS.values()):
        known.ready()


def snapshot(uri: str, options: dict[str, str], *, fresh: bool) -> Snapshot | None:
    """This process's snapshot of the table at ``uri`` (loaded if it has none; brought to the
    newest version first when ``fresh``); None when there is no table."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    key = (uri, tuple(sorted(options.items())))
    known = _SNAPSHOTS.get(key)
    if known is not None:
        if fresh:
            known.refresh()
        return known
    try:
        table = DeltaTable(uri, storage_options=options or None)
    except TableNotFoundError:
        return None
    _SNAPSHOTS[key] = known = Snapshot(table)
    return known


def forget_all() -> None:
    """Drop every snapshot (tests that play a new driver process)."""
    for known in _SNAPSHOTS.values():
        known.ready()
    _SNAPSHOTS.clear()


def forget(uri: str, options: dict[str, str]) -> None:
    """Drop the snapshot (the table was created, or replaced): the next use loads it."""
    known = _SNAPSHOTS.pop((uri, tuple(sorted(options.items()))), None)
    if known is not None:
        known.ready()
