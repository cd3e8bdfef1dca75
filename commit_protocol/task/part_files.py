"""Part files as one task sees them: the row file a slot appends to across micro-batches
(bulk formats' staged and finished files build on it in :mod:`commit_protocol.task.bulk_files`).

A task hands each file rows with :meth:`PartFile.add`, which takes as many as fit the file's
record and size limits and says how many; the task rolls a file that took none or is
:meth:`~PartFile.full`. Both kinds report the same facts to the driver (a
:class:`FileReport`): the temp name, the committed offset the task started from, where its
bytes end, and whether the task rolled the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import pyarrow as pa

from commit_protocol.crypto.sealed import MAX_HEADER, Sealer
from commit_protocol.formats import FORMATS, encode_rows
from commit_protocol.formats.codecs import RowCodec
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import FileReport
from commit_protocol.storage import Storage
from commit_protocol.vocabulary import failpoints


class Deferred(Protocol):
    """Bytes of an append whose length is known before they are made (a bulk format's
    staged rows, which may never need them: :mod:`commit_protocol.task.bulk_files`)."""

    def __len__(self) -> int: ...

    def encoded(self) -> bytes: ...


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
                 fenced_from: str | None = None, length_known: bool = False) -> None:
        self.storage = storage
        self.policy = config.rotation
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
        # The writer knows the file's length (it created it at a fresh name, or checked it
        # when it resumed it): it opens the file at ``end`` without a listing
        self.length_known = length_known

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
        limit = self.policy.max_records
        return rows if not limit else max(0, min(rows, limit - self.records))

    def size(self) -> int:
        """Bytes that count against ``rotation.maxBytes``."""
        return self.end

    def byte_limit(self) -> int:
        """``rotation.maxBytes`` in this file's own bytes (0: no limit)."""
        return self.policy.max_bytes

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
        self.compression, self.level = config.compression, config.compression_level
        self.keys = config.keys if config.encrypted else None
        self.checked = config.quarantine is not None  # the task sorted refused rows out
        self.estimate = estimate
        self._sealer: Sealer | None = None
        self._handle: BinaryIO | None = None
        self.written = self.start  # bytes on storage: ``end``, unless a subclass holds some

    def _encoding(self, config: SinkConfig) -> tuple[str, RowCodec]:
        """The row format and codec of the file's bytes."""
        if FORMATS[config.format].blocks:  # compresses its own blocks (Avro)
            return config.format, RowCodec("none")
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

    def encode(self, batch: pa.RecordBatch) -> bytes | Deferred:
        """The bytes appending ``batch`` at the current end (call :meth:`append` next)."""
        data = self.codec.compress(encode_rows(
            self.format, batch, with_header=self.end == 0, file_name=self.name,
            compression=self.compression, level=self.level, checked=self.checked))
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

    def append(self, data: bytes | Deferred, rows: int) -> None:
        self._write(data)
        self.end += len(data)
        self.records += rows
        self.new_records += rows

    def _write(self, data: bytes | Deferred) -> None:
        """Write ``data`` at the end of the bytes on storage (``written``)."""
        if not isinstance(data, bytes):
            data = data.encoded()
        if self._handle is None:
            self._handle = self.storage.open_append(
                self.temp, at=self.written if self.length_known else None)
        if failpoints.active():
            self._torn_write(data)
        else:
            self._handle.write(data)
        self.written += len(data)

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
