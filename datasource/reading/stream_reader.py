"""``spark.readStream.format("rotsink")``: the change feed of a rotsink path.

Offsets are feed positions (:class:`commit_protocol.reading.change_feed.FeedPosition`): a sink batch
id plus the committed bytes and rows of the files in progress at it. A micro-batch returns
the rows the sink's batches in its range committed, each exactly once, from in-progress files
within one micro-batch of their commit (no wait for rolls).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.formats import FORMATS
from commit_protocol.formats.arrow import coalesce
from commit_protocol.log import MetadataLog
from commit_protocol.reading.change_feed import (
    FeedPosition,
    FeedSchemaChangedError,
    Piece,
    batches_within,
    feed_state,
    piece_batches,
    plan,
)
from commit_protocol.records.schema_evolution import recorded, widenings
from commit_protocol.records.state import SinkState
from commit_protocol.storage import open_storage
from commit_protocol.vocabulary.errors import EncryptionKeyError, OptionError
from datasource.options.names import (
    MAX_BATCHES_PER_TRIGGER,
    MAX_BYTES_PER_TRIGGER,
    MAX_FILES_PER_TRIGGER,
    NUM_PARTITIONS,
    STARTING_BATCH,
)
from datasource.options.sink import fs_options
from datasource.options.values import driver_path, parse_int, parse_size
from datasource.reading.reader import HAND_ON_BYTES, open_state, session_time_zone
from datasource.spark.compat import ADMISSION_CONTROL, AvailableNow, to_arrow_schema

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import ReadLimit



@dataclass(frozen=True)
class PiecesPartition(InputPartition):
    pieces: tuple[Piece, ...]


class RotSinkStreamReader(DataSourceStreamReader, AvailableNow):
    """Plans on the driver from the sink's log; reads pieces on executors.

    On PySpark 4.2 and newer Spark asks for each micro-batch's end from its start, within a
    read limit. Earlier releases ask ``latestOffset()`` with neither: each micro-batch then
    reads everything committed, and the feed's limits are refused when the query starts.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        options = {k.lower(): v for k, v in options.items()}  # Spark passes lower-cased keys
        _, _, state = open_state(options)
        self.path = driver_path(options["path"])
        self.fs_options = fs_options(options)
        self.log_options = {"path": self.path, **{k: v for k, v in options.items()
                                                  if k.startswith("fs.")}}
        self.state = state  # format, codec and partitioning are fixed for a path
        # the feed's columns are the schema committed as of this batch (Spark fixed them)
        self.schema_batch = state.batch_id
        self.until: int | None = None
        self.unknown_columns: tuple[str, ...] = ()
        self.widened: tuple[tuple[str, str, str], ...] = ()  # at that batch, its types widened
        self.keys = KeyRefs.from_options(options)
        if state.encrypted:
            if self.keys is None:
                raise EncryptionKeyError(f"{self.path} is encrypted: set the option "
                                         "encryption.key (or encryption.keys) to read it")
            self.keys.ring()
        self.arrow_schema = to_arrow_schema(schema)
        self.starting = options.get(STARTING_BATCH.lower(), "earliest").strip().lower()
        if self.starting not in ("earliest", "latest"):
            parse_int(STARTING_BATCH, self.starting, minimum=0)
        self.max_batches = _limit(options, MAX_BATCHES_PER_TRIGGER, parse_int)
        self.max_files = _limit(options, MAX_FILES_PER_TRIGGER, parse_int)
        self.max_bytes = _limit(options, MAX_BYTES_PER_TRIGGER, _size)
        for key in (MAX_BATCHES_PER_TRIGGER, MAX_FILES_PER_TRIGGER, MAX_BYTES_PER_TRIGGER):
            if key.lower() in options:
                ADMISSION_CONTROL.require(f"option {key}={options[key.lower()]!r}")
        text = options.get(NUM_PARTITIONS.lower())
        self.num_partitions = 2 if text is None else parse_int(NUM_PARTITIONS, text, minimum=1)
        self.target: int | None = None  # availableNow: the last sink batch of this run

    def _log(self) -> tuple[MetadataLog, int]:
        log, latest, state = open_state(self.log_options)  # the log as committed now
        self._check_schema(state)
        return log, latest

    def _check_schema(self, latest: SinkState) -> None:
        """Stop before a schema change the feed's schema does not know (columns added by
        ``schema.evolution`` after the feed started): Spark fixed the feed's columns when the
        query started, and rows of the new columns must not be dropped silently. Sets
        ``self.until``: the last sink batch of the feed's schema (None: no such change)."""
        later = [(batch, paths) for batch, paths in recorded(latest.extra)
                 if batch > self.schema_batch]
        if later:
            first, self.unknown_columns = min(later)
            self.until = first - 1
            self.widened = next((w for batch, w in widenings(latest.extra) if batch == first),
                                ())

    # -- offsets -------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        log, latest = self._log()
        if self.starting == "earliest":
            return FeedPosition(-1).to_json()
        if self.starting == "latest":
            return FeedPosition.of(log.read_state(latest)).to_json()
        first = int(self.starting)
        if first > latest + 1:
            raise OptionError(f"option {STARTING_BATCH}={first}: the sink has committed up to "
                              f"batch {latest}")
        return (FeedPosition(-1) if first == 0 else
                FeedPosition.of(feed_state(log, first - 1))).to_json()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """Runs on the driver: the end of the next micro-batch. PySpark 4.2 passes its start
        and a read limit; earlier releases nothing (see the class docstring)."""
        log, latest = self._log()
        if start is None:
            if self.until is not None:
                # the micro-batch's start is unknown here: stop at the change, and the
                # restarted query reads on from its checkpoint with the new columns
                raise self._schema_changed("")
            return FeedPosition.of(log.read_state(latest)).to_json()
        if self.target is not None:
            latest = min(latest, self.target)
        position = FeedPosition.from_json(start)
        if self.until is not None:
            if position.batch >= self.until:
                raise self._schema_changed(f". Its micro-batches so far reached sink batch "
                                           f"{position.batch}")
            latest = min(latest, self.until)
        if latest <= position.batch:
            return start
        return self._end_within(log, position, latest, limit)

    def _schema_changed(self, reached: str) -> FeedSchemaChangedError:
        assert self.until is not None
        changed = [f"added column(s) {', '.join(self.unknown_columns)}"] \
            if self.unknown_columns else []
        changed += [f"widened {', '.join(f'{p} from {a} to {b}' for p, a, b in self.widened)}"
                    ] if self.widened else []
        return FeedSchemaChangedError(
            f"the sink at {self.path} {' and '.join(changed)} at its "
            f"batch {self.until + 1} (schema.evolution), after this change feed started: "
            "restart the query to read them (the rows delivered so far are not read again; "
            f"rows of earlier batches read with nulls there){reached}")

    def _end_within(self, log: MetadataLog, position: FeedPosition, latest: int,
                    limit: ReadLimit | None) -> dict:
        """The end of a micro-batch from ``position`` to at most ``latest`` within ``limit``
        and the feed's own limits (PySpark 4.2's admission control)."""
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles

        max_files, max_bytes = self.max_files, self.max_bytes
        if isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        elif isinstance(limit, ReadAllAvailable):  # Spark's availableNow, or no limit set
            max_files = max_bytes = 0
        end = batches_within(log, position, latest, max_batches=self.max_batches,
                             max_files=max_files, max_bytes=max_bytes)
        return FeedPosition.of(feed_state(log, end)).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        """Runs on the driver (PySpark 4.2 and newer)."""
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles

        if self.max_files:
            return ReadMaxFiles(self.max_files)
        if self.max_bytes:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        _, self.target = self._log()

    # -- planning and reading ------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> list[PiecesPartition]:
        from commit_protocol.reading.change_feed import spread

        log, _ = self._log()
        end_batch = FeedPosition.from_json(end).batch
        pieces, _ = plan(log, FeedPosition.from_json(start), end_batch,
                         bulk=FORMATS[self.state.format].bulk)
        return [PiecesPartition(tuple(group)) for group in spread(pieces, self.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        storage = open_storage(self.path, self.fs_options)
        ring = self.keys.ring() if self.state.encrypted and self.keys else None
        time_zone = session_time_zone()
        batches = (batch for piece in getattr(partition, "pieces", ())
                   for batch in piece_batches(storage, piece, state=self.state,
                                              schema=self.arrow_schema, ring=ring,
                                              time_zone=time_zone))
        yield from coalesce(batches, HAND_ON_BYTES)

    def commit(self, end: dict) -> None:
        """Nothing to release: the feed's progress lives in Spark's checkpoint."""


def _size(key: str, text: str, *, minimum: int) -> int:
    size = parse_size(key, text)
    if size < minimum:
        raise OptionError(f"option {key}={text!r}: expected a byte count >= {minimum}")
    return size


def _limit(options: dict[str, str], key: str, parse) -> int:
    text = options.get(key.lower())
    return 0 if text is None else parse(key, text, minimum=1)
