"""``writeStream.partitionBy(...)`` for rotsink, and the Arrow setting its queries start with.

Spark hands a Python sink the writer's options and nothing else. ``DataStreamWriter``
keeps ``.partitionBy(...)`` apart from the options and passes it only to the sinks of its V1
API (``startInternal``/``createV1Sink`` in sql/core/.../classic/DataStreamWriter.scala, the same
in Spark 4.0 to 4.3; a Python data source is a V2 ``TableProvider``, whose write gets the
options alone), so a rotsink query written the way Spark's guide writes one would run
unpartitioned, silently.

This module wraps PySpark's own writer classes (classic ``pyspark.sql.streaming.readwriter`` and
Spark Connect's ``pyspark.sql.connect.streaming.readwriter``): each writer remembers the format and
the columns it was given, and ``start`` of a rotsink query adds the columns as the option
``__partition_columns`` (Spark's own key for them, ``DataSourceUtils .PARTITIONING_COLUMNS_KEY``),
which the sink reads as it reads ``partitionBy``
(:func:`datasource.options.values.partition_columns`: both at once must agree). ``start`` of a
rotsink query also runs it without Spark's per-row Arrow size check when the session leaves the
setting unset (:mod:`datasource.writing.arrow_transfer`), and, when the session has Spark's
streaming metrics on, with rotsink's metrics (:mod:`datasource.spark.spark_metrics`: the writer also
remembers the options it was given, whose path and storage options name the log the metrics start
from). Every other format's query runs exactly as before: nothing is added to its options or its
session. PySpark's batch ``DataFrameWriter`` is wrapped too, so that a batch write to rotsink gets
rotsink's refusal in every save mode (:func:`wrap_batch_writer`).

The wrapping happens in every Python process of an environment with rotsink installed,
before PySpark is first imported: ``rotsink_workers.pth`` calls :func:`install`, which
only registers an import hook (no import of PySpark). ``import pyspark_rotsink`` installs it
too (where the ``.pth`` file did not run: ``PYTHONPATH`` or a zip shipped with a job).
``ROTSINK_KEEP_SPARK_WRITER=1`` turns it off; then ``.partitionBy(...)`` is dropped by Spark
again and only ``.option("partitionBy", ...)`` partitions.
"""

from __future__ import annotations

import os
import sys

# Imported by every Python process of the environment at start (rotsink_workers.pth), so it
# imports nothing more (typing alone costs 8 ms): what wrapping needs (functools, inspect,
# json) is imported when a writer module loads.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

KEEP_ENV = "ROTSINK_KEEP_SPARK_WRITER"
PARTITION_COLUMNS = "__partition_columns"  # as datasource.options.names.WRITER_PARTITION_COLUMNS
WRITER_MODULES = ("pyspark.sql.streaming.readwriter", "pyspark.sql.connect.streaming.readwriter",
                  "pyspark.sql.readwriter", "pyspark.sql.connect.readwriter")
_NAMES = {"rotsink", "pyspark_rotsink", "pyspark_rotsink.defaultsource",
          "datasource.source.rotsinkdatasource"}
_WRAPPED = "_rotsink_wrapped"

# What a batch write (df.write) of rotsink is refused with, by the wrapper and by the source
BATCH_WRITE_REFUSED = (
    "rotsink is a streaming sink: a batch write (df.write) could not be written exactly once "
    "(a retried or re-run job is a new job and would write its rows again). Write the rows "
    "with a one-off streaming query over the same input, into an output path of its own; "
    "pyspark_rotsink.backfill runs it to its end with every file finished, for Spark's "
    "readers to see: `pyspark_rotsink.backfill(spark.readStream.schema(df.schema)"
    ".parquet(input_path), backfill_path, checkpoint=checkpoint_path, "
    "options={'format': 'parquet'})` (run again after a failure: it continues). For a "
    "table, give that output the same table (docs/tables.md, 'A shared table'). See the "
    "README, 'Backfills'")


def install() -> None:
    """Wrap the writer classes now if PySpark's writer modules are loaded, and as soon as
    they are otherwise (an import hook: nothing of PySpark is imported here)."""
    if os.environ.get(KEEP_ENV):
        return
    for name in WRITER_MODULES:
        if name in sys.modules:
            wrap_module(sys.modules[name])
    if not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())


def wrap_module(module: Any) -> None:
    writer = getattr(module, "DataStreamWriter", None)
    if writer is not None:
        wrap_writer(writer)
    batch_writer = getattr(module, "DataFrameWriter", None)
    if batch_writer is not None:
        wrap_batch_writer(batch_writer)


def wrap_batch_writer(cls: type) -> None:
    """Make ``cls`` (a PySpark ``DataFrameWriter``) refuse a rotsink batch write with
    rotsink's reason and what to run instead, in every save mode: Spark itself refuses a
    Python data source's default mode (``errorifexists``) and ``ignore`` with a save-mode
    error that sends the user the wrong way, before rotsink is asked."""
    import functools
    import inspect

    if cls.__dict__.get(_WRAPPED):
        return
    original_format = cls.format  # type: ignore[attr-defined]

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:
        self._rotsink_source = source
        return original_format(self, source)

    def refusing(original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def save(self: Any, *args: Any, **kwargs: Any) -> Any:
            given = signature.bind_partial(self, *args, **kwargs).arguments
            if is_rotsink(given.get("format") or getattr(self, "_rotsink_source", None)):
                from commit_protocol.vocabulary.errors import UnsupportedQueryError

                raise UnsupportedQueryError(BATCH_WRITE_REFUSED)
            return original(self, *args, **kwargs)

        return save

    cls.format = format  # type: ignore[attr-defined]
    for name in ("save", "saveAsTable"):
        setattr(cls, name, refusing(getattr(cls, name)))
    setattr(cls, _WRAPPED, True)


def wrap_writer(cls: type) -> None:
    """Make ``cls`` (a PySpark ``DataStreamWriter``) hand rotsink its partition columns (and
    its metrics' mailbox)."""
    import functools
    import inspect
    import json

    if cls.__dict__.get(_WRAPPED):
        return
    original_format, original_partition_by = cls.format, cls.partitionBy  # type: ignore[attr-defined]
    original_option, original_options = cls.option, cls.options  # type: ignore[attr-defined]
    original_start = cls.start  # type: ignore[attr-defined]
    signature = inspect.signature(original_start)

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:
        self._rotsink_source = source
        return original_format(self, source)

    @functools.wraps(original_option)
    def option(self: Any, key: str, value: Any) -> Any:
        given_options(self)[key] = value
        return original_option(self, key, value)

    @functools.wraps(original_options)
    def options(self: Any, **options: Any) -> Any:
        given_options(self).update(options)
        return original_options(self, **options)

    @functools.wraps(original_partition_by)
    def partitionBy(self: Any, *cols: Any) -> Any:
        self._rotsink_columns = columns_of(cols)
        return original_partition_by(self, *cols)

    @functools.wraps(original_start)
    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        given = signature.bind_partial(self, *args, **kwargs).arguments
        source = given.get("format") or getattr(self, "_rotsink_source", None)
        columns = (columns_of((given["partitionBy"],)) if given.get("partitionBy")
                   else getattr(self, "_rotsink_columns", None))
        if not is_rotsink(source):
            return original_start(self, *args, **kwargs)
        if columns:
            self.option(PARTITION_COLUMNS, json.dumps(list(columns)))
        from pyspark.sql.utils import to_str  # as Spark's writer spells them: True is "true"

        from datasource.spark.spark_metrics import start_watched
        from datasource.writing.arrow_transfer import start_unchecked
        from datasource.writing.preflight import check_before_start

        session = getattr(self, "_spark", None) or getattr(self, "_session", None)
        if session is None:  # a PySpark whose writer keeps its session elsewhere
            return original_start(self, *args, **kwargs)
        options = {**given_options(self), **given.get("options", {})}
        for key in ("path", "queryName"):
            if given.get(key):
                options[key] = given[key]
        options = {k: str(to_str(v)) for k, v in options.items() if v is not None}
        check_before_start(session, self, options)  # a refusal raised here, not later
        return start_watched(session, self, lambda: start_unchecked(
            session, lambda: original_start(self, *args, **kwargs)), options)

    for name, method in (("format", format), ("partitionBy", partitionBy), ("start", start),
                         ("option", option), ("options", options)):
        setattr(cls, name, method)
    setattr(cls, _WRAPPED, True)


def given_options(writer: Any) -> dict[str, Any]:
    """The options given to ``writer`` so far (rotsink's metrics read the output's log at
    start: its path and storage options)."""
    if "_rotsink_options" not in writer.__dict__:
        writer._rotsink_options = {}
    return writer._rotsink_options  # type: ignore[no-any-return]


def columns_of(cols: tuple[Any, ...]) -> tuple[str, ...]:
    """The column names of a ``partitionBy`` call, as PySpark reads its arguments.

    >>> columns_of(("day", "hour")), columns_of((["day", "hour"],)), columns_of(("day",))
    (('day', 'hour'), ('day', 'hour'), ('day',))
    """
    if len(cols) == 1 and isinstance(cols[0], (list, tuple)):
        cols = tuple(cols[0])
    return tuple(str(c) for c in cols)


def is_rotsink(source: str | None) -> bool:
    """Whether ``format(source)`` names rotsink.

    >>> is_rotsink("rotsink"), is_rotsink("RotSink"), is_rotsink("parquet"), is_rotsink(None)
    (True, True, False, False)
    """
    return source is not None and source.strip().lower() in _NAMES


class _WrapOnImport:
    """A meta path finder that wraps a writer module right after it is executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in WRITER_MODULES:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _WrappingLoader(spec.loader, wrap_module)  # type: ignore[assignment]
        return spec


class _WrappingLoader:
    def __init__(self, loader: Any, after: Callable[[Any], None]) -> None:
        self._loader, self._after = loader, after

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str) -> Any:  # get_code, get_source, is_package... as loaded
        return getattr(self._loader, name)
