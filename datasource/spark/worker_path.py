"""Spark's Python workers import the installed, compiled PySpark instead of ``pyspark.zip``.

Spark starts each Python worker daemon (the data source lookup, the writer's planning, the
tasks, the streaming commit) with ``PYTHONPATH`` beginning
``$SPARK_HOME/python/lib/pyspark.zip``. For a pip-installed PySpark that zip lies inside the
installed package and holds the same sources, but no bytecode, and Python caches no bytecode
for zip imports: every daemon, and every worker it forks, compiles the PySpark modules it
imports from source. Measured here: importing ``pyspark.daemon`` costs 0.56 s of CPU from the
zip and 0.13 s from the installed package; a streaming query with a Python sink starts five
daemons before its first commit, so its first micro-batch spends about 2 s of CPU compiling
PySpark (``benchmarks/throughput.py`` shows the cold query with and without this module).

``rotsink_workers.pth`` (installed with rotsink) runs :func:`apply` at interpreter start, in
the way ``pytest-cov`` reaches subprocesses: only when a ``pyspark.zip`` is on ``sys.path``
(the same file installs :mod:`datasource.writing.writer_calls` in every process).
It moves the zip behind the installed package only when the zip is the one shipped inside
that same installed package, so the sources are identical; a cluster's ``SPARK_HOME`` or any
other layout is left as it is. Set ``ROTSINK_KEEP_PYSPARK_ZIP=1`` to turn it off.
"""

from __future__ import annotations

import os
import sys

KEEP_ZIP_ENV = "ROTSINK_KEEP_PYSPARK_ZIP"
ZIP_IN_PACKAGE = os.path.join("pyspark", "python", "lib", "pyspark.zip")


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` with every ``pyspark.zip`` that lies inside a PySpark installed on ``path``
    moved to the end; every other entry keeps its place.

    Example: ``["/v/pyspark/python/lib/pyspark.zip", "/py4j.zip", "/v"]`` gives
    ``["/py4j.zip", "/v", "/v/pyspark/python/lib/pyspark.zip"]`` when ``/v/pyspark`` is a
    package directory, and is returned unchanged when it is not.
    """
    roots = {os.path.normpath(entry) for entry in path if entry}
    shipped = [entry for entry in path if _shipped_inside(entry, roots)]
    return [entry for entry in path if entry not in shipped] + shipped


def _shipped_inside(entry: str, roots: set[str]) -> bool:
    suffix = os.sep + ZIP_IN_PACKAGE
    normalized = os.path.normpath(entry) if entry else ""
    if not normalized.endswith(suffix):
        return False
    root = normalized[: -len(suffix)] or os.sep
    return root in roots and os.path.isfile(os.path.join(root, "pyspark", "__init__.py"))


def apply() -> None:
    """Reorder ``sys.path`` in place, unless ``ROTSINK_KEEP_PYSPARK_ZIP`` is set or PySpark
    was imported already (its modules must all come from one place)."""
    if os.environ.get(KEEP_ZIP_ENV) or "pyspark" in sys.modules:
        return
    sys.path[:] = prefer_installed_pyspark(sys.path)
