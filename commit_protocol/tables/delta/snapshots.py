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
* checkpoints and the clean-up of expired log files run in that background refresh too, not
  in the commit (delta-rs's own post-commit hook is off).

Checkpoints follow Delta's rule: each of the process's commits whose version is a multiple
of the table's ``delta.checkpointInterval`` (:data:`CHECKPOINT_EVERY` where unset) is
checkpointed, as by Spark's writers (delta-rs's hook checkpoints where
``(version + 1) % interval == 0``). The property is read from the refreshed snapshot at every
commit: another writer may change it at any time. The log is cleaned as delta-rs's
``cleanup_metadata`` cleans it (files past ``delta.logRetentionDuration``, up to the
checkpoint the oldest version kept is read from) at each checkpoint and at least every
:data:`CLEANUP_EVERY_S`: files expire by time and checkpoints come by versions, so a table
with a long interval, few commits or a short retention would otherwise keep expired files
until its next checkpoint. ``delta.enableExpiredLogCleanup=false`` turns the clean-up off,
as for Delta's own writers.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deltalake import DeltaTable

CHECKPOINT_INTERVAL = "delta.checkpointInterval"
CHECKPOINT_EVERY = 100  # versions: its default, Delta's and delta-rs's
LOG_CLEANUP = "delta.enableExpiredLogCleanup"  # "false": no clean-up (true by default)
CLEANUP_EVERY_S = 24 * 3600  # the longest between two clean-ups of the log
logger = logging.getLogger("rotsink.table")


def checkpoint_interval(configuration: Mapping[str, str]) -> int | None:
    """The table's ``delta.checkpointInterval`` (:data:`CHECKPOINT_EVERY` where unset), from
    its configuration; None where it is not a positive integer.

    >>> checkpoint_interval({"delta.checkpointInterval": "10"}), checkpoint_interval({})
    (10, 100)
    >>> [checkpoint_interval({"delta.checkpointInterval": v}) for v in ("0", "-5", "ten")]
    [None, None, None]
    """
    value = configuration.get(CHECKPOINT_INTERVAL)
    if value is None:
        return CHECKPOINT_EVERY
    if not (value.isascii() and value.isdigit()) or int(value) == 0:
        return None
    return int(value)


def log_cleanup_enabled(configuration: Mapping[str, str]) -> bool:
    """Whether the table lets its writers clean its log (``delta.enableExpiredLogCleanup``).

    >>> log_cleanup_enabled({}), log_cleanup_enabled({"delta.enableExpiredLogCleanup": "False"})
    (True, False)
    """
    return configuration.get(LOG_CLEANUP, "true").strip().lower() != "false"


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
    # time.monotonic() of the last clean-up of the log; None: none yet, so the first refresh
    # cleans. Counting a day from the snapshot's creation instead would never clean from a
    # driver that lives less than a day (a scheduled availableNow run, frequent restarts);
    # one clean-up per process start costs a LIST of the log
    cleaned_at: float | None = None
    bad_interval: str | None = None  # the invalid checkpointInterval last warned of

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
            self._maintenance(version)
        except Exception as e:  # noqa: BLE001 -- the next commit refreshes and reads again
            self.marks_version = -1
            logger.warning("table delta: refreshing the snapshot after version %d failed "
                           "(%s: %s); the next commit reads the table again", version,
                           type(e).__name__, e)

    def _maintenance(self, version: int) -> None:
        """Checkpoint ``version`` (this process's commit) where the table's interval asks,
        and clean the log with it or once :data:`CLEANUP_EVERY_S` passed (runs in the
        background refresh, the snapshot at its newest version)."""
        configuration = self.table.metadata().configuration  # in memory: no request
        checkpoint = (self.table.version() == version  # not a version another writer made
                      and version % self._checkpoint_interval(configuration) == 0)
        if checkpoint:
            self.table.create_checkpoint()
        now = time.monotonic()
        due = self.cleaned_at is None or now - self.cleaned_at >= CLEANUP_EVERY_S
        if (checkpoint or due) and log_cleanup_enabled(configuration):
            # taken before: a clean-up that fails is tried again at the next checkpoint or
            # period, not at every commit (each lists the whole log)
            self.cleaned_at = now
            self.table.cleanup_metadata()

    def _checkpoint_interval(self, configuration: Mapping[str, str]) -> int:
        """The table's interval, or the default with a warning (once per value, not at
        every commit) where it is not a positive integer: a commit does not fail on it."""
        interval = checkpoint_interval(configuration)
        if interval is not None:
            return interval
        value = configuration[CHECKPOINT_INTERVAL]
        if value != self.bad_interval:
            self.bad_interval = value
            logger.warning("table delta: %s: %s=%r is not a positive integer; rotsink "
                           "checkpoints every %d versions (the default)", self.table.table_uri,
                           CHECKPOINT_INTERVAL, value, CHECKPOINT_EVERY)
        return CHECKPOINT_EVERY


# This process's snapshot of each table, by URI and storage options: one an output (a driver
# writes a few), each as large as its table's live files, not its history.
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
