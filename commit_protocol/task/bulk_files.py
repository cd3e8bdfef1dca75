"""Part files of bulk formats (Parquet, ORC): staged while in progress, written whole when done.

A bulk file cannot be appended to, so a slot's in-progress rows go to a
:class:`StagedPartFile`, a row file of Arrow IPC streams (:mod:`commit_protocol.formats.ipc`)
that spans micro-batches like any row file; when it rolls, its rows are encoded into a
:class:`~commit_protocol.task.conversion.FinishedPartFile`, the finished file the commit
publishes. ``rotation.maxBytes`` is the finished file's size, estimated before encoding with a
:class:`FinishedRatio`.

The format's module (``FORMATS[...].implementation()``) supplies ``open_writer`` (the
finished file's encoder), ``check_rows`` (values the format cannot hold, refused before they
are staged) and ``iter_file``/``read_file`` (:mod:`commit_protocol.reading`).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from commit_protocol.formats import FORMATS, ipc
from commit_protocol.formats.codecs import RowCodec
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import FileReport
from commit_protocol.storage import Storage
from commit_protocol.task.conversion import convert_staged, staged_batches
from commit_protocol.task.part_files import Deferred, RowPartFile, RowSize
from commit_protocol.vocabulary import failpoints

# Rows a task encodes to Parquet in memory to learn the finished/staged size ratio: enough
# that a file's fixed costs (schema, footer) do not dominate, a few ms of work.
RATIO_SAMPLE_ROWS = 100_000
# The ratio is measured once a file's staged bytes could reach this share of
# rotation.maxBytes: a file far below its limit (a task's share of a micro-batch, mostly)
# needs no estimate, and its task no trial encoding (measured: 10% of a 1M-row task's
# Parquet encoding on a 16-core executor).
RATIO_NEEDED_SHARE = 4

# Arrow bytes of rows a task holds at least for the files it appends to, so that a file it
# also rolls is encoded from memory (the budget is the row group size when larger: the
# encoding of a roll holds a row group of rows anyway).
KEPT_ROWS_BYTES = 16 << 20


@dataclass
class HeldRows:
    """The rows a task appends to staged files, held against one budget for the task.

    A file that a task appends to and rolls (``rotation.maxBatches`` reached in this batch,
    a record or size limit reached within it) never needs this task's staged bytes: its
    rows are encoded from memory after the committed staged prefix (none for a file the task
    opened), and the task's staged bytes are never encoded nor written, which saves their
    IPC encoding, their write and their reading back (on an object store, an upload, a
    listing and a download). A file whose rows outgrow the budget writes its staged bytes
    and is read back at the roll, a batch at a time, as any staged file."""

    limit: int = KEPT_ROWS_BYTES
    used: int = 0
    # a task's small rolls run together (storage.concurrent), each giving its rows back
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, nbytes: int) -> bool:
        with self.lock:
            if self.used + nbytes > max(self.limit, KEPT_ROWS_BYTES):
                return False
            self.used += nbytes
            return True

    def give_back(self, nbytes: int) -> None:
        with self.lock:
            self.used -= nbytes


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
    it rolls, the task encodes it into the finished file (:mod:`commit_protocol.task.conversion`).
    """

    def __init__(self, storage: Storage, config: SinkConfig, *, estimate: RowSize,
                 ratio: FinishedRatio, held: HeldRows, **kwargs: Any) -> None:
        super().__init__(storage, config, estimate=estimate, **kwargs)
        self.config = config
        self.ratio = ratio
        self.final_temp: str | None = None
        self.final_size = 0
        self.final_footer: bytes | None = None
        self.check_rows = FORMATS[config.format].implementation().check_rows
        # Every row this task appends, and their staged bytes not yet written (and, unless
        # encrypted, not yet encoded), while ``held`` allows; None once it does not
        self.held = held
        self.kept: list[pa.RecordBatch] | None = []
        self.kept_bytes = 0
        self.pending: list[bytes | Deferred] = []

    def _encoding(self, config: SinkConfig) -> tuple[str, RowCodec]:
        staging = FORMATS[config.format].staging
        assert staging is not None, f"{config.format} has no staged form"
        return staging, RowCodec("none")  # the finished file compresses, at the roll

    def add(self, rows: pa.RecordBatch) -> int:
        if not self.checked:  # a staged, committed row must be encodable at the roll
            self.check_rows(rows)
        if not self.ratio.value and rows.num_rows and self._limit_in_reach(rows):
            self.ratio.measure(rows.slice(0, RATIO_SAMPLE_ROWS), self.config)
        taken = super().add(rows)
        if self.kept is not None and taken:
            kept = rows.slice(0, taken)
            if self.held.take(kept.nbytes):
                self.kept.append(kept)
                self.kept_bytes += kept.nbytes
            else:
                self._let_go()
                self._flush_pending()  # from now on, staged as it comes
        return taken

    def _limit_in_reach(self, rows: pa.RecordBatch) -> bool:
        """Whether this file, with ``rows``, could come near ``rotation.maxBytes``, taking
        its finished bytes as at most its staged ones times :data:`RATIO_NEEDED_SHARE`."""
        max_bytes = self.policy.max_bytes
        return bool(max_bytes) and \
            (self.end + rows.nbytes) * RATIO_NEEDED_SHARE >= max_bytes

    def encode(self, batch: pa.RecordBatch) -> bytes | Deferred:
        """The staged bytes of ``batch``: while the task holds the rows (and the file is
        not sealed), only their exact length, encoded if they are ever written."""
        if self.kept is not None and self.keys is None:
            return _Deferred(batch)
        return super().encode(batch)

    def _write(self, data: bytes | Deferred) -> None:
        if self.kept is not None:
            self.pending.append(data)  # written at release, or never if the task rolls it
            return
        self._flush_pending()
        super()._write(data)

    def _flush_pending(self) -> None:
        data = b"".join(d if isinstance(d, bytes) else d.encoded() for d in self.pending)
        self.pending = []
        if data:
            super()._write(data)

    def _let_go(self) -> list[pa.RecordBatch] | None:
        """Stop holding the file's rows; return them (None if they were not held)."""
        kept, self.kept = self.kept, None
        self.held.give_back(self.kept_bytes)
        self.kept_bytes = 0
        return kept

    def release(self) -> None:
        self._flush_pending()  # the file stays in progress: its staged bytes are committed
        super().release()

    def byte_limit(self) -> int:
        """``maxBytes`` of finished file as staged bytes (none until the ratio is known)."""
        max_bytes = self.policy.max_bytes
        return int(max_bytes / self.ratio.value) if max_bytes and self.ratio.value else 0

    def size(self) -> int:
        """The finished file's estimated size."""
        return int(self.end * self.ratio.value)

    def roll(self) -> None:
        """Close the staged file and write its finished file (no FINAL record: the staged
        bytes are never published). Rows the task holds are encoded from memory after the
        committed staged prefix, and their staged bytes never written."""
        kept = self._let_go()
        rows = None
        if kept is not None:
            self.pending = []
            rows = kept if self.start == 0 else itertools.chain(
                staged_batches(self.storage, self.temp, self.start, self.config), kept)
        self.release()
        self.closed = True
        failpoints.hit("task.before_convert")
        self.final_temp, self.final_size, self.final_footer = convert_staged(
            self.storage, self.temp, self.end, self.config, name=self.name, rows=rows)
        if self.end:
            self.ratio.value = max(self.final_size / self.end, 1e-3)
        failpoints.hit("task.after_convert")

    def report(self) -> FileReport:
        return replace(super().report(), final_temp=self.final_temp, final_size=self.final_size,
                       final_footer=self.final_footer)


class _Deferred:
    """A staged IPC stream not encoded yet: its exact length (the file's offsets count it)
    and, if the staged bytes are ever written, its bytes."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        self.length = ipc.stream_size(batch)

    def __len__(self) -> int:
        return self.length

    def encoded(self) -> bytes:
        data = ipc.encode(pa.Table.from_batches([self.batch]))
        if len(data) != self.length:  # the offsets already count ``length`` bytes
            raise RuntimeError(f"an IPC stream of {len(data)} bytes where its size was "
                               f"computed as {self.length}")
        return data
