"""Chaos on a shared table, without Spark: a rolling query whose commits are killed at random
steps (and replayed by a new driver) while other writers append, delete by predicate, update,
compact, and clean up (Delta's VACUUM with zero retention, Iceberg's snapshot expiry) once
rotsink has followed them.

After every step:
- the table's own reader (delta-rs, pyiceberg) holds exactly the rows the test wrote and
  did not delete (tracked by the test: rotsink's input, the others' appends, the deletes),
  none twice;
- after each rotsink commit, rotsink's reader lists exactly the table's rows;
- once a log compaction followed every change, the files ``_spark_metadata`` lists (read as
  Spark reads them, by the tests' own code) hold exactly the table's rows;
- ``verify`` exits 0 (``--repair`` after a kill between the log file and the table commit
  first, as a restart does).

``ROTSINK_CHAOS_STEPS`` sets the length (small in CI, large on demand)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import random
from collections import Counter

import pyarrow as pa
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.commit.committer import Committer
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import open_storage
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary import failpoints
from tests.unit.test_delta_commits import SCHEMA_JSON, forget, table_config
from tests.unit.test_shared_tables import (
    _iceberg,
    format_of,
    rotsink_ids,
    spark_ids,
    table_ids,
)

STEPS = int(os.environ.get("ROTSINK_CHAOS_STEPS", "40"))
ROWS = 10
KILL_POINTS = ("driver.after_stage", "driver.after_rename", "driver.after_log_write",
               "table.before_follow", "table.after_follow", "table.before_commit",
               "table.after_commit")
INTERVAL = 3


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


class Chaos:
    """The query, the other writers, and what the test knows the table must hold."""

    def __init__(self, cfg: SinkConfig, seed: int) -> None:
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.batch = 0
        self.expected: Counter = Counter()  # ids written and not deleted
        self.next_other = 1_000_000
        # another writer changed the table since the last log compaction: Spark's listing
        # may still differ from the table
        self.changed_since_compaction = False
        self.tally: Counter = Counter()

    @property
    def delta(self) -> bool:
        return format_of(self.cfg) == "delta"

    # -- rotsink ----------------------------------------------------------------------------
    def commit(self) -> None:
        batch_id = self.batch
        ids = list(range(batch_id * ROWS, (batch_id + 1) * ROWS))
        rows = pa.record_batch({"id": pa.array(ids, pa.int64()),
                                "grp": pa.array([("a", "b")[i % 2] for i in ids])})
        point = self.rng.choice(KILL_POINTS) if self.rng.random() < 0.4 else None
        if point is not None:
            os.environ[failpoints.ENV_VAR] = f"{point}=raise"
            try:
                self._commit_once(batch_id, rows)
                self.tally["kills not reached"] += 1
            except failpoints.FailpointError:
                self.tally[f"killed at {point}"] += 1
            finally:
                del os.environ[failpoints.ENV_VAR]
            forget()  # a new driver: replays the batch, or starts and catches the table up
            storage = open_storage(self.cfg.path)
            committer = Committer(storage, self.cfg, SCHEMA_JSON)
            committer.start_table(committer.latest_state())
        self._commit_once(batch_id, rows)
        self._committed(batch_id, ids)

    def _commit_clean(self) -> None:
        """A batch committed with no kill (between another writer's read and its commit)."""
        batch_id = self.batch
        ids = list(range(batch_id * ROWS, (batch_id + 1) * ROWS))
        self._commit_once(batch_id, pa.record_batch({
            "id": pa.array(ids, pa.int64()), "grp": pa.array([("a", "b")[i % 2] for i in ids])}))
        self._committed(batch_id, ids)

    def _committed(self, batch_id: int, ids: list[int]) -> None:
        self.batch += 1
        self.tally["batches"] += 1
        self.expected += Counter(ids)
        if batch_id % INTERVAL == INTERVAL - 1:  # a compaction: every change followed
            self.changed_since_compaction = False

    def _commit_once(self, batch_id: int, rows: pa.RecordBatch) -> None:
        storage = open_storage(self.cfg.path)
        committer = Committer(storage, self.cfg, SCHEMA_JSON)
        plan = WritePlan.from_state(committer.latest_state(), storage.root_uri)
        report = TaskWriter(storage, self.cfg, plan, batch_id=batch_id, partition=0,
                            attempt=0, query_id="chaos").write([rows])
        Committer(storage, self.cfg, SCHEMA_JSON).commit(batch_id, [report])

    # -- the other writers --------------------------------------------------------------------
    def append(self) -> None:
        ids = list(range(self.next_other, self.next_other + 3))
        self.next_other += 3
        rows = pa.table({"id": pa.array(ids, pa.int64()), "grp": pa.array(["a"] * 3)})
        if self.delta:
            from deltalake import write_deltalake

            write_deltalake(self.cfg.path, rows, mode="append", partition_by=["grp"])
        else:
            table = _iceberg(self.cfg)
            table.append(rows.cast(table.schema().as_arrow()))
        self.expected += Counter(ids)

    def delete(self) -> None:
        """Delete a range of ids; half the time the DELETE reads the table, rotsink commits
        a batch, and the DELETE commits after it (it must land: DESIGN 4.14)."""
        present = sorted(self.expected)
        low, high = self._range(present, width=self.rng.randint(1, 5))
        if low is None:
            return
        where = f"id >= {low} AND id < {high}"
        if self.delta:
            from deltalake import DeltaTable

            table = DeltaTable(self.cfg.path)
            self._maybe_commit_between()
            self._other(lambda: table.delete(where))
        else:
            iceberg = _iceberg(self.cfg)
            self._maybe_commit_between()
            self._other(lambda: iceberg.delete(delete_filter=where.replace("AND", "and")))
        for i in range(low, high):  # the rows of the table it read; the stream's stay
            if i in present:
                self.expected.pop(i, None)

    def update(self) -> None:
        """Move some rows to the other partition (their files rewritten, the ids kept);
        half the time across a rotsink commit, as :meth:`delete`."""
        present = sorted(self.expected)
        low, high = self._range(present, width=3)
        if low is None:
            return
        where = f"id >= {low} AND id < {high}"
        if self.delta:
            from deltalake import DeltaTable

            table = DeltaTable(self.cfg.path)
            self._maybe_commit_between()
            self._other(lambda: table.update(updates={"grp": "'c'"}, predicate=where))
        else:
            iceberg = _iceberg(self.cfg)
            rows = iceberg.scan(row_filter=where.replace("AND", "and")).to_arrow()
            rows = rows.set_column(rows.schema.get_field_index("grp"), "grp",
                                   pa.array(["c"] * rows.num_rows, pa.string()))
            self._maybe_commit_between()
            self._other(lambda: iceberg.overwrite(rows,
                                                  overwrite_filter=where.replace("AND", "and")))

    def _range(self, present: list[int], *, width: int) -> tuple[int | None, int]:
        """A range of ids to change. Delta runs it under Serializable isolation (open-source
        Delta's only level), where a DELETE that read before rotsink's append conflicts with
        the appended files its predicate may match: its ids are kept below the next batch's
        (the appended file's statistics then rule it out, as for a GDPR delete of old rows);
        Iceberg (snapshot isolation on rotsink's tables) takes any."""
        if self.delta:
            present = [i for i in present if i + width <= self.batch * ROWS]
        if not present:
            return None, 0
        low = self.rng.choice(present)
        return low, low + width

    def _maybe_commit_between(self) -> None:
        if self.rng.random() < 0.5:
            rows_before = Counter(self.expected)
            self._commit_clean()
            self.tally["others' changes across a rotsink commit"] += 1
            assert self.expected - rows_before  # the batch's rows

    def _other(self, change) -> None:
        """Another writer's commit: it must land on its first try."""
        try:
            change()
        except Exception as e:  # noqa: BLE001  counted, then the test fails on it
            self.tally["other writers' failed commits"] += 1
            raise AssertionError(f"another writer's commit failed beside the stream: "
                                 f"{type(e).__name__}: {e}") from e

    def compact(self) -> None:
        if self.delta:
            from deltalake import DeltaTable

            DeltaTable(self.cfg.path).optimize.compact()
        else:
            from tests.support.tables import rewrite_as_another_writer

            rewrite_as_another_writer(self.cfg.path, {"table.format": "iceberg",
                                                      "format": "parquet"})

    def clean_up(self) -> None:
        """Only once a compaction has followed every change: Spark's readers list no file
        the table removed."""
        if self.changed_since_compaction:
            return
        if self.delta:
            from deltalake import DeltaTable

            DeltaTable(self.cfg.path).vacuum(retention_hours=0, dry_run=False,
                                             enforce_retention_duration=False)
        else:
            now = dt.datetime.now(dt.timezone.utc)
            _iceberg(self.cfg).maintenance.expire_snapshots().older_than(now).commit()
        self.tally["clean-ups"] += 1

    # -- the checks ---------------------------------------------------------------------------
    def check(self, step: str) -> None:
        found = table_ids(self.cfg)
        assert found == self.expected, (step, self.tally)
        if step == "commit":
            assert rotsink_ids(self.cfg) == found, (step, self.tally)
            if not self.changed_since_compaction:
                assert spark_ids(self.cfg) == found, (step, self.tally)
                self.tally["Spark listings equal to the table"] += 1
        result = verify_output(open_storage(self.cfg.path), commit_timeout_s=0)
        assert result.ok, (step, result.problems)


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_a_shared_table_through_kills_and_other_writers(tmp_path, table_format, shown):
    cfg = dataclasses.replace(table_config(str(tmp_path / "out"), max_batches=1),
                              table_format=table_format)  # files roll
    chaos = Chaos(cfg, seed=4000 + len(table_format))
    others = ("append", "delete", "update", "compact", "clean_up")
    for _ in range(3):
        chaos.commit()
    for _ in range(STEPS):
        step = "commit" if chaos.rng.random() < 0.6 else chaos.rng.choice(others)
        if step == "commit":
            chaos.commit()
        else:
            getattr(chaos, step)()
            chaos.changed_since_compaction |= step != "clean_up"
            chaos.tally[step] += 1
        chaos.check(step)
    for _ in range(INTERVAL + 1):  # a compaction follows the last changes for Spark too
        chaos.commit()
    chaos.changed_since_compaction = False
    assert spark_ids(cfg) == rotsink_ids(cfg) == table_ids(cfg) == chaos.expected
    assert chaos.tally["batches"] > STEPS // 3
    assert chaos.tally["other writers' failed commits"] == 0
    assert chaos.tally["others' changes across a rotsink commit"] > 0
    shown(f"{table_format}: {STEPS} steps: "
          + ", ".join(f"{k} {v}" for k, v in sorted(chaos.tally.items())))
