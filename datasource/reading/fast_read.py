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
committed. Where Spark's reader cannot return exactly rotsink's rows (encrypted files, a
table's rows deleted in place, CSV with string columns: Spark reads ``""`` as null; JSON maps
with non-string keys), the whole snapshot is read by rotsink's reader instead.
"""

from __future__ import annotations

import json
import math
from typing import Any

from commit_protocol.log import MetadataLog, open_committed
from commit_protocol.log.files import log_file_names
from commit_protocol.reading import committed_files, in_progress_files
from commit_protocol.reading.splits import OPEN_COST_BYTES
from commit_protocol.records.schema_evolution import recorded, same_columns
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage, open_storage
from commit_protocol.tables.sharing import Followed
from commit_protocol.vocabulary.errors import OptionError, RotsinkError
from commit_protocol.vocabulary.uris import log_root
from datasource.options.names import (
    AS_OF_BATCH,
    FEED_OPTIONS,
    INCLUDE_FINALIZED,
    INCLUDE_IN_PROGRESS,
    reject_unknown,
)
from datasource.options.sink import fs_options
from datasource.options.values import parse_bool, parse_int

# How often the root-path read is tried while commits land around it before the explicit
# file list (always exact, slower to plan) is used.
_ATTEMPTS = 3
_GLOB_CHARACTERS = frozenset("{}[]*?\\")
# Options for Spark's reader of the finalized files only: the Hadoop settings of Parquet's and
# ORC's readers, which Spark takes from a read's options (gcs-connector 3.1 needs
# parquet.hadoop.vectored.io.enabled=false on Hadoop 3.5); rotsink's reader has no use for them
SPARK_READER_PREFIXES = ("parquet.", "orc.")
_NO_FILE = object()  # a snapshot with no finalized file: no Spark part


def read(spark: Any, path: str, **options: Any) -> Any:
    """One committed snapshot of the rotsink output at ``path`` as a DataFrame: the finalized
    files through Spark's own reader, the committed rows of in-progress files through
    rotsink's (see the module docstring). Runs in the driver (or the Connect client).

    ``options`` are those of ``spark.read.format("rotsink")`` (``includeInProgress``,
    ``asOfBatch``, ``numPartitions``, ``maxPartitionBytes``, ``encryption.key(s)``, ``fs.*``);
    Spark's reader of finalized files on an object store uses the session's own Hadoop
    settings (``s3a://``), and takes the options named ``parquet.*`` and ``orc.*`` (its Hadoop
    settings for this read) as well.
    """
    options = {key: str(value) for key, value in options.items()}
    hadoop = {k: v for k, v in options.items() if k.lower().startswith(SPARK_READER_PREFIXES)}
    options = {k: v for k, v in options.items() if k not in hadoop}
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
    log, latest, state = committed
    in_progress = parse_bool(INCLUDE_IN_PROGRESS,
                             lowered.get(INCLUDE_IN_PROGRESS.lower(), "true"))
    pinned = lowered.get(AS_OF_BATCH.lower())
    schema = _schema(state)
    if not spark_reads_exactly(state, schema):
        return spark.read.format("rotsink").options(**options).load(path)
    found = None
    if pinned is None and not _is_connect(spark):
        found = _root_snapshot(spark, storage, state, schema, hadoop)
    if found is not None:
        finalized, batch = found
    else:
        batch = _latest(storage) if pinned is None else parse_int(AS_OF_BATCH, pinned, minimum=0)
    at_batch = state if batch == latest else _state_at(batch, path, options)
    if at_batch is not state and not spark_reads_exactly(at_batch, schema):
        return spark.read.format("rotsink").options(**options, asOfBatch=str(batch)).load(path)
    if not same_columns(at_batch.schema_json, state.schema_json):
        # columns added (schema.evolution) while this read was planned: plan again, so that
        # Spark's part and rotsink's read the same columns
        return read(spark, path, **options, **hadoop)
    if found is None:
        listed = _listed_snapshot(spark, log, batch, at_batch, schema, hadoop)
        if listed is None:  # paths Spark would take for globs: rotsink's reader, pinned
            return spark.read.format("rotsink").options(**options,
                                                        asOfBatch=str(batch)).load(path)
        finalized = listed
    return _with_in_progress(spark, path, options, finalized, batch, at_batch,
                             in_progress=in_progress)


def _state_at(batch: int, path: str, options: dict[str, str]) -> SinkState:
    """The state of ``batch`` (``asOfBatch``), checked as rotsink's reader checks it."""
    from datasource.reading.reader import open_snapshot

    return open_snapshot({"path": path, **{k.lower(): v for k, v in options.items()},
                          AS_OF_BATCH.lower(): str(batch)})[2]


def spark_reads_exactly(state: SinkState, schema: Any) -> bool:
    """Whether Spark's reader of the path's format returns exactly the rows rotsink's does."""
    from pyspark.sql.types import NullType, StringType

    if state.encrypted or Followed.of(state.extra).row_deletes:  # Spark sees no deletes
        return False
    fields = [f for f in schema.fields if f.name not in state.partition_by]
    if state.format == "csv":  # Spark's CSV reader reads "" as null, and has no void type
        if recorded(state.extra):  # ... and maps columns by position, not by the header
            return False
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


def _root_snapshot(spark: Any, storage: Storage, state: SinkState, schema: Any,
                   hadoop: dict[str, str]) -> tuple[Any, int] | None:
    """Spark's reader over the output's root and the batch its listing of ``_spark_metadata``
    saw: the latest batch, when no commit landed while the DataFrame was created (a classic
    session lists the log then, once for the DataFrame's life)."""
    root = log_root(storage.root_uri)
    for _ in range(_ATTEMPTS):
        before = _latest(storage)
        finalized = _spark_reader(spark, state, schema, hadoop).load(root)
        if _latest(storage) == before:
            return finalized, before
    return None


def _listed_snapshot(spark: Any, log: MetadataLog, batch: int, state: SinkState,
                     schema: Any, hadoop: dict[str, str]) -> Any:
    """Spark's reader over an explicit list of the files finalized as of ``batch``;
    :data:`_NO_FILE` when there is none, None when a path holds a character Spark would
    take for a glob (then rotsink's reader reads the snapshot)."""
    files = committed_files(log, batch, state, include_in_progress=False)
    if any(_GLOB_CHARACTERS & set(f.path) for f in files):
        return None  # Spark expands these characters in explicit paths as a glob
    root = log_root(log.storage.root_uri).rstrip("/")
    paths = [f"{root}/{f.path}" for f in files]
    if not paths:
        return _NO_FILE
    return _spark_reader(spark, state, schema, hadoop).option("basePath", root).load(paths)


def _with_in_progress(spark: Any, path: str, options: dict[str, str], finalized: Any,
                      batch: int, state: SinkState, *, in_progress: bool) -> Any:
    """``finalized`` (a DataFrame, or :data:`_NO_FILE`) with the rows of ``batch``'s
    in-progress files (``state``), through rotsink's reader pinned to ``batch``."""
    parts = [] if finalized is _NO_FILE else [_spark_part(finalized, state)]
    pending = in_progress_files(state) if in_progress else []
    if pending:
        tasks = {"numPartitions": str(_tasks_for(spark, sum(f.length for f in pending)))}
        if any(key.lower() == "numpartitions" for key in options):
            tasks = {}
        # rotsink's reader returns the committed columns in their order: no projection
        # the committed schema given: Spark need not ask rotsink's source for it
        parts.append(spark.read.format("rotsink").schema(_schema(state))
                     .options(**options, **tasks, asOfBatch=str(batch),
                              includeFinalized="false").load(path))
    if not parts:  # nothing committed to read yet: rotsink's reader gives the empty frame
        return spark.read.format("rotsink").options(**options,
                                                    asOfBatch=str(batch)).load(path)
    union = parts[0]
    for part in parts[1:]:
        union = union.union(part)  # the same columns in the same order
    return union


def _tasks_for(spark: Any, pending: int) -> int:
    """Tasks for ``pending`` bytes in progress: one per 4 MB (Spark's open cost), at most the
    session's parallelism. The rows in progress are few beside the finalized ones, and each
    task of a Python reader costs a worker's start; rotsink's own default (at least 8) is
    for reads of everything."""
    try:
        parallelism = int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext in the client
        parallelism = 2
    return max(1, min(parallelism, math.ceil(pending / OPEN_COST_BYTES)))


def _spark_part(df: Any, state: SinkState) -> Any:
    """Spark's rows in rotsink's columns: text's column renamed from ``value``, CSV's binary
    columns decoded from the base64 rotsink writes. SQL expressions, not
    ``pyspark.sql.functions``, whose columns are classic or Connect by the process's mode."""
    from pyspark.sql.types import BinaryType

    schema = _schema(state)
    data = [f.name for f in schema.fields if f.name not in state.partition_by]
    if state.format not in ("text", "csv") and schema.fieldNames() == data + list(
            state.partition_by):
        return df  # Spark's order already: data columns, then the partition columns
    expressions = []
    for field in schema.fields:
        name = _quoted(field.name)
        if state.format == "text" and field.name not in state.partition_by:
            expressions.append(f"value AS {name}")
        elif state.format == "csv" and isinstance(field.dataType, BinaryType):
            expressions.append(f"unbase64({name}) AS {name}")
        else:
            expressions.append(name)
    return df.selectExpr(*expressions)  # also rotsink's column order


def _quoted(name: str) -> str:
    """A column name as a SQL identifier.

    >>> _quoted("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


def _spark_reader(spark: Any, state: SinkState, schema: Any, hadoop: dict[str, str]) -> Any:
    """``spark.read`` for the path's format with the schema Spark should read it as, and
    ``hadoop``'s settings of its reader."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    if state.format == "text":
        data = [f for f in schema.fields if f.name not in state.partition_by]
        schema = StructType([StructField("value", StringType(), True) if f in data else f
                             for f in schema.fields])
    elif state.format == "csv":
        schema = StructType([StructField(f.name, StringType(), f.nullable)
                             if isinstance(f.dataType, BinaryType) else f
                             for f in schema.fields])
    reader = spark.read.schema(schema).options(**hadoop)
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
