"""The executor's side of the protocol: one task's rows into part files, and its report.

Fencing: a task appends in place to its slots' committed in-progress files only when it wins
the *claim* of its (batch, task partition), an exclusive marker file, and finds each file
exactly at its committed length. Any other attempt of the same batch and partition (a retry,
a zombie of a stopped or crashed run, a speculative copy) loses the claim and copies the
committed prefix to a fresh temp name instead (Apex's recovery), so two attempts never write
to one file. The driver takes the claim of every partition whose committed attempt did not,
at commit (see ``Committer``), so a zombie arriving after the commit loses it too.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pyarrow as pa

from commit_protocol.formats import check_rows
from commit_protocol.formats.arrow import coalesce
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import TaskReport
from commit_protocol.records.plan import WritePlan
from commit_protocol.records.rotation import IDLE, roll_reason
from commit_protocol.records.state import InProgressFile
from commit_protocol.storage import Storage
from commit_protocol.storage.concurrent import each
from commit_protocol.task.bulk_files import FinishedRatio, HeldRows, StagedPartFile
from commit_protocol.task.part_files import PartFile, RowPartFile, RowSize
from commit_protocol.task.partitioning import split_by_partition
from commit_protocol.task.pipeline import ChunkPipeline, EarlySync
from commit_protocol.task.quarantine.committed_types import as_committed
from commit_protocol.task.quarantine.sorting import sort_out
from commit_protocol.task.quarantine.writer import QuarantineWriter
from commit_protocol.task.row_rules import partition_zone, ruled
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import CommitError, ConcurrentWriterError, TruncatedFileError
from commit_protocol.vocabulary.naming import INPROGRESS_DIR, final_name, partition_claim, temp_name

logger = logging.getLogger("rotsink.task")  # Spark's executor log (the worker's stderr)

# Row formats encode (and compress, and seal) one append per chunk of about this many Arrow
# bytes. Spark sends 10,000-row batches; encoding 100,000 rows at once is 1.4-2x faster per
# row (fixed cost per encoder call) and makes fewer, larger compressed members.
ROW_CHUNK_BYTES = 4 << 20


# Staged files up to this size are encoded at once when a task rolls several (on object
# stores): a small file's roll is three requests in a row, a large one's is its encoding.
CONCURRENT_ROLL_BYTES = 8 << 20


def _roll(f: PartFile) -> None:
    failpoints.hit("task.before_roll")
    f.roll()
    failpoints.hit("task.after_roll")


class TaskWriter:
    """Writes one task's share of micro-batch ``batch_id`` (runs on an executor)."""

    def __init__(self, storage: Storage, config: SinkConfig, plan: WritePlan, *, batch_id: int,
                 partition: int, attempt: int, query_id: str) -> None:
        self.storage = storage
        self.config = config
        self.plan = plan
        self.batch_id = batch_id
        self.partition = partition
        self.attempt = attempt
        self.query_id = query_id
        self.open: OrderedDict[str, PartFile] = OrderedDict()  # directory -> file, LRU order
        self.touched: list[PartFile] = []
        self.rolls: dict[str, int] = {}
        self.claimed: bool | None = None  # None: not tried (no committed file resumed yet)
        self.time_zone: str | None = None  # of timestamp partition columns (TaskReport's)
        self.row_size = RowSize()
        self.ratio = FinishedRatio()
        self.held = HeldRows(limit=config.row_group_bytes)
        self.early = EarlySync(storage, enabled=config.fsync)
        self.quarantine = None if config.quarantine is None else QuarantineWriter(
            replace(config.quarantine, fs_options=config.fs_options),  # (vended: the plan's)
            batch_id=batch_id, partition=partition, query_id=query_id)

    def write(self, batches: Iterable[pa.RecordBatch]) -> TaskReport:
        """Consume the task's Arrow batches; return the report the driver commits."""
        if self._already_committed():
            for _ in batches:  # a replay of a committed batch: its output exists already
                pass
            return self._report(skipped=True)
        # Chunks are encoded and written by one worker thread while this one receives the
        # next from Spark; bytes grow durable as they are written (commit_protocol.task.pipeline)
        try:
            with ChunkPipeline(self._write_chunk) as pipeline:
                pipeline.feed(coalesce(batches, ROW_CHUNK_BYTES))
        finally:
            self.early.finish()
        now_ms = int(time.time() * 1000)
        if self.config.is_bulk:  # before the release, which writes what a roll need not
            self._roll_due_staged_files(now_ms)
        # Closing a file on an object store writes its last segment: one request each,
        # sent together (storage.concurrent)
        each(self.storage, lambda f: f.release(), [f for f in self.open.values() if not f.closed])
        if self.config.is_bulk:
            self._roll_idle_staged_files(now_ms)
        report = self._report(skipped=False)
        failpoints.hit("task.before_sync")
        self._make_durable(report)
        failpoints.hit("task.before_report")
        return report

    def _make_durable(self, report: TaskReport) -> None:
        """``commit.fsync``: the bytes this task wrote, and the names of the files it
        created, survive a power loss before the driver can commit them. A rolled staged file
        is published as its encoded ``final_temp``: only that one must last."""
        if not self.config.fsync or not report.files:
            return
        self.storage.sync(sorted({f.final_temp or f.temp for f in report.files}))
        self.storage.sync_directories([INPROGRESS_DIR])

    def _roll_due_staged_files(self, now_ms: int) -> None:
        """Roll the staged files the commit would roll by a rule it checks (batch count,
        age, inactivity), so that their encoding runs here, in the task, not on the driver.

        Judged on this executor's clock against the committed open and append times; the
        commit still checks every slot, and rolls (on the driver) what is due by its clock.
        Small files are encoded together (``storage.concurrent``): their time is requests;
        large ones one after another, each holding a row group in memory.
        """
        due: list[StagedPartFile] = []
        for f in self.touched:
            if f.closed or not isinstance(f, StagedPartFile):
                continue
            committed = self.plan.in_progress.get((self.partition, f.directory))
            if committed is None or committed.name != f.name:  # opened by this task
                committed = InProgressFile(partition=self.partition, directory=f.directory,
                                           name=f.name, temp=f.temp, size=0, records=0,
                                           batches=0, opened_ms=now_ms, last_append_ms=now_ms)
            probe = replace(committed, size=f.size(), records=f.records,
                            batches=committed.batches + 1, last_append_ms=now_ms)
            reason = roll_reason(probe, self.config.rotation, now_ms)
            if reason:
                f.reason = reason
                due.append(f)
        small = [f for f in due if f.end <= CONCURRENT_ROLL_BYTES]
        each(self.storage, _roll, small)
        for f in due:
            if f not in small:
                _roll(f)

    def _roll_idle_staged_files(self, now_ms: int) -> None:
        """Encode this task partition's staged files that got no rows in this batch but are
        due by age or inactivity (or ``rotation.rollOnIdle``), so the commit only publishes
        them.

        Reads only the committed bytes and writes the finished file to a fresh temp name,
        so no claim is needed: two attempts (a retry, a zombie) each encode the same rows
        into their own temp, and only the committed attempt's is published. Slots of task
        partitions that run no task in this batch are left to the driver.
        """
        if self.plan.retire_in_progress:
            return  # the commit finishes every committed file (a schema change)
        rules = replace(self.config.rotation, max_bytes=0)  # staged bytes are not its size
        # With rotation.rollOnIdle, a task that got no rows encodes them all: the batch may be
        # idle (a heartbeat's); the commit keeps them in progress if another task got rows.
        idle = self.config.rotation.roll_on_idle and not any(f.new_records for f in self.touched)
        for (partition, directory), committed in sorted(self.plan.in_progress.items()):
            if partition != self.partition or self._seen(directory) or not committed.size:
                continue
            reason = roll_reason(committed, rules, now_ms) or (IDLE if idle else None)
            if reason:
                f = self._new_file(directory=directory, name=committed.name,
                                   temp=committed.temp, start=committed.size,
                                   records=committed.records)
                self.touched.append(f)
                failpoints.hit("task.before_roll")
                f.reason = reason
                f.roll()
                failpoints.hit("task.after_roll")

    def _already_committed(self) -> bool:
        latest = self.plan.latest_batch_id
        if self.plan.query_id and self.query_id and self.plan.query_id != self.query_id:
            raise ConcurrentWriterError(self.plan.owner_message(self.query_id))
        if latest is None:
            return False
        if self.batch_id <= latest:
            return True
        if self.batch_id != latest + 1:
            # Spark runs batch N only after its checkpoint committed N - 1: the log lost files
            from commit_protocol.log.files import log_file_name
            from commit_protocol.vocabulary.naming import LOG_DIR

            names = [f"{LOG_DIR}/{log_file_name(b, self.config.compact_interval)}"
                     for b in sorted({latest + 1, self.batch_id - 1})]
            missing = " to ".join(names) + (" are" if len(names) > 1 else " is")
            raise CommitError(
                f"task of batch {self.batch_id}: expected the output's metadata log to end at "
                f"batch {self.batch_id - 1}, found it ending at batch {latest}: {missing} "
                "missing (deleted by hand, or the output restored from a copy older than the "
                "checkpoint), so the rows those batches committed are no longer listed. "
                "Restore the missing log file(s) from a backup, or write to a new output path "
                "with a new checkpoint")
        return False

    def _report(self, *, skipped: bool) -> TaskReport:
        quarantine = self.quarantine
        return TaskReport(batch_id=self.batch_id, partition=self.partition, attempt=self.attempt,
                          query_id=self.query_id, files=tuple(f.report() for f in self.touched),
                          skipped=skipped, claimed=bool(self.claimed), basis=self.plan.basis,
                          time_zone=self.time_zone,
                          quarantined=() if quarantine is None else quarantine.reports(),
                          refused=() if quarantine is None else
                          tuple(sorted(quarantine.counts.items())))

    # -- rows into files -----------------------------------------------------------------
    def _write_chunk(self, batch: pa.RecordBatch) -> None:
        """One chunk of the task's rows, split by partition directory (the pipeline's
        worker thread: the only one writing files while rows arrive); with
        ``errors.mode=quarantine``, less the rows the output refuses, which go to the
        quarantine (:mod:`commit_protocol.task.quarantine`)."""
        if self.quarantine is None:
            kept = [ruled(batch, self.config, batch_id=self.batch_id)]
        else:
            kept, refused = sort_out(batch, self._checked)
            self.quarantine.add(refused)
        for rows in kept:
            self.time_zone = self.time_zone or partition_zone(rows, self.config.partition_by)
            for directory, part in split_by_partition(rows, self.config.partition_by,
                                                     self.config.partition_terms):
                if part.num_rows:
                    self._write_rows(directory, part)
        for f in self.open.values():
            if isinstance(f, RowPartFile):
                self.early.note(f.temp, f.written)

    def _checked(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` as the table takes it, checked by the format too (a refusal raises)."""
        if self.config.committed_types:  # a widened upstream, written as committed
            batch = as_committed(batch, self.config.committed_types)
        batch = ruled(batch, self.config, batch_id=self.batch_id)
        check_rows(self.config.format, batch)
        return batch

    def _write_rows(self, directory: str, rows: pa.RecordBatch) -> None:
        """Give ``rows`` to the directory's open file, rolling it whenever it is full."""
        while rows.num_rows:
            f = self._file_for(directory)
            failpoints.hit("task.before_append")
            took = f.add(rows)
            rows = rows.slice(took)
            if took:
                failpoints.hit("task.after_append")
            if not took or f.full():
                failpoints.hit("task.before_roll")
                f.roll()
                del self.open[directory]
                failpoints.hit("task.after_roll")

    def _file_for(self, directory: str) -> PartFile:
        f = self.open.get(directory)
        if f is not None:
            self.open.move_to_end(directory)
            return f
        f = self._reopen(directory) or self._resume(directory) or self._create(directory)
        if len(self.open) >= self.config.max_open_files:
            _, evicted = self.open.popitem(last=False)
            evicted.release()
        self.open[directory] = f
        return f

    def _reopen(self, directory: str) -> PartFile | None:
        """A row file this task released under ``maxOpenFiles`` and may append to again."""
        for f in reversed(self.touched):
            if f.directory == directory:
                return None if f.closed else f
        return None

    def _resume(self, directory: str) -> PartFile | None:
        """The slot's committed in-progress file, appended in place or through a fenced copy."""
        committed = self.plan.in_progress.get((self.partition, directory))
        if committed is None or self._seen(directory) or self.plan.retire_in_progress:
            return None
        temp, fenced_from = self._fence(committed)
        f = self._new_file(directory=directory, name=committed.name, temp=temp,
                           start=committed.size, records=committed.records,
                           fenced_from=fenced_from, length_known=True)  # checked by the fence
        self.touched.append(f)
        failpoints.hit("task.after_resume")
        return f

    def _seen(self, directory: str) -> bool:
        return any(f.directory == directory for f in self.touched)

    def _fence(self, committed: InProgressFile) -> tuple[str, str | None]:
        try:
            actual = self.storage.size(committed.temp)
        except FileNotFoundError as e:
            raise CommitError(f"in-progress file {committed.temp} of {committed.name} is "
                              f"missing; the log commits {committed.size} bytes of it") from e
        if actual < committed.size:
            raise TruncatedFileError(f"in-progress file {committed.temp} of {committed.name} "
                                     f"holds {actual} bytes; the log commits {committed.size}")
        if self._holds_claim() and actual == committed.size:
            return committed.temp, None
        fresh = temp_name(committed.name)
        logger.warning("batch %d, task partition %d: %s continues from a fresh copy of its "
                       "%d committed bytes (this attempt cannot prove it is the only writer: "
                       "a retry, or a zombie beside it)", self.batch_id, self.partition,
                       committed.name, committed.size)
        self.storage.copy_prefix(committed.temp, fresh, committed.size)
        failpoints.hit("task.after_fence_copy")
        return fresh, committed.temp

    def _holds_claim(self) -> bool:
        """Whether this attempt owns (batch, partition): tried once, on the first resume."""
        if self.claimed is None:
            self.claimed = self.storage.create_marker(partition_claim(self.batch_id,
                                                                      self.partition))
        return self.claimed

    def _create(self, directory: str) -> PartFile:
        roll = self.rolls.get(directory, 0)
        self.rolls[directory] = roll + 1
        name = final_name(directory=directory, prefix=self.config.file_prefix,
                          partition=self.partition, batch=self.batch_id, roll=roll,
                          suffix=self.config.file_suffix)
        f = self._new_file(directory=directory, name=name, temp=temp_name(name), start=0,
                           records=0, length_known=True)
        self.touched.append(f)
        return f

    def _new_file(self, **kwargs: Any) -> RowPartFile:
        """A row file, or for a bulk format its staged file."""
        if self.config.is_bulk:
            return StagedPartFile(self.storage, self.config, estimate=self.row_size,
                                  ratio=self.ratio, held=self.held, partition=self.partition,
                                  **kwargs)
        return RowPartFile(self.storage, self.config, estimate=self.row_size,
                           partition=self.partition, **kwargs)
