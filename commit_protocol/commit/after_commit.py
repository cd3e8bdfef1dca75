"""The steps after the commit point: batch N is committed once ``_spark_metadata/N`` exists,
whatever they do.

What follows the log file (the table commit, the clean-up) can still fail: a store answers
503 after its client gave up retrying, a catalog times out, a library raises. An error there
is not a kill. Spark sees the commit fail and calls ``abort`` for the epoch, which keeps
every file a committed log file names (:meth:`Committer.abort`); so nothing here can undo the
batch, and each step only decides how long to keep trying and what to tell the operator:

* every step is tried again after a transient error, with backoff (:data:`RETRY_DELAYS_S`,
  about 7.5 s beyond the clients' own retries). Errors rotsink raises on purpose
  (``RotsinkError``: a refusal, a failpoint) are not retried, a retry would say the same,
  unless they only wrap a store's or a library's error (:func:`transient`). They fail the
  commit as they are, beside an ERROR line saying that the batch is committed;
* the **table commit** that still fails fails the query with :class:`AfterCommitError`,
  naming the batch, the step, the cause and what to do. A table behind its log is what a
  reader of the table would miss, so the query stops rather than run on without it. Spark had
  not recorded the batch, so the restart replays it, and the replay catches the table up
  (:meth:`Committer.commit`), as the start after a kill does;
* **housekeeping** that still fails (deleting expired log files, intents, orphans, claims) is
  a WARNING and waits for the next compaction batch, whose clean-up lists what is due afresh:
  a failed DELETE never fails a committed batch, as Spark's own file sink does with its log's
  clean-up and as the table's own maintenance does here
  (:meth:`~commit_protocol.tables.follow.TableFollower._maintain`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from commit_protocol.metrics import count
from commit_protocol.records.config import SinkConfig
from commit_protocol.vocabulary.errors import AfterCommitError, RotsinkError

logger = logging.getLogger("rotsink.commit")
T = TypeVar("T")

# Waits between the attempts of a step (then it has failed): the clients retry each request
# themselves for seconds to a minute (botocore in s3fs, gcsfs, Azure's storage SDK), so an error
# that reaches rotsink has lasted that long already; 7.5 s more covers a store's slow-down
# or a catalog's restart without holding a stream up for long.
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)


def table_step(config: SinkConfig) -> str:
    """The table step's name in what an operator reads.

    >>> table_step(SinkConfig(path="/out", table_format="delta"))
    'table commit (delta)'
    """
    return f"table commit ({config.table_format})"


def transient(error: BaseException) -> bool:
    """Whether an error of a step may pass if the step is tried again: anything but an error
    rotsink raised on purpose (which names a refusal, and would name it again), unless that
    error only names a library's or a store's (``raise TableError(...) from e``: delta-rs
    failing a listing after its own retries).

    >>> transient(OSError("503 SlowDown")), transient(RotsinkError("refused"))
    (True, False)
    >>> try:
    ...     raise RotsinkError("the Delta commit failed") from OSError("503")
    ... except RotsinkError as e:
    ...     transient(e)
    True
    """
    if isinstance(error, RotsinkError):
        return error.__cause__ is not None and transient(error.__cause__)
    return isinstance(error, Exception)


def tried(step: str, batch_id: int, run: Callable[[], T], *, then: str = "",
          sleep: Callable[[float], None] = time.sleep) -> T:
    """``run()``, tried again after each transient error while :data:`RETRY_DELAYS_S` last;
    an error that remains is raised as :class:`AfterCommitError` naming ``step`` and what
    catches it up (``then``; by default the replay of the batch). An error rotsink raised on
    purpose is raised at once, as it was, with that said in an ERROR line."""
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return run()
        except Exception as e:  # every kind a store, a catalog or a library raises
            if not transient(e):  # keeps its kind (a refusal, a failpoint); the log says more
                logger.error("%s", _failed(step, batch_id, e, then))
                raise
            if delay is None:
                raise AfterCommitError(_failed(step, batch_id, e, then)) from e
            logger.warning("batch %d is committed; its %s failed (%s: %s): trying it again "
                           "in %.1f s", batch_id, step, type(e).__name__, e, delay)
            count("afterCommitRetries-total")
            sleep(delay)
    raise AssertionError("unreachable: the last attempt returns or raises")


def housekeeping(batch_id: int, run: Callable[[], list[str]], *,
                 sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """The clean-up ``run()`` (what it deleted), tried as :func:`tried` tries a step; one
    that still fails transiently is a WARNING and deletes nothing more: the next compaction's
    clean-up finds what is due again. A refusal or a failpoint fails the commit as loudly as
    before the commit point."""
    try:
        return tried("clean-up", batch_id, run, sleep=sleep,
                     then="the clean-up runs again at the next compaction batch")
    except AfterCommitError as e:
        cause = e.__cause__ or e
        logger.warning("batch %d is committed; its clean-up failed %d times (%s: %s): the "
                       "query goes on, and the clean-up runs again at the next compaction "
                       "batch", batch_id, len(RETRY_DELAYS_S) + 1, type(cause).__name__, cause)
        count("cleanupsDeferred-total")
        return []


def _failed(step: str, batch_id: int, error: BaseException, then: str = "") -> str:
    """What an operator reads when a step after the commit point gave up.

    >>> print(_failed("table commit (delta)", 7, OSError("503 SlowDown")))
    batch 7 is committed (its _spark_metadata log file exists), but its table commit (delta) \
failed: OSError: 503 SlowDown. Nothing committed is lost or undone: restart the query; its \
replay of batch 7 catches the table commit (delta) up, as after a kill (or run `rotsink verify \
--repair` on the output).
    """
    then = then or f"its replay of batch {batch_id} catches the {step} up, as after a kill " \
                   "(or run `rotsink verify --repair` on the output)"
    return (f"batch {batch_id} is committed (its _spark_metadata log file exists), but its "
            f"{step} failed: {type(error).__name__}: {error}. Nothing committed is lost or "
            f"undone: restart the query; {then}.")
