"""Part files of bulk formats (Parquet, ORC): staged while in progress, written whole when done.

A bulk file cannot be appended to, so a slot's in-progress rows go to a
:class:`StagedPartFile`, a row file of Arrow IPC streams (:mod:`commit_protocol.formats.ipc`)
that spans micro-batches like any row file; when it rolls, its rows are encoded into a
:class:`FinishedPartFile` (:mod:`commit_protocol.conversion`), the finished file the commit
publishes. ``rotation.maxBytes`` is the finished file's size, estimated before encoding with a
:class:`FinishedRatio`.

The format's module (``FORMATS[...].implementation()``) supplies ``open_writer`` (the
finished file's encoder), ``check_rows`` (values the format cannot hold, refused before they
are staged) and ``iter_file``/``read_file`` (:mod:`commit_protocol.reading`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, BinaryIO

import pyarrow as pa

from commit_protocol import failpoints
from commit_protocol.config import SinkConfig
from commit_protocol.formats import FORMATS
from commit_protocol.formats.codecs import RowCodec
from commit_protocol.messages import FileReport
from commit_protocol.part_files import PartFile, RowPartFile, RowSize
from commit_protocol.storage import Storage

# Rows a task encodes to Parquet in memory to learn the finished/staged size ratio: enough
# that a file's fixed costs (schema, footer) do not dominate, a few ms of work.
RATIO_SAMPLE_ROWS = 100_000


@dataclass
class FinishedRatio:
    """Bytes of a finished bulk file per staged byte, shared by a task's staged files.

    ``rotation.maxBytes`` is the size of the finished (Parquet) file, unknown until the rows
    are encoded: a staged file rolls once its staged bytes times this ratio reach the limit.
    The ratio is measured on the task's first chunk (encoded in memory) and replaced by the
    exact ratio of each file the task converts.
    """

    value: float = 0.0

    def measure(self, rows: pa.RecordBatch, config: SinkConfig) -> None:
        """Finished-file bytes of ``rows`` per Arrow byte: uncompressed IPC streams are the
        Arrow buffers plus a little metadata, so no staged encoding is needed to measure."""
        import io

        table = pa.Table.from_batches([rows])
        sink = io.BytesIO()
        writer = FORMATS[config.format].implementation().open_writer(sink, table, config,
                                                                     encrypt=False)
        writer.write(table, rows_per_group=table.num_rows)
        writer.close()
        self.value = max(sink.tell() / max(table.nbytes, 1), 1e-3)


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
        self.check_rows = FORMATS[config.format].implementation().check_rows

    def _encoding(self, config: SinkConfig) -> tuple[str, RowCodec]:
        staging = FORMATS[config.format].staging
        assert staging is not None, f"{config.format} has no staged form"
        return staging, RowCodec("none")  # the finished file compresses, at the roll

    def add(self, rows: pa.RecordBatch) -> int:
        self.check_rows(rows)  # a staged, committed row must be encodable at the roll
        if not self.ratio.value and rows.num_rows:  # the limit needs it before the first add
            self.ratio.measure(rows.slice(0, RATIO_SAMPLE_ROWS), self.config)
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
        self.final_temp, self.final_size = convert_staged(self.storage, self.temp, self.end,
                                                          self.config, name=self.name)
        if self.end:
            self.ratio.value = max(self.final_size / self.end, 1e-3)
        failpoints.hit("task.after_convert")

    def report(self) -> FileReport:
        return replace(super().report(), final_temp=self.final_temp, final_size=self.final_size)


class FinishedPartFile(PartFile):
    """A bulk file written whole: the finished file a staged file is converted into.

    Batches are buffered and written as one row group (Parquet; ORC cuts stripes itself)
    once they hold ``flush_bytes`` of Arrow data, or when the file finishes: each write of
    a 10,000-row Arrow batch would make a row group of its own (small row groups compress
    worse, dictionaries restart, readers pay per group).
    """

    def __init__(self, storage: Storage, config: SinkConfig, **kwargs: Any) -> None:
        super().__init__(storage, config, **kwargs)
        self.config = config
        self.flush_bytes = config.row_group_bytes
        self.buffered: list[pa.RecordBatch] = []
        self.buffered_bytes = 0
        self._handle: BinaryIO | None = None
        self._writer: Any = None  # the format's writer once the first group flushes

    def add(self, rows: pa.RecordBatch) -> int:
        """Buffer ``rows`` (a converted file is already within its limits: no roll here)."""
        if rows.num_rows:
            self.buffered.append(rows)
            self.buffered_bytes += rows.nbytes
            self.records += rows.num_rows
            self.new_records += rows.num_rows
            if self.buffered_bytes >= self.flush_bytes:
                self.flush()
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
            self._handle = self.storage.open_append(self.temp)
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
        self.flush(final=True)
        if self._handle is not None and self._writer is not None:
            self._writer.close()
            self._handle.close()
            self._handle = None
            self.end = self.storage.size(self.temp)
            self.closed = True
