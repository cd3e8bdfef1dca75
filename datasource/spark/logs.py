"""Where rotsink's log lines go in the processes Spark starts.

rotsink logs to ``logging.getLogger("rotsink")`` (``rotsink.commit`` on the driver,
``rotsink.task`` on executors). Its commits and tasks run in Python processes Spark starts,
where nobody configured logging: without a handler, Python prints only WARNING and above.
``ROTSINK_LOG_LEVEL`` (``INFO`` for one line per committed batch; default ``WARNING``) gives
those processes a stderr handler at that level; Spark puts their stderr in the driver's and
executors' logs. An application that configured the ``rotsink`` logger itself is left alone.
"""

from __future__ import annotations

import logging
import os
import sys

ENV_VAR = "ROTSINK_LOG_LEVEL"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure() -> None:
    """Give the ``rotsink`` logger a stderr handler at ``ROTSINK_LOG_LEVEL``, once per process,
    unless it has handlers already."""
    logger = logging.getLogger("rotsink")
    if logger.handlers:
        return
    level = os.environ.get(ENV_VAR, "WARNING").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    value = getattr(logging, level, None)
    logger.setLevel(value if isinstance(value, int) else logging.WARNING)
    logger.propagate = False
