"""Staged rows of a bulk format into its finished file: the encoding that happens at a roll.

A bulk slot's in-progress file holds Arrow IPC streams (:mod:`commit_protocol.formats.ipc`),
sealed when the path is encrypted. When the slot rolls (in a task for its size, record or
batch-count limit, on the driver for age or inactivity of a slot no task touched), its
committed bytes are decoded and written as one finished file at a fresh temp name, which the
commit then publishes like any finalized file. Bytes past the committed length (a zombie's)
are never read, and the staged file itself is left as it is (an orphan once published).

The decoded rows go to :class:`FinishedPartFile`, which writes them through the format's
writer: row groups of ``parquet.rowGroupBytes`` with the dictionary
choice and Parquet Modular Encryption of every Parquet file rotsink writes, or ORC stripes of
``orc.stripeBytes`` in the form Spark's ORC writer gives each type.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import pyarrow as pa

from commit_protocol.formats import FORMATS
from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import Storage
from commit_protocol.task.part_files import PartFile
from commit_protocol.vocabulary.naming import temp_name


def staged_batches(storage: Storage, staged: str, length: int,
                   config: SinkConfig) -> Iterator[pa.RecordBatch]:
    """The rows of the first ``length`` bytes of ``staged``, batch by batch: one append's
    rows (one sealed record, when encrypted) in memory at a time, never the whole file."""
    from commit_protocol.reading.bulk import staged_stream
    from commit_protocol.reading.files import CommittedFile, ReadLayout

    ring = config.keys.ring() if config.encrypted and config.keys else None
    layout = ReadLayout(config.format, config.compression, config.encrypted,
                        config.partition_by)
    yield from staged_stream(storage, CommittedFile(staged, length, "", True, staged=True),
                             layout=layout, schema=None, ring=ring, batch_rows=None)


def convert_staged(storage: Storage, staged: str, length: int, config: SinkConfig, *,
                   name: str, rows: Iterable[pa.RecordBatch] | None = None
                   ) -> tuple[str, int, bytes | None]:
    """Write the committed rows of ``staged`` as the finished file of final name ``name`` at
    a fresh temp name; return that temp, its size and its footer (Parquet: for a table that
    lists the file, ``table.format``; None for ORC).

    ``rows``: the staged file's rows, when the caller still holds all of them (a file
    staged and rolled by one task), so they are not read back (on an object store, a
    listing and a download per file)."""
    temp = temp_name(name)
    # The slot's partition and directory only label a task's report, which this file never
    # makes: the caller reports the staged file it rolled.
    finished = FinishedPartFile(storage, config, partition=0, directory="", name=name,
                                temp=temp, start=0, records=0, length_known=True)
    for batch in rows if rows is not None else staged_batches(storage, staged, length, config):
        finished.add(batch)
    finished.roll()
    return temp, finished.end, finished.footer


class FinishedPartFile(PartFile):
    """A bulk file written whole: the finished file a staged file is converted into.

    Batches are buffered and written as one row group (Parquet; ORC cuts stripes itself)
    once they hold ``flush_bytes`` of Arrow data, or when the file finishes: each write of
    a 10,000-row Arrow batch would make a row group of its own (small row groups compress
    worse, dictionaries restart, readers pay per group). A table's sort order
    (:mod:`commit_protocol.task.sorting`) buffers the whole file, sorted when it finishes.
    """

    def __init__(self, storage: Storage, config: SinkConfig, **kwargs: Any) -> None:
        super().__init__(storage, config, **kwargs)
        self.config = config
        self.flush_bytes = config.row_group_bytes
        self.buffered: list[pa.RecordBatch] = []
        self.buffered_bytes = 0
        self._handle: BinaryIO | None = None
        self._writer: Any = None  # the format's writer once the first group flushes
        self.footer: bytes | None = None  # the finished Parquet file's, once released

    def add(self, rows: pa.RecordBatch) -> int:
        """Buffer ``rows`` (a converted file is already within its limits: no roll here)."""
        if rows.num_rows:
            self.buffered.append(rows)
            self.buffered_bytes += rows.nbytes
            self.records += rows.num_rows
            self.new_records += rows.num_rows
            if self.buffered_bytes >= self.flush_bytes and not self.config.sort_order:
                self.flush()  # (a sorted file is written whole at its release)
        return rows.num_rows

    def full(self) -> bool:
        return False

    def flush(self, *, final: bool = False) -> None:
        """Write the buffered rows as row groups of about ``flush_bytes`` each; the rows past
        the last full group stay buffered for the next (all of them when ``final``), so a
        file is not cut into alternating full and small groups at every staged append."""
        if not self.buffered:
            return
        table = pa.Table.from_batches(self.buffered)
        rows_per_group = max(1, self.flush_bytes * table.num_rows // max(table.nbytes, 1))
        full = table.num_rows if final else table.num_rows - table.num_rows % rows_per_group
        if not full:
            return
        if self._writer is None:
            self._handle = self.storage.open_append(self.temp, at=0)  # a fresh name
            module = FORMATS[self.config.format].implementation()
            self._writer = module.open_writer(self._handle, table, self.config)
        self._writer.write(table.slice(0, full), rows_per_group=rows_per_group)
        rest = table.slice(full)
        self.buffered = rest.to_batches() if rest.num_rows else []
        self.buffered_bytes = rest.nbytes if rest.num_rows else 0

    def size(self) -> int:
        """Bytes on disk so far (buffered rows not counted: their encoded size is unknown)."""
        return self._handle.tell() if self._handle is not None else 0

    def release(self) -> None:
        # A bulk file has no reopen: giving back the handle finishes the file.
        if self.config.sort_order and self.buffered:
            from commit_protocol.task.sorting import sorted_rows

            whole = sorted_rows(pa.Table.from_batches(self.buffered), self.config.sort_order,
                                self.config.sort_order_id,
                                partition_columns=self.config.partition_by)
            self.buffered = whole.to_batches()
        self.flush(final=True)
        if self._handle is not None and self._writer is not None:
            self._writer.close()
            self.footer = self._writer.footer() if hasattr(self._writer, "footer") else None
            self.end = self._handle.tell()  # written from offset 0: the file's size
            self._handle.close()
            self._handle = None
            self.closed = True
