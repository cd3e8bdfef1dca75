"""Part files as one task sees them: a row file appended to, or a Parquet file written whole.

A task hands each file rows with :meth:`PartFile.add`, which takes as many as fit the file's
record and size limits and says how many; the task rolls a file that took none or is
:meth:`~PartFile.full`. Both kinds report the same facts to the driver (a
:class:`FileReport`): the temp name, the committed offset the task started from, where its
bytes end, and whether the task rolled the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa

from commit_protocol import failpoints
from commit_protocol.config import SinkConfig
from commit_protocol.crypto.sealed import MAX_HEADER, Sealer
from commit_protocol.formats import FORMATS, encode_rows
from commit_protocol.formats.codecs import RowCodec
from commit_protocol.messages import FileReport
from commit_protocol.storage import Storage


@dataclass
class RowSize:
    """Encoded bytes per row in the task's last row-format append, shared by its files.

    A chunk of rows many files long is cut to a little more than one file's room before it is
    encoded, so each roll costs about two encodings of one file, whatever the chunk size; a
    new file starts from the estimate its predecessor left.
    """

    bytes_per_row: float = 0.0


class PartFile:
    """Common bookkeeping and limits; subclasses write the bytes."""


    def __init__(self, storage: Storage, config: SinkConfig, *, partition: int, directory: str,
                 name: str, temp: str, start: int, records: int,
                 fenced_from: str | None = None, limited: bool = True) -> None:
        self.storage = storage
        self.policy = config.rotation
        self.limited = limited  # False: take every row given (a staged file's conversion)
        self.reason: str | None = None  # why the task rolled it, when not a size or count
        self.partition = partition
        self.directory = directory
        self.name = name
        self.temp = temp
        self.start = start
        self.end = start
        self.records = records
        self.new_records = 0
        self.closed = False
        self.fenced_from = fenced_from

    def report(self) -> FileReport:
        return FileReport(partition=self.partition, directory=self.directory, name=self.name,
                          temp=self.temp, start=self.start, end=self.end, records=self.records,
                          new_records=self.new_records, closed=self.closed,
                          fenced_from=self.fenced_from, reason=self.reason)

    def add(self, rows: pa.RecordBatch) -> int:
        """Take as many of ``rows`` (from the first) as fit the file's limits; return how
        many. 0 means the file is full: roll it and give the rows to a new file."""
        raise NotImplementedError

    def room(self, rows: int) -> int:
        """How many of ``rows`` more records ``rotation.maxRecords`` lets this file take."""
        limit = self.policy.max_records if self.limited else 0
        return rows if not limit else max(0, min(rows, limit - self.records))

    def size(self) -> int:
        """Bytes that count against ``rotation.maxBytes``."""
        return self.end

    def byte_limit(self) -> int:
        """``rotation.maxBytes`` in this file's own bytes (0: no limit)."""
        return self.policy.max_bytes if self.limited else 0

    def full(self) -> bool:
        """Whether a record or size limit is reached: the task rolls the file now."""
        limit_records, limit_bytes = self.policy.max_records, self.policy.max_bytes
        return bool((limit_records and self.records >= limit_records)
                    or (limit_bytes and self.size() >= limit_bytes))

    def release(self) -> None:
        """Give back the file handle (the least recently used file when over the cap)."""

    def roll(self) -> None:
        """Finish the file: the driver publishes it at commit."""
        self.release()
        self.closed = True


class RowPartFile(PartFile):
    """jsonl / csv / text: each batch's encoding is appended; the file spans micro-batches.

    An append is encoded, compressed as one independent member and, with encryption, sealed
    as records bound to its file offset: every committed offset is a clean cut.
    """

    def __init__(self, storage: Storage, config: SinkConfig, *, estimate: RowSize,
                 **kwargs: Any) -> None:
        super().__init__(storage, config, **kwargs)
        self.format, self.codec = self._encoding(config)
        self.keys = config.keys if config.encrypted else None
        self.estimate = estimate
        self._sealer: Sealer | None = None
        self._handle: BinaryIO | None = None

    def _encoding(self, config: SinkConfig) -> tuple[str, RowCodec]:
        """The row format and codec of the file's bytes."""
        return config.format, RowCodec(config.compression, config.compression_level)

    def add(self, rows: pa.RecordBatch) -> int:
        """Append as many of ``rows`` as fit under ``maxRecords`` and ``maxBytes``.

        Returns 0 when not even one more row fits a file that has rows, so a file outgrows
        ``maxBytes`` only when its first row alone does.
        """
        rows = rows.slice(0, self.room(rows.num_rows))
        max_bytes = self.byte_limit()
        if not rows.num_rows or not max_bytes:
            if rows.num_rows:
                self.append(self.encode(rows), rows.num_rows)
            return rows.num_rows
        room = max_bytes - self.end
        if self.estimate.bytes_per_row:
            rows = rows.slice(0, max(1, math.ceil(1.25 * room / self.estimate.bytes_per_row)))
        data = self.encode(rows)
        self.estimate.bytes_per_row = len(data) / rows.num_rows
        while len(data) > room and rows.num_rows > 1:
            fit = max(1 if not self.records else 0, rows.num_rows * max(room, 0) // len(data))
            if fit == 0:
                break
            rows = rows.slice(0, fit)
            data = self.encode(rows)
        if len(data) > room and self.records:
            return 0
        self.append(data, rows.num_rows)
        return rows.num_rows

    def encode(self, batch: pa.RecordBatch) -> bytes:
        """The bytes appending ``batch`` at the current end (call :meth:`append` next)."""
        data = self.codec.compress(encode_rows(self.format, batch, with_header=self.end == 0))
        if self.keys is None:
            return data
        sealer = self._sealer_for_append()
        header = sealer.header if self.end == 0 else b""
        return header + sealer.seal(data, self.end + len(header))

    def _sealer_for_append(self) -> Sealer:
        assert self.keys is not None, "only encrypted files are sealed"
        if self._sealer is None:
            if self.end == 0:
                self._sealer = Sealer.new_file(*self.keys.write_key())
            else:  # continue the file with the key its header names
                self._sealer = Sealer.resume(self.storage.read(self.temp, 0, MAX_HEADER),
                                             self.keys.ring(), path=self.temp)
        return self._sealer

    def append(self, data: bytes, rows: int) -> None:
        if self._handle is None:
            self._handle = self.storage.open_append(self.temp)
        if failpoints.active():
            self._torn_write(data)
        else:
            self._handle.write(data)
        self.end += len(data)
        self.records += rows
        self.new_records += rows

    def _torn_write(self, data: bytes) -> None:
        """Tests only: write in two halves, so a failpoint can die between them as a crash
        mid-write would (the first half reaches the OS first)."""
        assert self._handle is not None
        half = len(data) // 2
        self._handle.write(data[:half])
        self._handle.flush()
        failpoints.hit("task.mid_append")
        self._handle.write(data[half:])

    def roll(self) -> None:
        if self.keys is not None and self.end > 0:
            self.append(self._sealer_for_append().final(self.end), 0)
        super().roll()

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


# Rows a task encodes to Parquet in memory to learn the finished/staged size ratio: enough
# that a file's fixed costs (schema, footer) do not dominate, a few ms of work.
RATIO_SAMPLE_ROWS = 100_000


@dataclass
class FinishedRatio:
    """Bytes of a finished bulk file per staged byte, shared by a task's staged files.

    ``rotation.maxBytes`` is the size of the finished (Parquet) file, unknown until the rows
    are encoded: a staged file rolls once its staged bytes times this ratio reach the limit.
    The ratio is measured on the task's first chunk (encoded to Parquet in memory) and
    replaced by the exact ratio of each file the task converts.
    """

    value: float = 0.0

    def measure(self, rows: pa.RecordBatch, staged: int, config: SinkConfig) -> None:
        import io

        import pyarrow.parquet as pq

        from commit_protocol.formats.parquet import parquet_dictionary_columns

        table = pa.Table.from_batches([rows])
        sink = io.BytesIO()
        pq.write_table(table, sink, compression=config.compression,
                       compression_level=config.compression_level,
                       use_dictionary=parquet_dictionary_columns(table))
        self.value = max(sink.tell() / max(staged, 1), 1e-3)


class StagedPartFile(RowPartFile):
    """A bulk format's in-progress file: rows staged as Arrow IPC streams (a row format
    without codec, sealed when encrypted), spanning micro-batches like any row file; when
    it rolls, the task encodes it into the finished file (:mod:`commit_protocol.conversion`).
    """

    def __init__(self, storage: Storage, config: SinkConfig, *, estimate: RowSize,
                 ratio: FinishedRatio, **kwargs: Any) -> None:
        super().__init__(storage, config, estimate=estimate, **kwargs)
        self.config = config
        self.ratio = ratio
        self.final_temp: str | None = None
        self.final_size = 0

    def _encoding(self, config: SinkConfig) -> tuple[str, RowCodec]:
        staging = FORMATS[config.format].staging
        assert staging is not None, f"{config.format} has no staged form"
        return staging, RowCodec("none")  # the finished file compresses, at the roll

    def add(self, rows: pa.RecordBatch) -> int:
        if not self.ratio.value and rows.num_rows:  # the limit needs it before the first add
            from commit_protocol.formats.ipc import encode

            sample = rows.slice(0, RATIO_SAMPLE_ROWS)
            self.ratio.measure(sample, len(encode(pa.Table.from_batches([sample]))),
                               self.config)
        return super().add(rows)

    def byte_limit(self) -> int:
        """``maxBytes`` of finished file as staged bytes (none until the ratio is known)."""
        max_bytes = self.policy.max_bytes
        return int(max_bytes / self.ratio.value) if max_bytes and self.ratio.value else 0

    def size(self) -> int:
        """The finished file's estimated size."""
        return int(self.end * self.ratio.value)

    def roll(self) -> None:
        """Close the staged file and write its finished file (no FINAL record: the staged
        bytes are never published)."""
        from commit_protocol.conversion import convert_staged

        self.release()
        self.closed = True
        failpoints.hit("task.before_convert")
        self.final_temp, self.final_size, _ = convert_staged(
            self.storage, self.temp, self.end, self.config, name=self.name,
            partition=self.partition, directory=self.directory)
        if self.end:
            self.ratio.value = max(self.final_size / self.end, 1e-3)
        failpoints.hit("task.after_convert")

    def report(self) -> FileReport:
        from dataclasses import replace

        return replace(super().report(), final_temp=self.final_temp, final_size=self.final_size)


class ParquetPartFile(PartFile):
    """Parquet written whole: the finished file a staged file is converted into.

    Arrow batches arrive 10,000 rows at a time; each ``write_batch`` of pyarrow's writer would
    make a row group of its own (small row groups compress worse, dictionaries restart, readers
    pay per group), so batches are buffered and written as one row group once they hold
    ``flush_bytes`` of Arrow data, when the task caps its buffers, or when the file finishes.
    """

    def __init__(self, storage: Storage, config: SinkConfig, **kwargs: Any) -> None:
        super().__init__(storage, config, **kwargs)
        self.config = config
        # a converted file is already within its size limit: row groups of rowGroupBytes
        self.flush_bytes = config.row_group_bytes if not self.limited else min(
            config.row_group_bytes, config.rotation.max_bytes or 1 << 62)
        self.buffered: list[pa.RecordBatch] = []
        self.buffered_bytes = 0
        self._handle: BinaryIO | None = None
        self._writer: Any = None  # a pyarrow.parquet.ParquetWriter once the first group flushes

    def add(self, rows: pa.RecordBatch) -> int:
        """Buffer as many of ``rows`` as ``maxRecords`` lets this file take (``maxBytes`` is
        checked after each add: the encoded size is known only once a row group is written)."""
        batch = rows.slice(0, self.room(rows.num_rows))
        if batch.num_rows:
            self._buffer(batch)
        return batch.num_rows

    def _buffer(self, batch: pa.RecordBatch) -> None:
        self.buffered.append(batch)
        self.buffered_bytes += batch.nbytes
        self.records += batch.num_rows
        self.new_records += batch.num_rows
        if self.buffered_bytes >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the buffered batches as one row group."""
        if not self.buffered:
            return
        table = pa.Table.from_batches(self.buffered)
        if self._writer is None:
            import pyarrow.parquet as pq

            from commit_protocol.formats.parquet import parquet_dictionary_columns

            self._handle = self.storage.open_append(self.temp)
            self._writer = pq.ParquetWriter(self._handle, table.schema,
                                            compression=self.config.compression,
                                            compression_level=self.config.compression_level,
                                            use_dictionary=parquet_dictionary_columns(table),
                                            **self._encryption())
        # a batch larger than a row group (a staged chunk) is cut into row groups by bytes
        rows_per_group = max(1, self.flush_bytes * table.num_rows // max(table.nbytes, 1))
        self._writer.write_table(table, row_group_size=rows_per_group)
        self.buffered, self.buffered_bytes = [], 0

    def _encryption(self) -> dict:
        """Parquet Modular Encryption with the writing key as footer key, when configured."""
        if not self.config.encrypted:
            return {}
        from commit_protocol.crypto.parquet import encryption_properties

        keys = self.config.keys
        assert keys is not None  # encrypted implies keys
        key_id, _ = keys.write_key()
        return {"encryption_properties": encryption_properties(keys.ring(), key_id)}

    def size(self) -> int:
        """Bytes on disk so far (buffered rows not counted: their encoded size is unknown)."""
        return self._handle.tell() if self._handle is not None else 0

    def release(self) -> None:
        # Parquet has no reopen: giving back the handle finishes the file.
        self.flush()
        if self._handle is not None and self._writer is not None:
            self._writer.close()
            self._handle.close()
            self._handle = None
            self.end = self.storage.size(self.temp)
            self.closed = True
