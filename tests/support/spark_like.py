"""Micro-batches driven as Spark drives a rotsink query, without Spark, for tests and
benchmarks of the protocol under errors: each batch is planned (the first planning of the
process starts the table, as ``datasource/writing/writer.py`` does), written by one task
(rotsink's own ``TaskWriter``) and committed; an error at any step makes Spark abort the
epoch with the reports it holds, and the restarted query replays the batch with the same rows.
The restart is in the same process (the harder case: the process remembers the table as
started, so only the replay can catch it up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pyarrow as pa

from commit_protocol.commit.committer import Committer
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import TaskReport
from commit_protocol.records.plan import WritePlan
from commit_protocol.records.schema_evolution import retires_in_progress
from commit_protocol.storage import open_storage
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary.errors import RotsinkError

QUERY = "q"


@dataclasses.dataclass
class SparkLikeQuery:
    """One query's micro-batches: ``rows(batch_id)`` (None: a batch with no task, as a trigger
    with no new input) written by task partition ``batch_id % 2`` under ``schema_json(batch_id)``.
    Errors of the kinds in ``caught`` abort the batch, which is then replayed, up to
    ``attempts`` times; each is recorded in ``failures`` ("Type: message")."""

    cfg: SinkConfig
    rows: Callable[[int], pa.RecordBatch | None]
    schema_json: Callable[[int], str]
    caught: tuple[type[BaseException], ...] = (RotsinkError,)
    attempts: int = 6
    started: bool = False  # the first planning of the process started the table
    failures: list[str] = dataclasses.field(default_factory=list)

    def run(self, batch_id: int, *, now_ms: int) -> None:
        """Batch ``batch_id`` until it commits: each failure aborted, then replayed."""
        for _ in range(self.attempts):
            self.reports: list[TaskReport | None] = [None]  # what Spark holds for the abort
            try:
                self._attempt(batch_id, now_ms)
                return
            except self.caught as e:
                self.failures.append(f"{type(e).__name__}: {e}")
                try:
                    Committer(self.storage, self.cfg, self.schema_json(batch_id)).abort(
                        batch_id, self.reports)
                except Exception:  # noqa: BLE001  a failpoint, a store error
                    pass  # Spark logs a failed abort; the query fails as it would anyway
        raise AssertionError(f"batch {batch_id} never committed: {self.failures[-3:]}")

    @property
    def storage(self):
        return open_storage(self.cfg.path, self.cfg.fs_options)

    def _attempt(self, batch_id: int, now_ms: int) -> None:
        schema_json = self.schema_json(batch_id)
        storage = self.storage
        committer = Committer(storage, self.cfg, schema_json)
        state = committer.latest_state()
        if not self.started:
            committer.start_table(state, now_ms=now_ms)
            self.started = True
        retire = state is not None and retires_in_progress(state, schema_json, self.cfg)
        plan = WritePlan.from_state(state, storage.root_uri, retire_in_progress=retire)
        planned = committer.planned(self.cfg)
        reports: list[TaskReport] = []
        rows = self.rows(batch_id)
        if rows is not None:
            reports.append(TaskWriter(storage, planned, plan, batch_id=batch_id,
                                      partition=batch_id % 2, attempt=0, query_id=QUERY
                                      ).write([rows]))
            self.reports = list(reports)
        Committer(storage, self.cfg, schema_json).commit(batch_id, list(reports),
                                                         now_ms=now_ms)
