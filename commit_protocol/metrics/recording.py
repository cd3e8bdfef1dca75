"""What one commit does, recorded while it runs and left in the query's mailbox.

The committer calls nothing of this: its steps are timed where they are defined
(:func:`timed` on the log's staging and publishing, the renames, the table's commit and
follow, the clean-up), the table counts its retries and the files it follows
(:func:`count`, :func:`note`), and the Spark face wraps each commit and abort in
:func:`recording`. With metrics off (no mailbox) nothing is recorded: each timed step pays
one context-variable lookup.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from commit_protocol.metrics import mailbox
from commit_protocol.metrics.totals import gauges_of
from commit_protocol.vocabulary.errors import CommitError, ConcurrentWriterError, TableError

if TYPE_CHECKING:
    from commit_protocol.records.state import SinkState

logger = logging.getLogger("rotsink.commit")
F = TypeVar("F", bound=Callable[..., Any])
# step name: its gauge
STEPS = {"log": "commitLog-ms", "publish": "commitPublish-ms", "table": "commitTable-ms",
         "follow": "commitFollow-ms", "cleanup": "commitCleanup-ms"}


class Recording:
    """One commit (or abort) of batch ``batch_id``, for ``mailbox``."""

    def __init__(self, mailbox_dir: str, batch_id: int) -> None:
        self.mailbox, self.batch_id = mailbox_dir, batch_id
        self.steps = dict.fromkeys(STEPS, 0.0)
        self.counts: dict[str, int] = {}
        self.values: dict[str, int] = {}

    def committed(self, state: SinkState | None, *, compacted: bool) -> None:
        """The commit made ``state`` (None: it found the batch committed already), and
        compacted the log if ``compacted``."""
        if state is None:
            return
        self.values.update(gauges_of(state))
        self.values.update({gauge: round(self.steps[step]) for step, gauge in STEPS.items()})
        if compacted:
            self.values["commitCompaction-ms"] = round(self.steps["log"])

    def aborted(self) -> None:
        self.count("batchesAborted-total")

    def failed(self, error: BaseException) -> None:
        self.count("failures-total")
        self.count(f"failures-{failure_kind(error)}-total")

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def publish(self, elapsed_ms: float) -> None:
        """Leave the values in the mailbox: the counters added to the last ones."""
        values = mailbox.read(self.mailbox)
        for name, n in self.counts.items():
            values[name] = values.get(name, 0) + n
        if self.values:
            values.update(self.values, **{"commit-ms": round(elapsed_ms),
                                          "lastCommit-timestampMs": int(time.time() * 1000)})
        mailbox.write(self.mailbox, values)


class _Off(Recording):
    """Metrics off: nothing recorded."""

    def committed(self, state: SinkState | None, *, compacted: bool) -> None:
        pass

    def aborted(self) -> None:
        pass


_CURRENT: ContextVar[Recording | None] = ContextVar("rotsink_metrics", default=None)


@contextmanager
def recording(mailbox_dir: str | None, batch_id: int) -> Iterator[Recording]:
    """Record the commit or abort run inside (when the query has a mailbox: metrics on;
    else nothing is). A failure is counted by kind, then raised as it was; a mailbox that cannot be
    written costs a warning, never the commit."""
    if not mailbox_dir:
        yield _Off("", batch_id)
        return
    recorded = Recording(mailbox_dir, batch_id)
    token = _CURRENT.set(recorded)
    started = time.perf_counter()
    try:
        yield recorded
    except Exception as error:
        recorded.failed(error)
        raise
    finally:
        _CURRENT.reset(token)
        try:
            recorded.publish((time.perf_counter() - started) * 1000)
        except OSError as e:
            logger.warning("batch %d: its metrics were not published (%s): the query goes on",
                           batch_id, e)


def timed(step: str) -> Callable[[F], F]:
    """Add the time of each call to ``step``'s time in the commit being recorded."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def timing(*args: Any, **kwargs: Any) -> Any:
            recorded = _CURRENT.get()
            if recorded is None:
                return function(*args, **kwargs)
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                recorded.steps[step] += (time.perf_counter() - started) * 1000

        return timing  # type: ignore[return-value]

    return decorate


def count(name: str, n: int = 1) -> None:
    """Count ``n`` more of ``name`` (a ``-total`` metric) in the commit being recorded."""
    recorded = _CURRENT.get()
    if recorded is not None:
        recorded.count(name, n)


def note(name: str, value: int) -> None:
    """Set gauge ``name`` to ``value`` as of the commit being recorded."""
    recorded = _CURRENT.get()
    if recorded is not None:
        recorded.values[name] = value


def failure_kind(error: BaseException) -> str:
    """The ``failures-<kind>-total`` a commit's error counts in.

    >>> failure_kind(ConcurrentWriterError("x")), failure_kind(OSError("disk")), \
failure_kind(KeyError("k"))
    ('concurrentWriter', 'storage', 'other')
    """
    if isinstance(error, ConcurrentWriterError):
        return "concurrentWriter"
    if isinstance(error, TableError):
        return "table"
    if isinstance(error, CommitError):
        return "commit"
    if isinstance(error, OSError):
        return "storage"
    return "other"
