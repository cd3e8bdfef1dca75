"""Parsing and validating the public options (DESIGN section 5) into a ``SinkConfig``.

Runs once on the driver; executors receive only the frozen result. Every error names the
option and the bad value.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping

from commit_protocol.config import RotationPolicy, SinkConfig
from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.durations import parse_duration_ms
from commit_protocol.errors import OptionError
from commit_protocol.formats import FORMATS, file_codec, format_named
from commit_protocol.formats.codecs import ROW_CODEC_SUFFIX, RowCodec, bulk_codec
from commit_protocol.tables import TableFormat, a_format_takes, table_option_names
from datasource.table_options import check_table_options, table_format

PATH = "path"
FORMAT = "format"
COMPRESSION = "compression"
COMPRESSION_LEVEL = "compression.level"
MAX_BYTES, MAX_RECORDS = "rotation.maxBytes", "rotation.maxRecords"
MAX_BATCHES = "rotation.maxBatches"
INTERVAL, INACTIVITY = "rotation.interval", "rotation.inactivity"
ROLL_ON_IDLE = "rotation.rollOnIdle"
PARTITION_BY = "partitionBy"
FILE_PREFIX, FILE_SUFFIX = "file.prefix", "file.suffix"
MAX_OPEN_FILES = "maxOpenFiles"
ROW_GROUP_BYTES, STRIPE_BYTES = "parquet.rowGroupBytes", "orc.stripeBytes"
COMPACT_INTERVAL, RETENTION = "log.compactInterval", "log.retention"
CLEANUP_DELAY = "log.cleanupDelay"
PARTITION_COMMIT_DELAY = "partition.commitDelay"
SCHEMA_EVOLUTION = "schema.evolution"
FSYNC = "commit.fsync"
ENCRYPTION_KEY, ENCRYPTION_KEY_ID = "encryption.key", "encryption.keyId"
ENCRYPTION_KEYS = "encryption.keys"
FS_PREFIX = "fs."
TABLE_FORMAT = "table.format"
# table.<key>: an option of the table format (table.identifier, table.catalog.<property>,
# table.storage.<KEY>...), which the format checks (commit_protocol.tables.TableFormat)
TABLE_PREFIX = "table."

# Encrypted row files get their own suffix: no Spark reader can decode them, and the name
# should say so rather than let a ".gz" reader fail on it.
ENCRYPTED_SUFFIX = ".enc"

# The reader's own options (``spark.read.format("rotsink")``).
INCLUDE_IN_PROGRESS, NUM_PARTITIONS = "includeInProgress", "numPartitions"
INCLUDE_FINALIZED, AS_OF_BATCH = "includeFinalized", "asOfBatch"
MAX_PARTITION_BYTES = "maxPartitionBytes"
# The change feed's (spark.readStream.format("rotsink")).
STARTING_BATCH = "startingBatch"
MAX_BATCHES_PER_TRIGGER = "maxBatchesPerTrigger"
MAX_FILES_PER_TRIGGER, MAX_BYTES_PER_TRIGGER = "maxFilesPerTrigger", "maxBytesPerTrigger"
# What Spark's own writer API puts among a sink's options (the user sets none of them with
# .option()): DataStreamWriter.start(path) adds ``path``, .queryName(name) ``queryName``, the
# query's checkpoint is the option ``checkpointLocation`` (Spark 4.0-4.3, classic and Connect:
# sql/core/.../classic/DataStreamWriter.scala, ``queryName`` and ``startInternal``).
# ``__partition_columns`` is Spark's own key for a writer's partitionBy(...) columns
# (DataSourceUtils.PARTITIONING_COLUMNS_KEY, a JSON list), which Spark hands only to its V1
# sinks; rotsink's wrapper of PySpark's writer hands it to rotsink (datasource.writer_calls).
CHECKPOINT_LOCATION = "checkpointLocation"
QUERY_NAME = "queryName"
WRITER_PARTITION_COLUMNS = "__partition_columns"
# rotsink's start of a query with Spark's streaming metrics on adds the query's metrics
# mailbox (datasource.spark_metrics); the user sets it no more than the three above.
METRICS_MAILBOX = "__metrics_mailbox"
SPARK_WRITER_OPTIONS = (PATH, CHECKPOINT_LOCATION, QUERY_NAME, WRITER_PARTITION_COLUMNS,
                        METRICS_MAILBOX)

SINK_OPTIONS = (PATH, FORMAT, COMPRESSION, COMPRESSION_LEVEL, MAX_BYTES, MAX_RECORDS,
                MAX_BATCHES, INTERVAL, INACTIVITY, ROLL_ON_IDLE, PARTITION_BY, FILE_PREFIX,
                FILE_SUFFIX, MAX_OPEN_FILES, ROW_GROUP_BYTES, STRIPE_BYTES, COMPACT_INTERVAL,
                RETENTION, CLEANUP_DELAY, PARTITION_COMMIT_DELAY, SCHEMA_EVOLUTION, FSYNC,
                ENCRYPTION_KEY, ENCRYPTION_KEY_ID, ENCRYPTION_KEYS, TABLE_FORMAT,
                *SPARK_WRITER_OPTIONS[1:])
FEED_OPTIONS = (STARTING_BATCH, MAX_BATCHES_PER_TRIGGER, MAX_FILES_PER_TRIGGER,
                MAX_BYTES_PER_TRIGGER)
READ_OPTIONS = (PATH, INCLUDE_IN_PROGRESS, INCLUDE_FINALIZED, AS_OF_BATCH, NUM_PARTITIONS,
                MAX_PARTITION_BYTES, ENCRYPTION_KEY, ENCRYPTION_KEYS, *FEED_OPTIONS)

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30}


def parse_size(key: str, text: str) -> int:
    """Bytes from ``"134217728"``, ``"64mb"``, ``"1g"``."""
    match = re.match(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$", text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise OptionError(f"option {key}={text!r}: expected a byte count such as 134217728, "
                          "'64mb' or '1g'")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def parse_bool(key: str, text: str) -> bool:
    """``true`` / ``false`` (any case), as Spark's own boolean options."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {key}={text!r}: expected true or false")
    return value == "true"


def parse_int(key: str, text: str, *, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {key}={text!r}: expected an integer >= {minimum}") from None
    if value < minimum:
        raise OptionError(f"option {key}={text!r}: expected an integer >= {minimum}")
    return value


def driver_path(path: str) -> str:
    """``path`` as tasks must take it: a relative local path made absolute where it was given,
    on the driver, as Spark makes its own file sink's path (a task would resolve it in its
    executor's working directory). URLs and absolute paths are returned as they are.

    >>> driver_path("/data/out"), driver_path("s3://bucket/out")
    ('/data/out', 's3://bucket/out')
    >>> driver_path("out") == os.path.join(os.getcwd(), "out")
    True
    """
    if "://" in path or os.path.isabs(path):
        return path
    return os.path.abspath(path)


def parse_sink_options(options: Mapping[str, str]) -> SinkConfig:
    """Validate the writer's options (case-insensitive keys, as Spark passes them)."""
    opts = {k.lower(): v for k, v in options.items()}
    reject_unknown(opts, reading=False)
    def get(key: str, default: str = "") -> str:
        return opts.get(key.lower(), default)

    def given(key: str) -> str | None:
        return opts.get(key.lower())

    path = get(PATH)
    if not path:
        raise OptionError("option path is required: .option('path', '/data/out') or .start(path)")
    path = driver_path(path)
    fmt = format_named(get(FORMAT, "jsonl").lower()).name
    level_text = given(COMPRESSION_LEVEL)
    level = None if level_text is None else parse_int(COMPRESSION_LEVEL, level_text, minimum=0)
    compression = _compression(fmt, given(COMPRESSION), level)
    keys = _write_keys(opts)
    if keys is not None and fmt == "orc":
        raise OptionError(f"option {ENCRYPTION_KEY} with format orc: pyarrow has no ORC "
                          "encryption, so rotsink cannot encrypt ORC files; use format parquet "
                          "(Parquet Modular Encryption) or a row format")
    config = SinkConfig(
        path=path, format=fmt, compression=compression, compression_level=level, keys=keys,
        rotation=RotationPolicy(
            max_bytes=parse_size(MAX_BYTES, get(MAX_BYTES, "134217728")),
            max_records=parse_int(MAX_RECORDS, get(MAX_RECORDS, "0"), minimum=0),
            max_batches=parse_int(MAX_BATCHES, get(MAX_BATCHES, "0"), minimum=0),
            interval_ms=parse_duration_ms(INTERVAL, get(INTERVAL, "60s")),
            inactivity_ms=parse_duration_ms(INACTIVITY, get(INACTIVITY, "60s")),
            roll_on_idle=parse_bool(ROLL_ON_IDLE, get(ROLL_ON_IDLE, "false")),
        ),
        partition_by=partition_columns(given(PARTITION_BY), given(WRITER_PARTITION_COLUMNS)),
        file_prefix=_prefix(get(FILE_PREFIX, "part")),
        file_suffix=get(FILE_SUFFIX) or _default_suffix(fmt, compression, keys is not None),
        max_open_files=parse_int(MAX_OPEN_FILES, get(MAX_OPEN_FILES, "100"), minimum=1),
        row_group_bytes=_row_group_bytes(fmt, given(ROW_GROUP_BYTES), given(STRIPE_BYTES)),
        compact_interval=parse_int(COMPACT_INTERVAL, get(COMPACT_INTERVAL, "10"), minimum=1),
        compact_interval_explicit=given(COMPACT_INTERVAL) is not None,
        retention_ms=None if get(RETENTION) in ("", "off")
        else parse_duration_ms(RETENTION, get(RETENTION)),
        cleanup_delay_ms=parse_duration_ms(CLEANUP_DELAY, get(CLEANUP_DELAY, "10m")),
        partition_commit_delay_ms=None if get(PARTITION_COMMIT_DELAY) in ("", "off")
        else parse_duration_ms(PARTITION_COMMIT_DELAY, get(PARTITION_COMMIT_DELAY)),
        fs_options=fs_options(options),
        schema_evolution=_schema_evolution(get(SCHEMA_EVOLUTION, "none")),
        fsync=parse_bool(FSYNC, get(FSYNC, "true")),
        table_format=table_format(given(TABLE_FORMAT)),
        table_options=_table_options(options, table_format(given(TABLE_FORMAT))),
        query_name=get(QUERY_NAME).strip(),
        metrics_mailbox=given(METRICS_MAILBOX),
    )
    check_table_options(config)
    return config


def _table_options(options: Mapping[str, str], entry: TableFormat | None) -> dict[str, str]:
    """The ``table.*`` options without the prefix, each key as its format names it (Spark
    passes them lower-cased)."""
    given = {k[len(TABLE_PREFIX):]: v for k, v in options.items()
             if k.lower().startswith(TABLE_PREFIX) and k.lower() != TABLE_FORMAT.lower()}
    return given if entry is None else {entry.canonical(k): v for k, v in given.items()}


def fs_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``fs.*`` options with the prefix removed: settings of the fsspec filesystem,
    for writers and readers alike."""
    return {k[len(FS_PREFIX):]: v for k, v in options.items() if k.lower().startswith(FS_PREFIX)}


def _row_group_bytes(fmt: str, row_group: str | None, stripe: str | None) -> int:
    """``parquet.rowGroupBytes`` (128 MB) or ``orc.stripeBytes`` (64 MB, ORC's default), the
    one of the path's format: the other format's option is refused rather than ignored."""
    key, text, default = ((STRIPE_BYTES, stripe, "64m") if fmt == "orc"
                          else (ROW_GROUP_BYTES, row_group, "128m"))
    other, other_text = (ROW_GROUP_BYTES, row_group) if fmt == "orc" else (STRIPE_BYTES, stripe)
    if other_text is not None:
        raise OptionError(f"option {other}={other_text!r} is for format "
                          f"{other.split('.')[0]}; this path is format {fmt}"
                          + (f" (its option is {key})" if FORMATS[fmt].bulk else ""))
    size = parse_size(key, text or default)
    if size < 1:
        raise OptionError(f"option {key}={text!r}: expected a byte count >= 1")
    return size


def reject_unknown(options: Mapping[str, str], *, reading: bool) -> None:
    """Refuse an option the sink (or, ``reading``, the reader) does not take, naming it, the
    closest known name when it looks misspelt, and where an option of the other side
    belongs; ``fs.*`` options go to the filesystem unchecked.

    >>> reject_unknown({"rotation.maxbyte": "1"}, reading=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    commit_protocol.errors.OptionError: unknown option rotation.maxbyte='1'; did you mean ...
    """
    own, other = (READ_OPTIONS, SINK_OPTIONS) if reading else \
        ((*SINK_OPTIONS, *sorted(table_option_names())), READ_OPTIONS)
    names = {name.lower(): name for name in own}
    for key, value in options.items():
        lowered = key.lower()
        if lowered in names or lowered.startswith(FS_PREFIX) or (
                not reading and lowered.startswith(TABLE_PREFIX)
                and a_format_takes(lowered[len(TABLE_PREFIX):])):
            continue
        side = {name.lower() for name in other}
        if lowered in side:
            where = ("is a sink option (writeStream): the reader takes the format, codec and "
                     "layout from the path's log" if reading else
                     "is a reader option (spark.read.format('rotsink'))")
            raise OptionError(f"option {key}={value!r} {where}")
        close = _closest(lowered, names)
        hint = f"; did you mean {close}?" if close else "."
        raise OptionError(f"unknown option {key}={value!r}{hint} See docs/options.md")


def _closest(lowered: str, names: Mapping[str, str]) -> str | None:
    """The known option ``lowered`` most likely meant: a close spelling, else one whose last
    segment is the same word under another prefix (``rotation.maxOpenFiles`` for
    ``maxOpenFiles``, ``maxBytes`` for ``rotation.maxBytes``).

    >>> _closest("rotation.maxopenfiles", {"maxopenfiles": "maxOpenFiles"})
    'maxOpenFiles'
    """
    close = difflib.get_close_matches(lowered, names, n=1, cutoff=0.8)
    if close:
        return names[close[0]]
    last = lowered.rsplit(".", 1)[-1]
    same = sorted(name for key, name in names.items() if key.rsplit(".", 1)[-1] == last)
    return same[0] if same else None


def _compression(fmt: str, value: str | None, level: int | None) -> str:
    """The codec, checked together with its level (a bad pair fails here, not in a task)."""
    if FORMATS[fmt].compressions:  # bulk formats and Avro: codecs inside the file
        return bulk_codec(FORMATS[fmt], value or FORMATS[fmt].default_compression, level)
    return RowCodec((value or "none").lower(), level).name


def _write_keys(opts: Mapping[str, str]) -> KeyRefs | None:
    """The key references, resolved once here so a bad one fails at start; the derived key
    id is fixed now so that every executor writes the same id."""
    keys = KeyRefs.from_options(opts)
    if keys is None:
        return None
    if keys.write_ref is None:
        raise OptionError(f"option {ENCRYPTION_KEYS} is for reading; writing encrypted output "
                          f"needs {ENCRYPTION_KEY}")
    keys.ring()  # resolves every reference: a bad one fails now, naming its option
    key_id, _ = keys.write_key()
    return KeyRefs(keys.write_ref, key_id, keys.read_refs)


def _schema_evolution(text: str) -> str:
    from commit_protocol.schema_evolution import MODES

    modes = {mode.lower(): mode for mode in MODES}
    if text.strip().lower() not in modes:
        raise OptionError(f"option {SCHEMA_EVOLUTION}={text!r}: expected one of "
                          f"{', '.join(MODES)}")
    return modes[text.strip().lower()]


def partition_columns(option: str | None, writer_call: str | None) -> tuple[str, ...]:
    """The partition columns, from the ``partitionBy`` option or the writer's
    ``.partitionBy(...)`` (``__partition_columns``, a JSON list); both at once must name the
    same columns in the same order.

    >>> partition_columns("day, hour", None), partition_columns(None, '["day"]')
    (('day', 'hour'), ('day',))
    >>> partition_columns("hour", '["day"]')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    commit_protocol.errors.OptionError: option partitionBy='hour' and .partitionBy('day') ...
    """
    from_option = _partition_by(option or "")
    if writer_call is None:
        return from_option
    from_call = _writer_columns(writer_call)
    if option is not None and from_option != from_call:
        call = ", ".join(repr(c) for c in from_call)
        raise OptionError(f"option partitionBy={option!r} and .partitionBy({call}) name "
                          "different columns: give the columns once, either way")
    return from_call


def _writer_columns(text: str) -> tuple[str, ...]:
    try:
        columns = json.loads(text)
    except ValueError:
        columns = None
    if not isinstance(columns, list) or not all(isinstance(c, str) and c for c in columns):
        raise OptionError(f"option {WRITER_PARTITION_COLUMNS}={text!r}: expected a JSON list "
                          "of column names (what .partitionBy(...) sets)")
    return _partition_by(",".join(columns), shown=f".partitionBy({text[1:-1]})")


def _partition_by(text: str, *, shown: str = "") -> tuple[str, ...]:
    columns = tuple(c.strip() for c in text.split(",") if c.strip())
    if len(set(columns)) != len(columns):
        raise OptionError(f"{shown or f'option partitionBy={text!r}'}: a column is listed twice")
    return columns


def _prefix(text: str) -> str:
    if not text or text[0] in "._" or "/" in text:
        raise OptionError(f"option file.prefix={text!r}: expected a non-empty name without '/' "
                          "that does not start with '.' or '_' (readers would hide the files)")
    return text


def _default_suffix(fmt: str, compression: str, encrypted: bool) -> str:
    suffix = FORMATS[fmt].suffix
    if FORMATS[fmt].bulk:
        return suffix
    return (suffix + ROW_CODEC_SUFFIX[file_codec(fmt, compression)]
            + (ENCRYPTED_SUFFIX if encrypted else ""))
