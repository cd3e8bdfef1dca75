"""The mailbox: where a query's commits leave its metrics for the process that started it.

Spark runs rotsink's commit in a Python worker it starts on the driver, a process with no
handle on the JVM and none on the user's process, whose Spark listener puts the metrics into
Spark's metrics system (``datasource.spark.spark_metrics``). Between the two: one small JSON file
in a directory of the driver's local disk, replaced whole by each commit (a rename: a reader
sees the old values or the new, never half of them). Commits of one query never overlap, so
each reads the last values and writes the next.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FILE = "metrics.json"


def read(mailbox: str) -> dict[str, int]:
    """The values last left in ``mailbox``; empty before the first."""
    try:
        return dict(json.loads((Path(mailbox) / FILE).read_text()))
    except FileNotFoundError:
        return {}


def write(mailbox: str, values: dict[str, int]) -> None:
    path = Path(mailbox) / FILE
    partial = path.with_name(f".{FILE}.{os.getpid()}")
    partial.write_text(json.dumps(values, separators=(",", ":")))
    os.replace(partial, path)
