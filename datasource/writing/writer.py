"""The Spark face of the writer: plan on the driver, write on executors, commit on the driver."""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyspark.sql.datasource import WriterCommitMessage

from commit_protocol import metrics
from commit_protocol.commit.committer import Committer
from commit_protocol.commit.layout import laid_out
from commit_protocol.formats import FORMATS
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import TaskReport
from commit_protocol.records.plan import WritePlan
from commit_protocol.records.schema_evolution import (
    ADD_COLUMNS,
    NONE,
    WIDEN_TYPES,
    accepted,
    compare,
    into_committed,
    retires_in_progress,
    same_columns,
)
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage, open_storage
from commit_protocol.storage.access import check_access
from commit_protocol.tables import recorded_table, table_format_of
from commit_protocol.vocabulary.errors import (
    CommitError,
    OptionError,
    SchemaMismatchError,
    UnsupportedQueryError,
)
from commit_protocol.vocabulary.query_label import naming
from datasource.spark import memory_pool
from datasource.spark.compat import StreamWriterBase

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType



@dataclass(frozen=True)
class TaskCommitMessage(WriterCommitMessage):
    """A task's :class:`TaskReport`, wrapped in the type Spark requires."""

    report: TaskReport


class RotSinkStreamWriter(StreamWriterBase):
    """Created on the driver once per micro-batch (and again for its commit or abort).

    The writer of the planning reads the committed state once and freezes it into a
    :class:`WritePlan` when Spark pickles it to the tasks, so tasks never list or read the
    log. The writer Spark creates for the commit or abort never reads it: the tasks' reports
    carry the state they were planned from (:class:`~commit_protocol.records.messages.PlanBasis`).
    """

    def __init__(self, config: SinkConfig, schema_json: str) -> None:
        self.config = config
        self.schema_json = schema_json
        self._plan: WritePlan | None = None

    @property
    def plan(self) -> WritePlan:
        """The committed state as of planning, read when first needed (runs on the driver,
        in Spark's planning worker, when the writer is pickled to the tasks)."""
        if self._plan is None:
            with naming(self.config.query_name):
                self._plan = self._read_plan()
        return self._plan

    def _read_plan(self) -> WritePlan:
        committer = self._committer()
        started = (committer.storage.root_uri, self.config.table_format)
        if started not in _TABLES_STARTED:
            check_access(committer.storage)  # a missing bucket or credential, said plainly
        state = committer.latest_state()
        self.config = self.laid_out(committer, state)
        committer = self._committer()
        if started not in _TABLES_STARTED:
            committer.start_table(state)  # refuse a foreign table, catch ours up
            _TABLES_STARTED.add(started)
        retire = False
        if state is not None:
            check_compatible(self.config, self.schema_json, state)
            narrowed = into_committed(self.config, state.schema_json, self.schema_json)
            if narrowed:  # written, planned and committed as the path's types: tasks cast
                self.config = replace(self.config, committed_types=narrowed)
                self.schema_json = state.schema_json
                committer = self._committer()
            # The interval and the directories are fixed for the life of a path: as committed.
            self.config = replace(self.config, compact_interval=state.compact_interval,
                                  partition_terms=state.partition_terms)
            retire = retires_in_progress(state, self.schema_json, self.config)
        # the table's field ids and NOT NULL columns, for the tasks (Spark pickles the config)
        self.config = committer.planned(self.config)
        return WritePlan.from_state(state, self._storage().root_uri,
                                    retire_in_progress=retire)

    def laid_out(self, committer: Committer, state: SinkState | None) -> SinkConfig:
        """The config with the directories' terms (:mod:`~commit_protocol.commit.layout`); a joined
        table's identity columns checked as partitionBy's are. (Also the check ``start()``
        makes first: ``preflight``.)"""
        config = laid_out(committer.storage, committer.config, state)
        if config.partition_by != self.config.partition_by:  # the table's identity columns
            from pyspark.sql.types import StructType

            from datasource.writing.schema_check import check_schema, check_table_schema

            schema = StructType.fromJson(json.loads(self.schema_json))
            check_schema(config.format, config.partition_by, schema)
            check_table_schema(config.table_format, schema)
        return config

    def __getstate__(self) -> dict:
        """Pickled for the tasks: with the plan (its first reading, on the driver)."""
        _ = self.plan
        return dict(self.__dict__)

    def _storage(self) -> Storage:
        return open_storage(self.config.path, self.config.fs_options)

    def credentialed(self) -> SinkConfig:
        """Driver: the config with the storage credentials the table's catalog vends, asked
        for again as they near their expiry (:meth:`TableFormat.with_credentials`)."""
        if self.config.table_format is None:
            return self.config
        return table_format_of(self.config).with_credentials(self.config, self.schema_json)

    def _committer(self) -> Committer:
        """Driver only (the tasks use the plan's config: the credentials it was made with)."""
        from datasource.spark import logs

        logs.configure()  # runs in every process that plans, writes or commits
        self.config = self.credentialed()
        return Committer(self._storage(), self.config, self.schema_json)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommitMessage:
        """Runs on an executor: this task's rows into part files (see ``TaskWriter``)."""
        from pyspark import TaskContext

        from commit_protocol.task.task_writer import TaskWriter
        from datasource.spark import logs
        from datasource.writing import arrow_transfer, heap_check

        logs.configure()
        heap_check.warn_once_if_heap_is_small()
        freeze_task_modules(self.config.format)
        context = TaskContext.get()
        if context is None:
            raise RuntimeError("write() runs in a Spark task; no TaskContext found")
        with naming(self.config.query_name):  # Spark's SQL settings reach tasks this way
            arrow_transfer.warn_once_if_checked(context.getLocalProperty(arrow_transfer.KEY))
        iterator = arrow_transfer.BatchWatch().watch(iterator)
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        if batch_id is None:
            raise UnsupportedQueryError("rotsink is a streaming sink: write with writeStream "
                                        "(no micro-batch id in this task)")
        writer = TaskWriter(
            self._storage(), self.config, self.plan, batch_id=int(batch_id),
            partition=context.partitionId(), attempt=context.attemptNumber(),
            query_id=context.getLocalProperty("sql.streaming.queryId") or "")
        with naming(self.config.query_name):
            return TaskCommitMessage(writer.write(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Runs on the driver once every task of the batch succeeded."""
        memory_pool.use_for_commits()  # the process that commits for the query's life
        with naming(self.config.query_name), \
                metrics.recording(self.config.metrics_mailbox, batchId) as recorded:
            result = self._committer().commit(batchId, [_report(m) for m in messages])
            recorded.committed(result.state, compacted=result.compacted)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Runs on the driver when a task failed: nothing of the batch becomes visible."""
        memory_pool.use_for_commits()
        with naming(self.config.query_name), \
                metrics.recording(self.config.metrics_mailbox, batchId) as recorded:
            recorded.aborted()
            self._committer().abort(batchId, [_report(m) for m in messages])


_frozen = False
# Outputs whose table this planning process checked and caught up (once per query start: the
# commits keep it up to date from then on); one entry an output
_TABLES_STARTED: set[tuple[str, str | None]] = set()


def stream_writer(options: Mapping[str, str], schema: StructType) -> RotSinkStreamWriter:
    """The sink's writer of a query with ``options`` writing ``schema``: the options parsed,
    the schema checked against the format, the partition columns and the table (the sink's
    ``streamWriter``, and the check ``start()`` makes first: ``preflight``)."""
    from datasource.options.sink import parse_sink_options
    from datasource.writing.schema_check import check_schema, check_table_schema

    config = parse_sink_options(options)
    if config.table_format is not None:  # with the columns the table computes (generated)
        from pyspark.sql.types import StructType

        schema = StructType.fromJson(json.loads(table_format_of(config).widened(
            config, schema.json())))
    check_schema(config.format, config.partition_by, schema)
    if config.table_format is not None:
        check_table_schema(config.table_format, schema)
    return RotSinkStreamWriter(config, schema.json())


def freeze_task_modules(fmt: str) -> None:
    """Runs on an executor, once per Python worker: load what a task of ``fmt`` needs, then
    ``gc.freeze()`` everything alive so far.

    PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker, and a
    full collection walks every object alive: about 95,000 once pyspark, pyarrow, polars and
    rotsink are loaded, 40-80 ms per task measured (a quarter of the CPU a 500,000-row JSON
    lines task costs rotsink). Frozen objects are skipped by every later collection. Modules
    live as long as the process; the price is that cyclic garbage of the task running now
    (alive at the freeze) is never collected: once per worker, a few objects.

    A preload that is not installed is passed over: pandas, which pyarrow's Parquet and ORC
    writers import on first use only if they find it, is not on every cluster node (PySpark's
    Arrow path to Python data sources needs only pyarrow; ``docs/cluster.md``).
    """
    global _frozen
    if _frozen:
        return
    entry = FORMATS[fmt]
    polars_threads_per_task()
    for module in ("commit_protocol.task.task_writer", entry.module):
        importlib.import_module(module)
    for module in entry.preload:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as missing:
            if missing.name != module:  # installed, but something it imports is not
                raise
    gc.freeze()
    _frozen = True


def polars_threads_per_task() -> None:
    """Polars, which encodes JSON lines and CSV, runs on as many threads as Spark gives the
    task cores (``spark.task.cpus``, 1 by default), unless ``POLARS_MAX_THREADS`` is set.

    Polars sizes its thread pool once, when it is imported, to every core of the machine:
    on a 16-core executor running 16 tasks, each worker would start 16 threads of its own
    for each chunk it encodes (benchmarks/README.md, "The Arrow size check").
    """
    if "polars" in sys.modules:  # sized already, by whoever imported it first
        return
    from pyspark import TaskContext

    context = TaskContext.get()
    cores = context.cpus() if context is not None else 1
    os.environ.setdefault("POLARS_MAX_THREADS", str(max(1, cores)))


def _report(message: WriterCommitMessage | None) -> TaskReport | None:
    """The task's report; None for a task that failed (``abort`` gets those)."""
    if message is None or isinstance(message, TaskCommitMessage):
        return None if message is None else message.report
    raise CommitError(f"expected a rotsink task's commit message, found "
                      f"{type(message).__name__}: another writer's task?")


def check_compatible(config: SinkConfig, schema_json: str, state: SinkState) -> None:
    """Refuse to continue a path with a different schema (unless ``schema.evolution`` allows
    the change, or ``errors.mode=quarantine`` writes a wider type as committed), format or
    log interval."""
    # Names and types must match; nullability may differ (Spark's file sources relax it).
    if not same_columns(state.schema_json, schema_json) and \
            not into_committed(config, state.schema_json, schema_json):
        if config.schema_evolution != NONE:
            accepted(state.schema_json, schema_json, config.schema_evolution)  # or refused
        else:
            raise SchemaMismatchError(
                f"{config.path} holds rows of schema {_simple(state.schema_json)}; this query "
                f"writes {_simple(schema_json)}. Write a changed schema to a new path"
                + _evolution_hint(state.schema_json, schema_json))
    if state.format != config.format:
        raise OptionError(f"option format={config.format!r}: {config.path} was written as "
                          f"{state.format!r}; the format is fixed for the life of a path")
    if state.compression != config.compression:
        # In-progress files continue across restarts: one file must not mix codecs.
        raise OptionError(f"option compression={config.compression!r}: {config.path} was "
                          f"written with {state.compression!r}; the codec is fixed for the life "
                          "of a path")
    if state.encrypted != config.encrypted:
        written = "encrypted" if state.encrypted else "unencrypted"
        raise OptionError(f"option encryption.key: {config.path} was written {written}; "
                          "encryption is fixed for the life of a path (keys may rotate: keep "
                          "the old key in encryption.keys)")
    if state.compact_interval != config.compact_interval and config.compact_interval_explicit:
        raise OptionError(
            f"option log.compactInterval={config.compact_interval}: {config.path} was written "
            f"with {state.compact_interval}; readers derive it from the log, so it is fixed for "
            "the life of a path")
    recorded = recorded_table(state.extra)
    if recorded is not None and recorded[0].name != config.table_format:
        given = config.table_format
        table = recorded[0].name
        raise OptionError(f"option table.format={given or 'none'!r}: a {table} "
                          f"table follows {config.path}'s log; keep table.format={table} (without "
                          "it, the table would stop listing new files)")
    if tuple(state.partition_by) != config.partition_by or [
            (t.source, t.transform) for t in state.partition_terms] != [
            (t.source, t.transform) for t in config.partition_terms]:  # (names: a joined table's)
        given = ", ".join(t.ddl for t in config.partition_terms) or ",".join(config.partition_by)
        found = ", ".join(t.ddl for t in state.partition_terms) or ",".join(state.partition_by)
        raise OptionError(f"option partitionBy={given!r}: {config.path} is partitioned by "
                          f"{found!r}")


def _evolution_hint(old_json: str, new_json: str) -> str:
    """How to go on when the new schema only adds columns or widens types."""
    try:
        change = compare(old_json, new_json, widen=True)
    except SchemaMismatchError:
        return ""
    mode = ",".join(m for m, used in ((ADD_COLUMNS, change.added), (WIDEN_TYPES, change.widened))
                    if used)
    what = [f"add the column(s) {', '.join(change.added)} to this one"] if change.added else []
    what += [f"widen {', '.join(f'{p} from {a} to {b}' for p, a, b in change.widened)} in "
             "this one"] if change.widened else []
    return f", or {' and '.join(what)} with .option('schema.evolution', '{mode}')"


def _simple(schema_json: str) -> str:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(schema_json)).simpleString()
