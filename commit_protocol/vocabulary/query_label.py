"""The query's name in rotsink's log lines (``.queryName(...)``).

Spark names a query in its UI, ``spark.streams`` and its metrics; rotsink's lines name it the
same way: ``query events: batch 12 committed in 41 ms ...``. The commit, the planning and the
tasks of a query run in Python processes Spark reuses for other queries, so the name is set
for the duration of each call (:func:`naming`), not per process, and a filter on rotsink's
loggers puts it in front of each message logged meanwhile, whichever handler prints it (an
application's own included). An unnamed query's lines are as they were.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

LOGGERS = ("rotsink.commit", "rotsink.table", "rotsink.task")
_NAME: ContextVar[str] = ContextVar("rotsink_query_name", default="")


@contextmanager
def naming(query_name: str) -> Iterator[None]:
    """Lines logged inside name the query ``query_name`` ("" names none)."""
    token = _NAME.set(query_name)
    try:
        yield
    finally:
        _NAME.reset(token)


class _QueryName(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        name = _NAME.get()
        if name and not getattr(record, "rotsink_query", ""):
            record.msg = f"query {name}: {record.msg}"
            record.rotsink_query = name  # for formats that place it themselves
        return True


_FILTER = _QueryName()
for _logger in LOGGERS:
    logging.getLogger(_logger).addFilter(_FILTER)
