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
from commit_protocol.formats import encode_rows
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

    rolls_at_task_end = False  # bulk files cannot be reopened by a later task
    buffered_bytes = 0  # rows taken but not yet written (Parquet row groups)

    def __init__(self, storage: Storage, config: SinkConfig, *, partition: int, directory: str,
                 name: str, temp: str, start: int, records: int,
                 fenced_from: str | None = None) -> None:
        self.storage = storage
        self.policy = config.rotation
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
                          fenced_from=self.fenced_from)

    def add(self, rows: pa.RecordBatch) -> int:
        """Take as many of ``rows`` (from the first) as fit the file's limits; return how
        many. 0 means the file is full: roll it and give the rows to a new file."""
        raise NotImplementedError

    def room(self, rows: int) -> int:
        """How many of ``rows`` more records ``rotation.maxRecords`` lets this file take."""
        limit = self.policy.max_records
        return rows if not limit else max(0, min(rows, limit - self.records))

    def size(self) -> int:
        """Bytes that count against ``rotation.maxBytes``."""
        return self.end

    def full(self) -> bool:
        """Whether a record or size limit is reached: the task rolls the file now."""
        limit_records, limit_bytes = self.policy.max_records, self.policy.max_bytes
        return bool((limit_records and self.records >= limit_records)
                    or (limit_bytes and self.size() >= limit_bytes))

    def flush(self) -> None:
        """Write what is buffered (nothing, for row files)."""

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
        self.format = config.format
        self.codec = RowCodec(config.compression, config.compression_level)
        self.keys = config.keys if config.encrypted else None
        self.estimate = estimate
        self._sealer: Sealer | None = None
        self._handle: BinaryIO | None = None

    def add(self, rows: pa.RecordBatch) -> int:
        """Append as many of ``rows`` as fit under ``maxRecords`` and ``maxBytes``.

        Returns 0 when not even one more row fits a file that has rows, so a file outgrows
        ``maxBytes`` only when its first row alone does.
        """
        rows = rows.slice(0, self.room(rows.num_rows))
        max_bytes = self.policy.max_bytes
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


class ParquetPartFile(PartFile):
    """Parquet: written by one task and closed at its end (a bulk format cannot be appended).

    Arrow batches arrive 10,000 rows at a time; each ``write_batch`` of pyarrow's writer would
    make a row group of its own (small row groups compress worse, dictionaries restart, readers
    pay per group), so batches are buffered and written as one row group once they hold
    ``flush_bytes`` of Arrow data, when the task caps its buffers, or when the file finishes.
    """

    rolls_at_task_end = True

    def __init__(self, storage: Storage, config: SinkConfig, **kwargs: Any) -> None:
        super().__init__(storage, config, **kwargs)
        self.config = config
        self.flush_bytes = min(config.row_group_bytes, config.rotation.max_bytes or 1 << 62)
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
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
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
