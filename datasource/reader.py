"""``spark.read.format("rotsink")``: the committed output, as the log lists it.

Finalized files come from the log's entries; in-progress files (option ``includeInProgress``,
default true) are read up to their committed offset, never beyond.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.errors import EncryptionKeyError, OptionError, RotsinkError
from commit_protocol.log import MetadataLog
from commit_protocol.naming import from_uri
from commit_protocol.reading import CommittedFile, committed_files, open_committed, read_batches
from commit_protocol.state import SinkState
from commit_protocol.storage import open_storage
from datasource.options import (
    FEED_OPTIONS,
    INCLUDE_IN_PROGRESS,
    NUM_PARTITIONS,
    fs_options,
    parse_int,
    reject_unknown,
)

# Spark's own file sources aim at 128 MB per partition (spark.sql.files.maxPartitionBytes).
PARTITION_BYTES = 128 << 20
MIN_PARTITIONS = 8


def open_state(options: dict[str, str]) -> tuple[MetadataLog, int, SinkState]:
    """The log, latest batch and state of the path a reader's ``options`` name (options
    checked); a ``RotsinkError`` if nothing is committed there."""
    reject_unknown(options, reading=True)
    path = options.get("path")
    if not path:
        raise OptionError("option path is required: spark.read.format('rotsink').load(path)")
    storage = open_storage(path, fs_options(options))
    committed = open_committed(storage)
    if committed is None:
        raise RotsinkError(f"{path} has no rotsink output: no committed batch in _spark_metadata")
    return committed


def committed_schema(options: dict[str, str]) -> StructType:
    """The schema committed at the path (driver)."""
    _, _, state = open_state(options)
    return StructType.fromJson(json.loads(state.schema_json))


@dataclass(frozen=True)
class FilesPartition(InputPartition):
    files: tuple[CommittedFile, ...]


class RotSinkReader(DataSourceReader):
    """Plans on the driver (one log read), reads on executors (Arrow batches, file by file)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        options = {k.lower(): v for k, v in options.items()}  # Spark passes lower-cased keys
        for name in FEED_OPTIONS:
            if name.lower() in options:
                raise OptionError(f"option {name}={options[name.lower()]!r} is for the change "
                                  "feed (spark.readStream.format('rotsink')); a batch read "
                                  "returns every committed row")
        include = options.get(INCLUDE_IN_PROGRESS.lower(), "true").lower()
        if include not in ("true", "false"):
            raise OptionError(f"option {INCLUDE_IN_PROGRESS}={include!r}: expected true or false")
        log, latest, state = open_state(options)
        self.path = options["path"]
        self.state = state
        self.fs_options = fs_options(options)
        self.keys = KeyRefs.from_options(options)  # references only; resolved per task
        if state.encrypted:
            if self.keys is None:
                raise EncryptionKeyError(f"{self.path} is encrypted: set the option "
                                         "encryption.key (or encryption.keys) to read it")
            self.keys.ring()  # a reference that does not resolve fails here, at planning
        self.files = committed_files(log, latest, state, include_in_progress=include == "true")
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        text = options.get(NUM_PARTITIONS.lower())
        self.num_partitions = None if text is None else parse_int(NUM_PARTITIONS, text, minimum=1)

    def partitions(self) -> list[FilesPartition]:
        """Whole files spread over partitions balanced by bytes: ``numPartitions``, or one per
        ``PARTITION_BYTES`` but at least ``MIN_PARTITIONS`` (small outputs still use every
        core), never more than there are files."""
        total = sum(f.length for f in self.files)
        wanted = self.num_partitions or max(MIN_PARTITIONS, math.ceil(total / PARTITION_BYTES))
        buckets: list[list[CommittedFile]] = [[] for _ in range(min(wanted,
                                                                    max(1, len(self.files))))]
        sizes = [0] * len(buckets)
        for f in sorted(self.files, key=lambda f: -f.length):
            i = sizes.index(min(sizes))
            buckets[i].append(f)
            sizes[i] += f.length
        return [FilesPartition(tuple(b)) for b in buckets if b]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs on an executor: decode each file's committed bytes into Arrow batches."""
        storage = open_storage(self.path, self.fs_options)
        ring = self.keys.ring() if self.state.encrypted and self.keys else None
        time_zone = session_time_zone()
        # Spark hands an empty plan one ``InputPartition(None)``: nothing committed to read.
        for f in getattr(partition, "files", ()):
            yield from read_batches(storage, f, state=self.state, schema=self.arrow_schema,
                                    ring=ring, time_zone=time_zone)


def session_time_zone() -> str:
    """The reading session's ``spark.sql.session.timeZone`` (executor): Spark's readers
    read timestamp partition directories in it, and so does rotsink's."""
    from pyspark import TaskContext

    context = TaskContext.get()
    zone = context.getLocalProperty("spark.sql.session.timeZone") if context else None
    return zone or "UTC"


__all__ = ["RotSinkReader", "committed_schema", "from_uri"]
