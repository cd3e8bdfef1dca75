"""Spark's per-row size check on the Arrow path into a Python sink, and running without it.

A Python sink's task gets its rows from the JVM as Arrow batches: Spark's
``BatchedPythonArrowInput`` (``MapInBatchEvaluatorFactory``, the path of every Python data
source writer) fills a batch row by row and, unless
``spark.sql.execution.arrow.maxBytesPerBatch`` is exactly 2147483647, asks the batch for its
size in bytes after every row (``ArrowWriter.sizeInBytes``), which walks the struct column
wrapping the rows and allocates as it goes. Measured on a 16-core executor (PySpark 4.3.0,
16M rows; a Java Flight Recorder profile put 62% of the executor threads' samples there): a
Python sink that writes nothing took 5.8 s with the check and 1.07 s without; rotsink took
3.76x Spark's own Parquet sink's time with it and 0.90x without (JSON lines 4.32x and 0.92x).
On 2 cores it costs least (``benchmarks/README.md``, "The Arrow size check").

=======  ======================================  =======================
PySpark  the check (javap of ``spark-sql``'s    ``maxBytesPerBatch``
         ``BatchedPythonArrowInput``)            default
=======  ======================================  =======================
4.0      after every row unless 2147483647      256 MB
4.1      the same                                64 MB
4.2      the same                                64 MB
4.3      the same                                64 MB
=======  ======================================  =======================

Without it a batch holds ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000 by
default) whatever their size, and the JVM allocates it off its heap (direct memory, as large
as the heap by default), Arrow's vectors doubling as they grow. ``benchmarks/wide_rows.py``
measured it: rows of 100 kB in batches of 10,000 failed the executor's allocation of 1 GB
(``OutOfDirectMemoryError``, 2 GB of direct memory, two tasks), which Spark answers by
stopping the executor; with the check on, or with ``maxRecordsPerBatch`` by the README's rule
(about 64 MB of Arrow a batch), the same rows went through. A task that gets batches larger
than :data:`LARGE_BATCH_BYTES` says so once per JVM, with the rule worked out for its rows
(:func:`BatchWatch`): the per-row check costs per row, so rows that wide lose little with it on.

What rotsink controls: its own sessions (the demo, the tests, the benchmarks) set the value;
a rotsink query started through PySpark's writer (``datasource.writing.writer_calls``) runs with it
when the session did not set the key, by setting it for the moment of ``start()`` (Spark
copies the session's settings into the query's own session there and runs every micro-batch
with that copy), leaving the application's session as it was. What only the application
can set: a value of its own (kept, and named in a warning), and the setting where rotsink's
wrapper is off. A task that finds the check on says so once per JVM (:func:`warn_once_if_checked`),
as the heap warning does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasource.writing.heap_check import first_in_jvm, jvm_ancestor

KEY = "spark.sql.execution.arrow.maxBytesPerBatch"
RECORDS_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"
UNCHECKED = "2147483647"  # Int.MaxValue: the one value Spark checks no size for
# What the check cost, measured on a 16-core executor (benchmarks/README.md, "The Arrow size
# check and a 16-core executor"): the one place of these figures, which the README and
# docs/performance.md quote (tests/unit/test_arrow_transfer.py holds them to it)
MEASURED = ("3.96x Spark's own sink's time with the check and 0.80x without for Parquet, "
            "3.85x and 0.81x for JSON lines")
# Twice Spark's default byte limit (64 MB): a batch this large is worth a word
LARGE_BATCH_BYTES = 128 << 20
RULE_BATCH_BYTES = 64 << 20  # the README's rule: rows a batch for about 64 MB of Arrow
LOG = logging.getLogger("rotsink.task")
_MARKER = "rotsink-arrow-size-check-warned-"
_LARGE_MARKER = "rotsink-arrow-large-batch-warned-"
_checked = False
_large_warned = False


def start_unchecked(session: Any, start: Callable[[], Any]) -> Any:
    """``start()`` a query of ``session`` (classic or Spark Connect) with the check off,
    unless the session sets the key itself; the session's own settings are as before
    afterwards."""
    conf = session.conf
    if conf.get(KEY, None) is not None:
        return start()
    conf.set(KEY, UNCHECKED)
    try:
        return start()
    finally:
        conf.unset(KEY)


def checks_sizes(value: str | None) -> bool:
    """Whether a task whose session says ``value`` (None: Spark's default) checks sizes.

    >>> checks_sizes(None), checks_sizes("67108864b"), checks_sizes("2147483647")
    (True, True, False)
    >>> checks_sizes("2147483647b")
    False
    """
    return value is None or value.strip().lower().removesuffix("b") != UNCHECKED


def warn_once_if_checked(value: str | None, proc: Path = Path("/proc"),
                         markers: Path | None = None) -> bool:
    """Runs in each task (cheap after the first): ``value`` is the session's setting as
    the task sees it (a local property; None when the session left it at Spark's default).
    Warns once per JVM; returns whether it warned."""
    global _checked
    if _checked:
        return False
    _checked = True
    if not checks_sizes(value):
        return False
    found = jvm_ancestor(os.getpid(), proc)
    if found is not None and not first_in_jvm(found[0], _MARKER, proc, markers):
        return False
    setting = f"{KEY}={value}" if value is not None else f"{KEY} at Spark's default"
    LOG.warning("this query moves its rows into rotsink with %s: Spark then measures each "
                "Arrow batch after every row; on a 16-core executor rotsink took %s. Set %s=%s "
                "in the session before the query starts, and bound batches by "
                "spark.sql.execution.arrow.maxRecordsPerBatch (docs/performance.md, Tuning)",
                setting, MEASURED, KEY, UNCHECKED)
    return True


def rows_by_the_rule(bytes_per_row: float) -> int:
    """``maxRecordsPerBatch`` for about 64 MB of Arrow a batch (the README's rule).

    >>> rows_by_the_rule(100_000), rows_by_the_rule(40), rows_by_the_rule(1e9)
    (671, 1677721, 1)
    """
    return max(1, int(RULE_BATCH_BYTES // max(bytes_per_row, 1.0)))


class BatchWatch:
    """Watches the Arrow batches a task gets (runs on an executor): the first larger than
    :data:`LARGE_BATCH_BYTES` makes one warning per JVM, naming its size, its rows and the
    ``maxRecordsPerBatch`` that would keep a batch near 64 MB."""

    def __init__(self, proc: Path = Path("/proc"), markers: Path | None = None) -> None:
        self.proc, self.markers = proc, markers

    def watch(self, batches: Any) -> Any:
        for batch in batches:
            if not _large_warned and batch.nbytes > LARGE_BATCH_BYTES:
                self.warn(batch.nbytes, batch.num_rows)
            yield batch

    def warn(self, nbytes: int, rows: int) -> bool:
        global _large_warned
        _large_warned = True
        found = jvm_ancestor(os.getpid(), self.proc)
        if found is not None and not first_in_jvm(found[0], _LARGE_MARKER, self.proc,
                                                  self.markers):
            return False
        per_row = nbytes / max(rows, 1)
        LOG.warning("an Arrow batch of %d MB (%d rows of %.1f kB) reached this task: the "
                    "JVM allocated it off its heap, and batches of rows this wide can exhaust "
                    "an executor's direct memory. Set %s=%d (about 64 MB a batch for these "
                    "rows), or %s=64m: Spark's per-row size check costs little for rows this "
                    "wide (README, Tuning)", nbytes >> 20, rows, per_row / 1e3, RECORDS_KEY,
                    rows_by_the_rule(per_row), KEY)
        return True
