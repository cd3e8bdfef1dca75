"""``pyspark_rotsink.read(spark, path)``: every committed row, at Spark's own speed.

rotsink's reader returns what no other reader can, the committed rows of files still in
progress, but every row it returns crosses the JVM's Arrow-to-row conversion of a Python
source, which alone costs about twice Spark's vectorized Parquet scan. Finalized files are
ordinary files that Spark's own readers read. So this reads one committed snapshot as the
union of two parts that share a batch id ``N``:

* the files finalized as of ``N``, through Spark's reader of the format (vectorized scans,
  column pruning, partition pruning and filter pushdown all apply): in a classic session the
  output's root, whose ``_spark_metadata`` Spark lists when the DataFrame is created, taken
  only when the log's latest batch is ``N`` before and after that moment; under Spark Connect
  (which plans again at every action) and for ``asOfBatch``, an explicit list of ``N``'s files;
* the committed prefixes of ``N``'s in-progress files, through rotsink's reader pinned to
  ``N`` (``asOfBatch``, ``includeFinalized=false``), wherever later commits move them.

A file finalized after ``N`` is in progress at ``N``: it is read once, as the prefix ``N``
committed. Where Spark's reader cannot return exactly rotsink's rows (encrypted files, CSV
with string columns: Spark reads ``""`` as null; JSON maps with non-string keys), the whole
snapshot is read by rotsink's reader instead.
"""

from __future__ import annotations

import json
from typing import Any

from commit_protocol.errors import OptionError, RotsinkError
from commit_protocol.log import open_committed
from commit_protocol.log_files import log_file_names
from commit_protocol.naming import log_root
from commit_protocol.reading import committed_files, in_progress_files
from commit_protocol.state import SinkState
from commit_protocol.storage import Storage, open_storage
from datasource.options import (
    AS_OF_BATCH,
    FEED_OPTIONS,
    INCLUDE_FINALIZED,
    INCLUDE_IN_PROGRESS,
    fs_options,
    parse_bool,
    parse_int,
    reject_unknown,
)

# How often the root-path read is tried while commits land around it before the explicit
# file list (always exact, slower to plan) is used.
_ATTEMPTS = 3
_GLOB_CHARACTERS = frozenset("{}[]*?\\")


def read(spark: Any, path: str, **options: Any) -> Any:
    """One committed snapshot of the rotsink output at ``path`` as a DataFrame: the finalized
    files through Spark's own reader, the committed rows of in-progress files through
    rotsink's (see the module docstring). Runs in the driver (or the Connect client).

    ``options`` are those of ``spark.read.format("rotsink")`` (``includeInProgress``,
    ``asOfBatch``, ``numPartitions``, ``maxPartitionBytes``, ``encryption.key(s)``, ``fs.*``);
    Spark's reader of finalized files on an object store uses the session's own Hadoop
    settings (``s3a://``).
    """
    options = {key: str(value) for key, value in options.items()}
    lowered = {key.lower(): value for key, value in options.items()}
    reject_unknown({"path": path, **options}, reading=True)
    for name in (*FEED_OPTIONS, INCLUDE_FINALIZED):
        if name.lower() in lowered:
            raise OptionError(f"option {name}={lowered[name.lower()]!r} is not taken by "
                              "pyspark_rotsink.read, which reads every committed row")
    storage = open_storage(path, fs_options(options))
    committed = open_committed(storage)
    if committed is None:
        raise RotsinkError(f"{path} has no rotsink output: no committed batch in _spark_metadata")
    in_progress = parse_bool(INCLUDE_IN_PROGRESS,
                             lowered.get(INCLUDE_IN_PROGRESS.lower(), "true"))
    pinned = lowered.get(AS_OF_BATCH.lower())
    schema = _schema(committed[2])
    if not spark_reads_exactly(committed[2], schema):
        return spark.read.format("rotsink").options(**options).load(path)
    if pinned is None and not _is_connect(spark):
        found = _root_snapshot(spark, storage, committed[2], schema)
        if found is not None:
            finalized, batch = found
            return _with_in_progress(spark, path, options, finalized, batch, storage,
                                     in_progress=in_progress)
    batch = _latest(storage) if pinned is None else parse_int(AS_OF_BATCH, pinned, minimum=0)
    return _listed_snapshot(spark, path, options, storage, batch, schema,
                            in_progress=in_progress)


def spark_reads_exactly(state: SinkState, schema: Any) -> bool:
    """Whether Spark's reader of the path's format returns exactly the rows rotsink's does."""
    from pyspark.sql.types import NullType, StringType

    if state.encrypted:
        return False
    fields = [f for f in schema.fields if f.name not in state.partition_by]
    if state.format == "csv":  # Spark's CSV reader reads "" as null, and has no void type
        return not any(isinstance(f.dataType, (StringType, NullType)) for f in fields)
    if state.format == "jsonl":  # Spark's JSON reader takes only string map keys
        return not any(_has_map_without_string_keys(f.dataType) for f in fields)
    return state.format in ("text", "parquet", "orc")


def _has_map_without_string_keys(data_type: Any) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StringType, StructType

    if isinstance(data_type, MapType):
        return (not isinstance(data_type.keyType, StringType)
                or _has_map_without_string_keys(data_type.valueType))
    if isinstance(data_type, ArrayType):
        return _has_map_without_string_keys(data_type.elementType)
    if isinstance(data_type, StructType):
        return any(_has_map_without_string_keys(f.dataType) for f in data_type.fields)
    return False


def _root_snapshot(spark: Any, storage: Storage, state: SinkState,
                   schema: Any) -> tuple[Any, int] | None:
    """Spark's reader over the output's root and the batch its listing of ``_spark_metadata``
    saw: the latest batch, when no commit landed while the DataFrame was created (a classic
    session lists the log then, once for the DataFrame's life)."""
    root = log_root(storage.root_uri)
    for _ in range(_ATTEMPTS):
        before = _latest(storage)
        finalized = _spark_reader(spark, state, schema).load(root)
        if _latest(storage) == before:
            return finalized, before
    return None


def _listed_snapshot(spark: Any, path: str, options: dict[str, str], storage: Storage,
                     batch: int, schema: Any, *, in_progress: bool) -> Any:
    """Spark's reader over an explicit list of the files finalized as of ``batch``."""
    committed = open_committed(storage)
    assert committed is not None
    log = committed[0]
    files = committed_files(log, batch, log.read_state(batch), include_in_progress=False)
    root = log_root(storage.root_uri).rstrip("/")
    paths = [f"{root}/{f.path}" for f in files]
    if any(_GLOB_CHARACTERS & set(f.path) for f in files):
        # Spark expands these characters in explicit paths as a glob
        return spark.read.format("rotsink").options(**options, asOfBatch=str(batch)).load(path)
    state = committed[2]
    finalized = (_spark_reader(spark, state, schema).option("basePath", root).load(paths)
                 if paths else None)
    return _with_in_progress(spark, path, options, finalized, batch, storage,
                             in_progress=in_progress)


def _with_in_progress(spark: Any, path: str, options: dict[str, str], finalized: Any,
                      batch: int, storage: Storage, *, in_progress: bool) -> Any:
    """``finalized`` (a DataFrame, or None for no file) with the rows of ``batch``'s
    in-progress files, through rotsink's reader pinned to ``batch``."""
    committed = open_committed(storage)
    assert committed is not None
    state = committed[0].read_state(batch) if batch != committed[1] else committed[2]
    names = _schema(state).fieldNames()
    parts = [] if finalized is None else [_spark_part(finalized, state, names)]
    if in_progress and in_progress_files(state):
        parts.append(spark.read.format("rotsink")
                     .options(**options, asOfBatch=str(batch), includeFinalized="false")
                     .load(path).selectExpr(*map(_quoted, names)))
    if not parts:  # nothing committed to read yet: rotsink's reader gives the empty frame
        return spark.read.format("rotsink").options(**options,
                                                    asOfBatch=str(batch)).load(path)
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union


def _spark_part(df: Any, state: SinkState, names: list[str]) -> Any:
    """Spark's rows in rotsink's columns: text's column renamed from ``value``, CSV's binary
    columns decoded from the base64 rotsink writes. SQL expressions, not
    ``pyspark.sql.functions``, whose columns are classic or Connect by the process's mode."""
    from pyspark.sql.types import BinaryType

    schema = _schema(state)
    expressions = []
    for field in schema.fields:
        name = _quoted(field.name)
        if state.format == "text" and field.name not in state.partition_by:
            expressions.append(f"value AS {name}")
        elif state.format == "csv" and isinstance(field.dataType, BinaryType):
            expressions.append(f"unbase64({name}) AS {name}")
        else:
            expressions.append(name)
    return df.selectExpr(*expressions).selectExpr(*map(_quoted, names))


def _quoted(name: str) -> str:
    """A column name as a SQL identifier.

    >>> _quoted("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


def _spark_reader(spark: Any, state: SinkState, schema: Any) -> Any:
    """``spark.read`` for the path's format with the schema Spark should read it as."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    if state.format == "text":
        data = [f for f in schema.fields if f.name not in state.partition_by]
        schema = StructType([StructField("value", StringType(), True) if f in data else f
                             for f in schema.fields])
    elif state.format == "csv":
        schema = StructType([StructField(f.name, StringType(), f.nullable)
                             if isinstance(f.dataType, BinaryType) else f
                             for f in schema.fields])
    reader = spark.read.schema(schema)
    if state.format == "csv":
        return reader.format("csv").option("header", "true").option("multiLine", "true")
    return reader.format({"jsonl": "json"}.get(state.format, state.format))


def _schema(state: SinkState) -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(state.schema_json))


def _latest(storage: Storage) -> int:
    return max(log_file_names(storage))


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")
