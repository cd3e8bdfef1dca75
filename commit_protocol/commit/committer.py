"""The driver's side of the protocol: recover, commit and abort micro-batches.

Commit of batch N, in order (each step safe to repeat after a crash):

1. finish a commit that an earlier driver decided but did not publish (its intent exists):
   the planning of the batch does it, and hands the state it then read to the tasks, whose
   reports carry it back (:class:`~commit_protocol.records.messages.PlanBasis`);
2. if the planning found ``_spark_metadata/N``, stop: the batch is committed (idempotent
   replay; the tasks wrote nothing);
3. check every task report against the committed state and storage, and fence the
   in-progress files no committed attempt touched from late zombies (claims,
   :mod:`commit_protocol.commit.claims`);
4. if it renames files or marks partitions, stage the intent: the exact log file, listing the
   renames and markers it implies (an intent that exists already is this batch committed,
   or another writer's);
5. rename finished temp files to their final names (never replacing), then create the
   ``_SUCCESS`` markers of partitions it completes (``partition.commitDelay``);
6. publish the log file with an exclusive create: the commit point;
7. after it, the table commit and the clean-up (:mod:`commit_protocol.commit.after_commit`):
   an error there is retried, then fails the query or waits for the next clean-up, and never
   undoes the batch.

A crash after 4 is finished by step 1 of the next planning (roll forward), so the renames of
step 5 are never visible for longer than one restart. An error at any step makes Spark call
:meth:`Committer.abort`, which deletes only the fresh files no committed log file or staged
intent names: a batch decided (4) or committed (6) is never undone. Reports without a basis
(made by hand) make the commit do steps 1 and 2 itself. On object stores the independent
requests of a step go out together (:mod:`commit_protocol.storage.concurrent`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from commit_protocol.commit import after_commit
from commit_protocol.commit.aborting import keep_fresh_files
from commit_protocol.commit.claims import fence_unclaimed
from commit_protocol.commit.commit_report import log_commit
from commit_protocol.commit.driver_rolls import convert_rolled, seal_rolled
from commit_protocol.commit.housekeeping import clean_up
from commit_protocol.commit.layout import as_committed, first_state, laid_out
from commit_protocol.commit.merge import Finalized, Merged, merge_reports
from commit_protocol.commit.owners import (
    check_replay_owner,
    committed_by,
    lost_race,
    refuse_unless_committed_by,
)
from commit_protocol.commit.partition_markers import complete_partitions
from commit_protocol.commit.publishing import publish_all
from commit_protocol.commit.quarantine import commit_quarantined, refused_counts
from commit_protocol.log import MetadataLog
from commit_protocol.log.files import batch_names, is_compaction_batch
from commit_protocol.log.lines import file_entry
from commit_protocol.metrics import advanced
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import PlanBasis, TaskReport, planned_basis
from commit_protocol.records.plan import WritePlan
from commit_protocol.records.schema_evolution import evolved, retires_in_progress, schema_change
from commit_protocol.records.state import Publish, SinkState
from commit_protocol.storage import Storage
from commit_protocol.storage.concurrent import each
from commit_protocol.tables import table_format_of
from commit_protocol.tables.follow import follower
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import (
    CommitError,
    ConcurrentWriterError,
    UnsupportedQueryError,
)
from commit_protocol.vocabulary.naming import INPROGRESS_DIR, INTENT_DIR
from commit_protocol.vocabulary.release import recorded
from commit_protocol.vocabulary.uris import to_uri

# Operators' view: one INFO line per committed batch, WARNING when the protocol repairs or
# defends something (a commit finished by a later driver, a zombie fenced). Never key bytes:
# keys are references here and resolved only where used.
logger = logging.getLogger("rotsink.commit")


@dataclass(frozen=True)
class CommitResult:
    """What a commit did, for logs, the demo and tests."""

    batch_id: int
    committed: bool
    finalized: list[Finalized] = field(default_factory=list)
    in_progress: int = 0
    compacted: bool = False
    state: SinkState | None = None  # the state it committed (its metrics: totals, open files)


class Committer:
    """Runs on the driver (in Spark's Python planner or commit worker)."""

    def __init__(self, storage: Storage, config: SinkConfig, schema_json: str) -> None:
        self.storage = storage
        self.config = config
        self.schema_json = schema_json
        self.log = MetadataLog(storage, compact_interval=config.compact_interval)
        self.table = follower(storage, config, self.log)  # None without table.format

    # -- recovery ------------------------------------------------------------------------
    def recover(self, *, only: Collection[int] | None = None) -> int | None:
        """Finish any decided-but-unpublished commit (``only`` these batches': ``rotsink
        verify --repair`` finishes those whose driver is gone); return the latest committed
        batch id."""
        ids, intents = each(self.storage, lambda list_names: list_names(), [
            self.log.batch_ids, lambda: sorted(batch_names(self.storage, INTENT_DIR))])
        latest = ids[-1] if ids else None
        for batch_id in intents:
            if only is not None and batch_id not in only:
                continue
            if latest is None or batch_id == latest + 1:  # older ones were published
                logger.warning("batch %d: finishing the commit an earlier driver decided but did "
                             "not publish (roll forward from its intent)", batch_id)
                self._finish(self.log.read_intent_state(batch_id))
                latest = batch_id
        failpoints.hit("driver.after_recover")
        return latest

    def latest_state(self) -> SinkState | None:
        latest = self.recover()
        return None if latest is None else self.log.read_state(latest)

    def start_table(self, state: SinkState | None, *, now_ms: int | None = None,
                    planned_columns: bool = False) -> None:
        """When a query starts (its first planning in a process): refuse a table the output
        cannot follow, then catch the table up with the log (a driver killed between the
        two commit points left it behind), and name rows it deletes in place."""
        if self.table is None:
            return
        self.table.check(state, self.schema_json, planned_columns=planned_columns)
        if state is not None:
            self.table.catch_up(state.batch_id, now_ms=now_ms or int(time.time() * 1000))
            self.table.name_row_deletes()

    def planned(self, config: SinkConfig) -> SinkConfig:
        """``config`` as files are encoded: with the table's field ids and NOT NULL columns."""
        if config.table_format is None:
            return config
        return table_format_of(config).planned(self.storage, config, self.schema_json)

    def _use(self, config: SinkConfig) -> None:
        if config != self.config:  # the follower too: it commits the table's terms
            self.config, self.table = config, follower(self.storage, config, self.log)

    # -- commit --------------------------------------------------------------------------
    def commit(self, batch_id: int, messages: list[TaskReport | None], *,
               now_ms: int | None = None, extra: dict[str, Any] | None = None) -> CommitResult:
        """Commit micro-batch ``batch_id`` from its tasks' reports (one slot per task), its
        state carrying ``extra`` too."""
        if messages and all(m is None for m in messages):
            raise UnsupportedQueryError(
                "rotsink received no data from any task: continuous triggers are not supported "
                "(Spark never calls write() in continuous mode and data would be lost); "
                "use a micro-batch trigger such as processingTime or availableNow")
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        started = time.monotonic()
        basis = planned_basis(messages)
        if basis is None:  # reports made without a plan read from the log: read it now
            latest = self.recover()
            if latest is not None and batch_id <= latest:
                check_replay_owner(self.log, self.storage.root_uri, batch_id, latest, messages)
                return self._replayed(batch_id, latest, now_ms)
        else:  # the planning of this batch recovered and read the log: continue from there
            latest = basis.latest_batch_id
            if latest is not None and batch_id <= latest:
                return self._replayed(batch_id, latest, now_ms)  # tasks skipped it
        state = self._state_for(batch_id, latest, messages, basis)
        self._adopt_interval(state.compact_interval)
        change = schema_change(state, self.schema_json, self.config)
        reports = [m for m in messages if m is not None and not m.skipped]
        slots = fence_unclaimed(self.storage, state.slots(), reports, batch_id)
        try:
            merged = merge_reports(slots, reports, self.storage, self.config.rotation,
                                   is_bulk=self.config.is_bulk, now_ms=now_ms,
                                   retire=retires_in_progress(state, self.schema_json,
                                                              self.config))
        except CommitError:  # reported files gone: published by this very batch's commit?
            if committed_by(self.storage, self.log, replace(state, batch_id=batch_id)):
                return CommitResult(batch_id, committed=False)
            raise
        if self.config.is_bulk:
            encoding = self.config if not any(f.rolled_by_driver for f in merged.finalized) \
                else self.planned(self.config)
            merged = replace(merged, finalized=[
                convert_rolled(self.storage, encoding, f) for f in merged.finalized])
        elif state.encrypted:
            merged = replace(merged, finalized=[
                seal_rolled(self.storage, self.config, f, batch_id) for f in merged.finalized])
        new_state = self._next_state(state, batch_id, merged, reports, now_ms, extra or {})
        if change is not None:
            new_state = evolved(new_state, self.schema_json, batch_id, change)
            failpoints.hit("driver.schema_change")
        if self.config.partition_commit_delay_ms is not None:  # _SUCCESS markers
            new_state = complete_partitions(new_state, reports, merged, now_ms,
                                            self.config.partition_commit_delay_ms)
        entries = [file_entry(to_uri(self.storage.root_uri, f.name), f.size, now_ms)
                   for f in merged.finalized]
        dropped: frozenset[str] = frozenset()
        if self.table is not None and latest is not None:  # other writers' changes, followed
            step = self.table.log_step(state, batch_id, now_ms)
            new_state = replace(new_state, extra={**new_state.extra, **step.extra})
            entries, dropped = entries + step.entries, step.dropped
        self._make_durable(files=[f.temp for f in merged.finalized if f.rolled_by_driver],
                           directories=[INPROGRESS_DIR])
        commit_quarantined(self.config, batch_id, reports, now_ms=now_ms,  # its refused rows
                           committer_class=type(self))
        failpoints.hit("driver.before_stage")
        intent = bool(new_state.publish or new_state.markers)  # else nothing precedes the log
        try:
            data = self.log.stage(new_state, entries, previous=None if latest is None else state,
                                  now_ms=now_ms, retention_ms=self.config.retention_ms,
                                  intent=intent, dropped=dropped)
        except FileExistsError:  # committed, or decided by this query's earlier attempt
            refuse_unless_committed_by(self.storage, self.log, new_state)
            self.recover(only=[batch_id])  # that attempt's intent, landed late: its files
            return CommitResult(batch_id, committed=False)
        if intent or data is None:
            self._make_durable(directories=[INTENT_DIR])
        failpoints.hit("driver.after_stage")
        if not self._finish(new_state, data):
            return CommitResult(batch_id, committed=False)
        # The batch is committed: nothing from here on may undo it (after_commit)
        footers = {f.name: f.footer for f in merged.finalized if f.footer is not None}
        if self.table is not None:  # the table follows the log (commit_protocol.tables)
            table = self.table
            after_commit.tried(after_commit.table_step(self.config), batch_id,
                               lambda: table.follow(new_state, now_ms=now_ms, footers=footers))
        deleted = after_commit.housekeeping(batch_id, lambda: clean_up(
            self.storage, self.log, new_state, self.config, now_ms=now_ms))
        log_commit(batch_id, merged, new_state, deleted, time.monotonic() - started)
        return CommitResult(batch_id, True, merged.finalized, len(merged.in_progress),
                            is_compaction_batch(batch_id, self.config.compact_interval),
                            new_state)

    def _replayed(self, batch_id: int, latest: int, now_ms: int) -> CommitResult:
        """A batch committed already (Spark replays the batch whose commit it did not see
        end): nothing to commit, but the table may be behind the log, when the step after the
        commit point failed (after_commit), in this very process, which started the table
        already."""
        if self.table is not None:
            table = self.table
            after_commit.tried(after_commit.table_step(self.config), latest,
                               lambda: table.catch_up(latest, now_ms=now_ms))
        return CommitResult(batch_id, committed=False)

    def _adopt_interval(self, interval: int) -> None:
        """Name log files with the path's compaction interval, whatever the query's option
        says: it is fixed for the life of a path (``check_compatible`` refuses another one
        that was set explicitly)."""
        if interval != self.config.compact_interval:
            self.config = replace(self.config, compact_interval=interval)
            self.log.interval = interval

    def _state_for(self, batch_id: int, latest: int | None,
                   messages: list[TaskReport | None], basis: PlanBasis | None) -> SinkState:
        query_ids = {m.query_id for m in messages if m is not None}
        if len(query_ids) > 1:
            raise CommitError(f"batch {batch_id}: reports from several queries {sorted(query_ids)}")
        query_id = query_ids.pop() if query_ids else ""
        if latest is None:
            if batch_id != 0:
                raise CommitError(
                    f"{self.storage.root_uri} has no metadata log but the query is at batch "
                    f"{batch_id}: was _spark_metadata deleted? Readers need the log from batch 0; "
                    "write to a new path or start the query from a new checkpoint")
            self._use(laid_out(self.storage, self.config, None))  # (layout's docstring)
            return first_state(self.config, self.schema_json, query_id)
        if batch_id != latest + 1:
            raise CommitError(f"batch {batch_id} cannot follow committed batch {latest}: "
                              f"expected batch {latest + 1}")
        if basis is not None and basis.compact_interval is not None:
            self._adopt_interval(basis.compact_interval)  # to name batch ``latest``'s file
        state = self.log.read_state(latest, state_id=basis.state_id if basis else None)
        if basis is not None and basis.state_id and state.state_id != basis.state_id:
            raise ConcurrentWriterError(
                f"{self.log.path_of(latest)} changed while batch {batch_id} ran (planned from "
                f"state {basis.state_id!r}, found {state.state_id!r}): another writer is "
                f"committing to {self.storage.root_uri}")
        if query_id and state.query_id and query_id != state.query_id:
            plan = WritePlan.from_state(state, self.storage.root_uri)
            raise ConcurrentWriterError(plan.owner_message(query_id))
        self._use(as_committed(self.storage, self.config, state))
        return state

    def _next_state(self, state: SinkState, batch_id: int, merged: Merged,
                    reports: list[TaskReport], now_ms: int, extra: dict[str, Any]) -> SinkState:
        publish = tuple(Publish(f.temp, f.name, f.size, f.reason) for f in merged.finalized)
        files = [f for r in reports for f in r.files]
        appended = (len(reports), sum(f.new_records for f in files),
                    sum(f.end - f.start for f in files))
        table = {} if self.config.table_format is None else \
            table_format_of(self.config).record(self.config, reports)
        extra = advanced({**state.extra, **table, **extra},
                         after=state.batch_id, batch_id=batch_id, files=files,
                         appended=appended, finalized=len(publish),
                         refused=refused_counts(reports),
                         now_ms=now_ms)  # the output's totals, for its metrics
        return replace(state.with_batch(batch_id, merged.in_progress), publish=publish,
                       markers=(), appended=appended, state_id=uuid.uuid4().hex,
                       extra=recorded(extra, batch_id),
                       query_name=self.config.query_name)

    def _finish(self, state: SinkState, data: bytes | None = None) -> bool:
        """Steps 5 and 6: publish the files the staged state finalizes, then the log file
        (``data``, or a copy of the intent when None). False when this query's log file of
        the batch existed already (an earlier attempt, or a recovery, published it)."""
        try:
            publish_all(self.storage, state.publish, state.markers)
        except CommitError as e:
            if self.storage.exists(self.log.path_of(state.batch_id)):
                raise lost_race(self.log, state) from e
            raise
        self._make_durable(directories=sorted(
            {p.name.rpartition("/")[0] for p in state.publish} | set(state.markers)))
        failpoints.hit("driver.before_log_write")
        published = self.log.publish(state.batch_id, data, sync=self.config.fsync)
        if not published and \
                self.log.read_head(state.batch_id).state.query_id != state.query_id:
            raise lost_race(self.log, state)
        failpoints.hit("driver.after_log_write")
        return published

    def _make_durable(self, *, files: Iterable[str] = (), directories: Iterable[str] = ()) -> None:
        """``commit.fsync``: what the next step of the commit names must survive a power
        loss before that step, so a commit point never names bytes or files a crash of the
        operating system could take back: the driver's own encodings and copies before the
        intent, the intent before the renames it decides, the renamed files and markers
        before the log file, and the log file before the commit returns (Spark then records
        the batch as done and will not replay it)."""
        if self.config.fsync:
            self.storage.sync(files)
            self.storage.sync_directories(directories)

    # -- abort ---------------------------------------------------------------------------
    def abort(self, batch_id: int, messages: list[TaskReport | None]) -> None:
        """A failed batch: its files are left to the clean-up, since its commit may still
        land (:mod:`commit_protocol.commit.aborting`)."""
        failpoints.hit("driver.during_abort")
        keep_fresh_files(batch_id, messages)

