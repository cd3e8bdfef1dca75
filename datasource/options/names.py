"""The public options' names (DESIGN section 5; docs/options.md), who takes each (the sink,
the reader, the change feed, Spark's own writer API), and the refusal of a name nobody takes.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from commit_protocol.tables import a_format_takes, table_option_names
from commit_protocol.vocabulary.errors import OptionError

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
FEED_RETENTION = "feed.retention"
PARTITION_COMMIT_DELAY = "partition.commitDelay"
SCHEMA_EVOLUTION = "schema.evolution"
FSYNC = "commit.fsync"
ENCRYPTION_KEY, ENCRYPTION_KEY_ID = "encryption.key", "encryption.keyId"
ENCRYPTION_KEYS = "encryption.keys"
FS_PREFIX = "fs."
TABLE_FORMAT = "table.format"
ERRORS_MODE, QUARANTINE_PATH = "errors.mode", "errors.quarantinePath"
MAX_QUARANTINED_SHARE = "errors.maxQuarantinedShare"
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
# sinks; rotsink's wrapper of PySpark's writer hands it to rotsink
# (datasource.writing.writer_calls).
CHECKPOINT_LOCATION = "checkpointLocation"
QUERY_NAME = "queryName"
WRITER_PARTITION_COLUMNS = "__partition_columns"
# rotsink's start of a query with Spark's streaming metrics on adds the query's metrics
# mailbox (datasource.spark.spark_metrics); the user sets it no more than the three above.
METRICS_MAILBOX = "__metrics_mailbox"
SPARK_WRITER_OPTIONS = (PATH, CHECKPOINT_LOCATION, QUERY_NAME, WRITER_PARTITION_COLUMNS,
                        METRICS_MAILBOX)

SINK_OPTIONS = (PATH, FORMAT, COMPRESSION, COMPRESSION_LEVEL, MAX_BYTES, MAX_RECORDS,
                MAX_BATCHES, INTERVAL, INACTIVITY, ROLL_ON_IDLE, PARTITION_BY, FILE_PREFIX,
                FILE_SUFFIX, MAX_OPEN_FILES, ROW_GROUP_BYTES, STRIPE_BYTES, COMPACT_INTERVAL,
                RETENTION, CLEANUP_DELAY, FEED_RETENTION, PARTITION_COMMIT_DELAY,
                SCHEMA_EVOLUTION, FSYNC, ENCRYPTION_KEY, ENCRYPTION_KEY_ID, ENCRYPTION_KEYS,
                TABLE_FORMAT, ERRORS_MODE, QUARANTINE_PATH, MAX_QUARANTINED_SHARE,
                *SPARK_WRITER_OPTIONS[1:])
FEED_OPTIONS = (STARTING_BATCH, MAX_BATCHES_PER_TRIGGER, MAX_FILES_PER_TRIGGER,
                MAX_BYTES_PER_TRIGGER)
READ_OPTIONS = (PATH, INCLUDE_IN_PROGRESS, INCLUDE_FINALIZED, AS_OF_BATCH, NUM_PARTITIONS,
                MAX_PARTITION_BYTES, ENCRYPTION_KEY, ENCRYPTION_KEYS, *FEED_OPTIONS)


def reject_unknown(options: Mapping[str, str], *, reading: bool) -> None:
    """Refuse an option the sink (or, ``reading``, the reader) does not take, naming it, the
    closest known name when it looks misspelt, and where an option of the other side
    belongs; ``fs.*`` options go to the filesystem unchecked.

    >>> reject_unknown({"rotation.maxbyte": "1"}, reading=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.OptionError: unknown option rotation.maxbyte='1'; \
did you mean ...
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

