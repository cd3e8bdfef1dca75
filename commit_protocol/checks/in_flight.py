"""Commits in flight: telling a live driver's commit from a dead one's, from outside the query.

A commit that renames files stages its intent first and publishes its log file last (steps 4
to 6 of :mod:`commit_protocol.commit.committer`). An intent past the latest log file is therefore a
commit *in flight* -- a live driver renaming, marking, writing the log file -- or one whose
driver died in between. Nothing on storage says which at one moment, so ``rotsink verify``
(and ``--repair``, which must never roll forward a commit a live driver is making) decide by
time:

* an intent younger than the *commit timeout* is in flight: its renamed files are explained
  by it, and verify waits for its log file (polling; a published intent ends the wait at
  once) instead of calling it a problem;
* an intent that stays unpublished past the timeout is *stalled*: its driver died (or hangs
  longer than any commit takes), which verify reports and ``--repair`` finishes.

The age is the intent's modification time on storage against this machine's clock (a local
disk shares it; an object store's clock is kept within seconds of it by the same NTP that
request signing needs). The default timeout, a minute, is far beyond the seconds a commit
takes between its intent and its log file even on an object store with many files to rename;
a caller that knows the driver is gone (a crash harness, a user who stopped the query) passes
0 and gets every pending intent as stalled at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from commit_protocol.log import MetadataLog, open_committed
from commit_protocol.log.files import batch_id_of, log_file_names
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.naming import INTENT_DIR

COMMIT_TIMEOUT_S = 60.0
POLL_S = 0.1  # how often a wait for a commit in flight looks again


@dataclass(frozen=True)
class PendingIntent:
    """An intent past the latest log file: a decided commit not yet published."""

    batch_id: int
    path: str
    name: str
    age_s: float

    def in_flight(self, timeout_s: float) -> bool:
        """Whether a live driver may still be publishing it (see the module's docstring).

        >>> PendingIntent(3, "_rotsink/intent/3", "3", 2.0).in_flight(60.0)
        True
        >>> PendingIntent(3, "_rotsink/intent/3", "3", 61.0).in_flight(60.0)
        False
        """
        return self.age_s < timeout_s

    def stalled_problem(self) -> str:
        """The line verify reports for a stalled intent."""
        return (f"{self.path}: batch {self.batch_id} was decided {self.age_s:.0f} s ago but "
                "not published (its driver died during the commit): restart the query or run "
                "`rotsink verify --repair`")


def pending_intents(storage: Storage, latest: int | None, *,
                    now_s: float | None = None) -> list[PendingIntent]:
    """The intents past ``latest`` (every intent when None), by batch id. Intents at or
    below it belong to published commits (clean-up deletes them later)."""
    now_s = time.time() if now_s is None else now_s
    pending = []
    for info in storage.list(INTENT_DIR):
        name = info.path.rsplit("/", 1)[-1]
        batch_id = batch_id_of(name)
        if batch_id is None or (latest is not None and batch_id <= latest):
            continue
        pending.append(PendingIntent(batch_id, info.path, name,
                                     max(0.0, now_s - info.mtime_ms / 1000)))
    return sorted(pending, key=lambda p: p.batch_id)


def settle(storage: Storage, *, timeout_s: float,
           on_wait: Callable[[PendingIntent], None] | None = None) -> list[PendingIntent]:
    """Wait until no commit is in flight: each pending intent is published or stalls (ages
    past ``timeout_s``). Returns the stalled ones, which no live driver is publishing.

    ``on_wait`` is told once about each intent waited for (the command line says why it
    pauses).
    """
    told: set[str] = set()
    while True:
        names = log_file_names(storage)
        pending = pending_intents(storage, max(names, default=None))
        waiting = [p for p in pending if p.in_flight(timeout_s)]
        if not waiting:
            return pending
        for intent in waiting:
            if on_wait is not None and intent.path not in told:
                on_wait(intent)
            told.add(intent.path)
        time.sleep(min(POLL_S, max(0.001, timeout_s - max(p.age_s for p in waiting))))


def intent_state(storage: Storage, name: str, batch_id: int) -> SinkState:
    """The state the intent ``name`` of batch ``batch_id`` decided.

    An intent holds what changed since the batch before, and rebuilding the whole state may
    walk back through the log files to the last compaction: the log is opened with the
    path's own interval (the committed state's), since the files to walk back through are
    found by it. Only before any commit is the interval guessed from the intent's name (the
    first batch's intent holds a whole state)."""
    committed = open_committed(storage)
    log = committed[0] if committed is not None else \
        MetadataLog(storage, compact_interval=_naming_interval(name, batch_id))
    return log.read_intent_state(batch_id)


def _naming_interval(name: str, batch_id: int) -> int:
    """A compaction interval under which batch ``batch_id``'s log file is called ``name``
    (to find the file; the state in it then says the path's real interval).

    >>> _naming_interval("9.compact", 9), _naming_interval("12", 12)
    (10, 14)
    """
    return batch_id + 1 if name.endswith(".compact") else batch_id + 2
