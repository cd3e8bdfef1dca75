"""Named failpoints: places in the protocol where a test can make the code fail or die.

Inert unless armed. Arming works across processes (Spark runs our code in Python workers),
so the arming state lives in the ``ROTSINK_FAILPOINTS`` environment variable, inherited by
workers started after it is set, or in a file named by ``ROTSINK_FAILPOINTS_FILE`` that is read
on every hit, so a test can arm and disarm points while a query runs.

Syntax: ``name=action[:count],name2=action``. Actions:

* ``raise``: raise :class:`FailpointError` (a task failure, or a failed commit);
* ``kill``: ``os._exit(137)``, as a SIGKILL of this process would end it: no cleanup, no
  flush (on an executor: a Python worker dies; in Spark's commit worker: the commit dies);
* ``killall``: SIGKILL the process group named by ``ROTSINK_KILL_PGID`` (the crash-loop
  harness puts the driver, its JVM and everything it started in one group), then this
  process: the whole driver dies at this point, as a machine crash would end it.

``count`` limits which hits fire (default: every hit): ``N`` the first N hits of each
process; ``once`` the first hit across processes (a marker file created exclusively next to
``ROTSINK_FAILPOINTS_FILE``); ``xN`` the first N hits across processes (so ``raise:x2``
fails a task's first attempt and its first retry).
"""

from __future__ import annotations

import os
import signal

from commit_protocol.vocabulary.errors import FailpointError

ENV_VAR = "ROTSINK_FAILPOINTS"
FILE_ENV_VAR = "ROTSINK_FAILPOINTS_FILE"
KILL_PGID_ENV_VAR = "ROTSINK_KILL_PGID"

# Every failpoint, in protocol order, with where it runs. ``hit`` refuses other names, and a
# test checks that each one is reached, so the crash-loop harness can kill at every step.
TASK_POINTS = (
    "task.before_append",       # executor: an append is encoded, nothing written yet
    "task.mid_append",          # executor: half of an append's bytes written (a torn write)
    "task.after_append",        # executor: an append written in full
    "task.before_roll",         # executor: a size/record limit reached, file not yet closed
    "task.after_roll",          # executor: file closed (sealed), not yet reported
    "task.after_fence_copy",    # executor: committed prefix copied to a fresh temp file
    "task.after_resume",        # executor: a committed in-progress file reopened to append
    "task.before_sync",         # executor: every file released, bytes not yet fsynced
    "task.before_report",       # executor: bytes and names fsynced, report not yet returned
    "task.before_convert",      # executor: a staged (bulk) file rolled, not yet encoded
    "task.after_convert",       # executor: its finished file written at a fresh temp name
)
DRIVER_POINTS = (
    "driver.after_recover",     # driver (plan or commit): pending intents finished
    "driver.before_stage",      # driver: reports checked, intent not yet written
    "driver.after_stage",       # driver: intent written, nothing renamed
    "driver.before_rename",     # driver: before each rename of a finished file
    "driver.after_rename",      # driver: after each rename, log file not yet written
    "driver.before_mark",       # driver: before each partition's _SUCCESS marker
    "driver.after_mark",        # driver: after it, log file not yet written
    "driver.before_log_write",  # driver: every rename done
    "driver.after_log_write",   # driver: the batch is committed, housekeeping not yet run
    "driver.during_abort",      # driver: abort started, fresh temp files not yet deleted
    "driver.before_convert",    # driver: a staged file rolled by a commit rule, not encoded
    "driver.after_convert",     # driver: its finished file written, intent not yet staged
    "driver.schema_change",     # driver: a batch adding columns decided, intent not yet staged
)
LOG_POINTS = (
    "log.during_compaction",    # driver: half-way through streaming a .compact intent
    "cleanup.after_feed_keep",  # driver: states kept for change feeds, log files not deleted
    "cleanup.after_log_delete",   # driver: expired log files deleted, old intents not yet
    "cleanup.after_intent_delete",  # driver: old intents deleted, orphans not yet
    "cleanup.after_orphan_delete",  # driver: orphans deleted, claims not yet
)
TABLE_POINTS = (
    "table.before_commit",      # driver: the batch's log file published, the table not yet
    "table.after_schema",       # driver: the table's added columns committed (Delta: in the
                                # batch's table commit; Iceberg: at planning), its files not
    "table.after_commit",       # driver: the table commit made, housekeeping not yet run
    "table.before_follow",      # driver: another writer changed the table; listings not read
    "table.after_follow",       # driver: other writers' changes followed, the log not staged
    "table.before_expire",      # driver: Iceberg snapshots due for expiry, none expired yet
    "table.after_expire",       # driver: snapshots expired, the files only they named not deleted
)
QUARANTINE_POINTS = (
    "quarantine.before_commit",  # driver: a batch's refused rows checked, the quarantine's
                                 # commit of them not yet made
    "quarantine.after_commit",   # driver: the quarantine committed them, the output's log
                                 # not yet staged
)
ALL_POINTS = TASK_POINTS + DRIVER_POINTS + LOG_POINTS + TABLE_POINTS + QUARANTINE_POINTS

_hits: dict[str, int] = {}



def _armed_spec() -> str:
    spec = os.environ.get(ENV_VAR, "")
    path = os.environ.get(FILE_ENV_VAR)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                spec = ",".join(filter(None, [spec, f.read().strip()]))
        except FileNotFoundError:
            pass
    return spec


def parse(spec: str) -> dict[str, tuple[str, str | None]]:
    """``{name: (action, count)}`` of an armed spec; unknown names or actions fail loudly,
    so a typo in a test cannot arm nothing and pass.

    >>> parse("task.after_append=raise:x2,driver.after_stage=killall")
    {'task.after_append': ('raise', 'x2'), 'driver.after_stage': ('killall', None)}
    """
    armed: dict[str, tuple[str, str | None]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        action, _, count = action.partition(":")
        if name not in ALL_POINTS:
            raise ValueError(f"unknown failpoint {name!r} in {spec!r}")
        if (action or "raise") not in ("raise", "kill", "killall"):
            raise ValueError(f"failpoint {name}: unknown action {action!r}")
        armed[name] = (action or "raise", count or None)
    return armed


def _marker(name: str, index: int) -> str:
    base = os.environ.get(FILE_ENV_VAR, "/tmp/rotsink-failpoints")
    return f"{base}.{name}.fired" + (f".{index}" if index else "")


def _claim_marker(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _should_fire(name: str, count: str | None) -> bool:
    if count is None:
        return True
    if count == "once":
        return _claim_marker(_marker(name, 0))
    if count.startswith("x"):
        return any(_claim_marker(_marker(name, i)) for i in range(int(count[1:])))
    _hits[name] = _hits.get(name, 0) + 1
    return _hits[name] <= int(count)


def _kill_all() -> None:
    pgid = os.environ.get(KILL_PGID_ENV_VAR)
    if pgid:
        os.killpg(int(pgid), signal.SIGKILL)
    os._exit(137)  # not in that group (a Spark worker daemon makes its own): die anyway


def hit(name: str) -> None:
    """Pass the failpoint ``name``: do nothing unless a test armed it."""
    if name not in ALL_POINTS:
        raise ValueError(f"unknown failpoint {name!r}: add it to failpoints.ALL_POINTS")
    if not active():
        return
    armed = parse(_armed_spec())
    if name not in armed:
        return
    action, count = armed[name]
    if not _should_fire(name, count):
        return
    if action == "kill":
        os._exit(137)
    if action == "killall":
        _kill_all()
    raise FailpointError(f"failpoint {name!r} fired")


def active() -> bool:
    """Whether any failpoint could be armed in this process (cheap: two environment look-ups).

    Lets a hot path take a slower, failpoint-friendly route only under test.
    """
    return ENV_VAR in os.environ or FILE_ENV_VAR in os.environ
