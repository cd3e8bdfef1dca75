"""Crash-loop harness: kill the driver at random and at every failpoint, again and again,
then check the output against the input row by row.

    python -m tests.crashloop --random-kills 200 [--workdir DIR] [--seed N]

Each *life* adds numbered input files, starts :mod:`tests.crash_job` in a process group of
its own and ends in one of these ways:

* ``random``: SIGKILL of the whole group (Python driver, JVM, workers) at a random moment
  after the query started;
* ``failpoint``: a failpoint armed for that life: ``killall`` (the driver dies at that step
  of the protocol), ``kill`` (one Python worker dies; Spark retries the task), ``raise:x2``
  (a task's first attempt and its retry fail);
* ``raise``: several failpoints armed to raise once each (an error, not a kill: a store's
  503, a catalog's timeout); Spark aborts the epoch, and the life's application starts the
  failed query again from its checkpoint each time (``RESTART``), which must go on to consume
  all input;
* ``clean``: no fault; the query consumes all input.

A life whose driver ran to its end (``done``: clean and raise lives, random ones that ended
before their kill) must have left nothing to repair: ``verify_output`` without repair finds
nothing wrong and no commit pending. After every life ``verify_output(..., repair=True)``
must find nothing wrong (a commit cut
short between its renames and its log file is rolled forward and counted). During every life
and its repair a reader reads the output in a loop (:mod:`tests.support.crash_reader`): its
reads may fail while a driver dies, but never return a wrong row. A final clean life
consumes the rest; then rotsink's reader must return every input row exactly once and Spark's
reader exactly the rows of the finalized files.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from commit_protocol.vocabulary.failpoints import (
    ALL_POINTS,
    ENV_VAR,
    FILE_ENV_VAR,
    QUARANTINE_POINTS,
    TABLE_POINTS,
    TASK_POINTS,
    parse,
)
from tests.crash_job import CLASS_ARCHIVE, INPUT_SCHEMA, RESTARTS, SPARK_TABLE_READS
from tests.support.crash_reader import SCHEMA as READ_SCHEMA
from tests.support.crash_reader import BesideReader, ReaderTally
from tests.support.feed_follower import Follower
from tests.support.streams import has_null_name, tag_of, write_numbered_source

ROOT = Path(__file__).resolve().parents[1]
SINK_OPTIONS = {
    "format": "jsonl",
    "compression": "zstd",
    "partitionBy": "grp",             # 3 directories per task: several slots per partition
    "rotation.maxRecords": "50",      # rolls inside tasks (~33 rows per directory a batch)
    "rotation.maxBatches": "3",       # rolls by the driver at commit
    "rotation.interval": "20s",
    "rotation.inactivity": "8s",      # driver rolls of files no task touched
    "log.compactInterval": "3",       # compaction (and cleanup) every third batch
    "partition.commitDelay": "0s",    # a _SUCCESS marker whenever a directory has no open file
    "log.cleanupDelay": "1s",
    "feed.retention": "1h",           # the states a paused change feed reads, kept an hour
}


@dataclass(frozen=True)
class Life:
    kind: str           # "random", "failpoint", "raise" or "clean"
    spec: str = ""      # the failpoints armed for this life
    point: str = ""     # the failpoint that must fire (a raise life: those of its spec)

    @property
    def label(self) -> str:
        return self.spec or self.kind

    @property
    def points(self) -> set[str]:
        """The failpoints that must fire (a raise life has several)."""
        return set(self.point.split(",")) - {""}

    def reaches(self, points: Sequence[str]) -> bool:
        """Whether one of ``points`` must fire in this life."""
        return bool(self.points & set(points))


# Executor faults Spark survives by retrying the task, armed beside a driver-side kill so
# that the same life first loses a Python worker or a task attempt, then the whole driver.
TASK_FAULTS = (
    "task.mid_append=kill:once",        # a Python worker dies half-way through a write
    "task.after_append=raise:x2",       # a task's first attempt and its first retry fail
    "task.after_resume=kill:once",      # a worker dies after reopening a committed file
    "task.before_roll=raise:once",
    "task.before_report=kill:once",
)


def failpoint_lives(points: Sequence[str] = ALL_POINTS) -> list[Life]:
    """One life per failpoint that kills the whole driver there (driver-side points also
    arm one executor fault first). ``driver.during_abort`` needs a batch whose tasks all fail;
    ``task.after_fence_copy`` a retry of a task that reopened a committed file (its first
    attempt holds the claim, so the retry fences)."""
    lives = [Life("failpoint", f"{p}=killall:once", p) for p in points
             if p in TASK_POINTS and p != "task.after_fence_copy"]
    if "task.after_fence_copy" in points:
        lives.append(Life("failpoint", "task.after_resume=raise:once,"
                                       "task.after_fence_copy=killall:once",
                          "task.after_fence_copy"))
    for i, point in enumerate(p for p in points if p not in TASK_POINTS):
        if point == "driver.during_abort":
            spec = "task.before_report=raise,driver.during_abort=killall:once"
        else:
            spec = f"{TASK_FAULTS[i % len(TASK_FAULTS)]},{point}=killall:once"
        lives.append(Life("failpoint", spec, point))
    return lives


# Points that raise in a life of their own kind: a point reached only after another failure
# gets that one armed beside it, as in failpoint_lives; a raise life restarts its query after
# each error, up to once per point armed and two more.
RAISES_PER_LIFE = 12
RAISE_COMPANIONS = {
    # every attempt of a task fails (local[2,4]: 4 attempts; 8 hits cover both tasks)
    "driver.during_abort": "task.before_report=raise:x8",
    "task.after_fence_copy": "task.after_resume=raise:once",
}


def raise_lives(points: Sequence[str]) -> list[Life]:
    """Lives in which each of ``points`` raises once (see the module docstring),
    :data:`RAISES_PER_LIFE` points a life. Not the schema change's points: a loop changes its
    schema once, in the life that kills the driver there (their errors, and the replay after
    them: ``tests/unit/test_step_errors.py``)."""
    points = [p for p in points if p not in SCHEMA_POINTS]
    lives = []
    for start in range(0, len(points), RAISES_PER_LIFE):
        group = points[start:start + RAISES_PER_LIFE]
        spec = [f"{p}=raise:once" for p in group]
        spec += [RAISE_COMPANIONS[p] for p in group if p in RAISE_COMPANIONS
                 and RAISE_COMPANIONS[p].split("=")[0] not in group]
        lives.append(Life("raise", ",".join(spec), ",".join(group)))
    return lives


@dataclass
class Tally:
    lives: int = 0
    random_kills: int = 0
    driver_kills: int = 0       # killall failpoints that fired
    worker_kills: int = 0
    task_failures: int = 0
    finished_early: int = 0     # random lives whose query ended before the kill
    repaired: int = 0           # commits cut short, rolled forward by verify --repair
    table_checks: int = 0       # lives after which the table (table.format) was read whole
    own_run_table_checks: int = 0  # of those, lives whose driver ran to its end: read before
                                   # the repair too
    table_rows: int = 0         # rows its last read returned
    rewritten: int = 0          # files another writer's rewrites removed from the table
    spark_table_reads: int = 0  # reads of the table by Spark's reader in the lives' apps
    spark_final_checks: int = 0  # lives whose app read the table beside spark.read.parquet
    fired: Counter = field(default_factory=Counter)      # any action, by point
    killed_at: Counter = field(default_factory=Counter)  # killall that fired, by point
    raised_at: Counter = field(default_factory=Counter)  # raise lives' points that fired
    restarts: int = 0           # failed queries a raise life started again
    problems: list[str] = field(default_factory=list)


@dataclass
class CrashLoop:
    """The loop over lives in ``workdir``; see the module docstring."""

    workdir: Path
    seed: int = 7
    out_url: str = ""           # default: <workdir>/output; or s3://..., with fs.* options
    files_per_life: int = 4
    rows_per_file: int = 100
    life_timeout_s: float = 240.0    # plus catch_up_s per input file not yet consumed
    catch_up_s: float = 3.0
    options: dict[str, str] = field(default_factory=lambda: dict(SINK_OPTIONS))
    tally: Tally = field(default_factory=Tally)
    files_written: int = 0
    window_s: float = 12.0      # random kills land in [0, window] after READY
    points: tuple[str, ...] = ALL_POINTS  # the failpoints of the last run
    raises: bool = True  # raise lives of the same points beside the kills (raise_lives)
    reads: ReaderTally = field(default_factory=ReaderTally)
    group_by_file: bool = False  # each input file in one directory: untouched slots too
    # 2 tasks per batch, except in lives that must kill the driver while it encodes: those
    # run 1 task, so the staged slots task partition 1 left get no task and only the driver
    # can roll them (a task rolls its own partition's idle slots).
    lone_task_for_driver_rolls: bool = False
    follower: Follower | None = None  # a change-feed query beside it, killed every life
    # schema.evolution mid-loop: from the life armed at driver.schema_change (or the middle
    # life, when no life is), the driver reads the input's added field (SCHEMA_V2)
    schema_change: bool = False
    evolved: bool = False
    # a Spark session: the reader beside the lives reads through pyspark_rotsink.read
    fast_path_spark: Any = None
    # each life's application also reads the table (table.format) with Spark's own reader
    # of the format while its query commits (tests/crash_job.py): on a PySpark that has one
    spark_table_reads: bool = False
    class_archives: bool = True  # False: a short loop's drivers start without one
    # a table shared with another writer: before each life, a maintenance job rewrites the
    # table's files keeping their rows (tests/support/tables.py), which the next commit
    # must follow (failpoints table.before_follow, table.after_follow)
    rewrites: bool = False
    _spark_table_ids: Counter = field(default_factory=Counter)
    # ids the input holds more than once (a Kafka producer that retried: at least once) ->
    # how often; the output must hold each as often as the input does
    input_counts: Counter = field(default_factory=Counter)
    # every eleventh input row with a null name, which a NOT NULL column of the table refuses:
    # with errors.mode=quarantine, those rows are in the quarantine (quarantine_loop)
    null_names: bool = False

    def __post_init__(self) -> None:
        if self.schema_change:
            self.options = {**self.options, "schema.evolution": "addColumns"}
        self.switch_at = 0  # the life that evolves the schema, without its failpoint
        self.switch_at_life = -1  # the life that did
        self.rng = random.Random(self.seed)
        self.source = self.workdir / "input"
        self.out_url = self.out_url or str(self.workdir / "output")
        self.checkpoint, self.logs = self.workdir / "checkpoint", self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    @property
    def rows_in(self) -> int:
        return self.files_written * self.rows_per_file

    @property
    def quarantine_url(self) -> str:
        """Where the rows the output refuses are kept ("": errors.mode=fail)."""
        return (f"{self.out_url}/_quarantine" if self.options.get("errors.mode") == "quarantine"
                else "")

    @property
    def read_options(self) -> dict[str, str]:
        """What a reader of the output needs: its filesystem and key options."""
        return {k: v for k, v in self.options.items() if k.startswith(("fs.", "encryption."))}

    @functools.cached_property
    def reader(self) -> BesideReader:
        """Reads the output while each life runs (see :mod:`tests.support.crash_reader`)."""
        from commit_protocol.crypto.keys import KeyRefs

        keys = KeyRefs.from_options(self.options)
        fast_path = None
        if self.fast_path_spark is not None:
            self.reads.way = "pyspark_rotsink.read"
            fast_path = self._read_by_fast_path
        return BesideReader(self.storage, keys.ring() if keys else None, self.reads,
                            rows_per_group=self.rows_per_file if self.group_by_file else 0,
                            schema=self.read_schema, fast_path=fast_path)

    def _read_by_fast_path(self) -> list[dict]:
        import pyspark_rotsink

        df = pyspark_rotsink.read(self.fast_path_spark, self.out_url, **self.read_options)
        return [row.asDict() for row in df.select("id", "name", "grp", "score").collect()]

    @property
    def read_schema(self) -> pa.Schema:
        """The output's columns, as the reader beside the lives reads them."""
        return READ_SCHEMA

    def storage(self):
        from commit_protocol.storage import open_storage
        from datasource.options.sink import fs_options

        return open_storage(self.out_url, fs_options(self.options))

    def run(self, *, random_kills: int, points: Sequence[str] = ALL_POINTS) -> None:
        """A life per failpoint in ``points`` (re-queued until its point fires, three tries),
        raise lives of the same points (the unfired ones re-queued, three tries) and
        ``random_kills`` random kills, shuffled; then clean lives until the query has
        consumed everything."""
        self.points = tuple(points)
        pending = (failpoint_lives(points) + (raise_lives(points) if self.raises else [])
                   + [Life("random")] * random_kills)
        self.switch_at = self.tally.lives + len(pending) // 2
        self.rng.shuffle(pending)
        tries: Counter = Counter()
        while pending:
            life = pending.pop(0)
            if life.reaches(DRIVER_CONVERT_POINTS) and self.lone_task_for_driver_rolls:
                self._stage_rows_in_task_partition_1()
            if life.reaches(SCHEMA_POINTS):
                self._commit_a_batch_of_the_first_schema()
            ending = self.live(life)
            if life.kind == "raise":
                unfired = [p for p in sorted(life.points) if p not in self.tally.raised_at]
                tries[life] += 1
                if unfired and tries[life] < 3:
                    again = raise_lives(unfired)[0]
                    tries[again] = tries[life]
                    pending.insert(self.rng.randrange(len(pending) + 1), again)
                elif unfired:
                    self.tally.problems += [f"{p} never raised" for p in unfired]
                continue
            if ending not in ("not fired", "done"):
                continue  # a random life that ended before its kill is tried again too
            tries[life] += 1
            if tries[life] < 3 * (1 + random_kills if life.kind == "random" else 1):
                pending.insert(self.rng.randrange(len(pending) + 1), life)
            elif life.kind == "failpoint":
                self.tally.problems.append(f"{life.point} never fired")
        for _ in range(3):
            if self.live(Life("clean"), add_input=False) == "done":
                return
        self.tally.problems.append("the final clean life did not consume the input")

    @property
    def source_arg(self) -> str:
        """Where the child driver reads its input (see :mod:`tests.crash_job`)."""
        return str(self.source)

    def add_input(self) -> None:
        """The next ``files_per_life`` numbered input files."""
        write_numbered_source(self.source, files=self.files_per_life,
                              rows_per_file=self.rows_per_file, start_file=self.files_written,
                              group_by_file=self.group_by_file, tagged=self.schema_change,
                              null_names=self.null_names)

    def _commit_a_batch_of_the_first_schema(self) -> None:
        """The life killed where a schema change commits needs a schema to change: a clean
        life first when no batch is committed yet."""
        from commit_protocol.log import open_committed

        if not self.evolved and open_committed(self.storage()) is None:
            self.live(Life("clean"))

    def _stage_rows_in_task_partition_1(self) -> None:
        """A life that kills the driver while it encodes needs staged rows of task partition 1
        (which that life runs no task for): earlier lives may all have been killed before a
        2-task batch committed, so a clean 2-task life stages some first when none are."""
        from commit_protocol.log import open_committed

        committed = open_committed(self.storage())
        if committed and any(f.partition == 1 and f.size for f in committed[2].in_progress):
            return
        self.live(Life("clean"))

    def live(self, life: Life, *, add_input: bool = True) -> str:
        """One life of the driver; returns how it ended."""
        index = self.tally.lives
        self.tally.lives += 1
        if add_input:
            self.add_input()
            self.files_written += self.files_per_life
        armed = self.logs / f"life-{index:04d}.failpoints"
        armed.write_text(life.spec)
        if self.rewrites:
            from tests.support.tables import rewrite_as_another_writer

            self.tally.rewritten += rewrite_as_another_writer(self.out_url, self.options)
        if self.schema_change and not self.evolved and (
                life.reaches(SCHEMA_POINTS)
                or (not set(SCHEMA_POINTS) & set(self.points) and index >= self.switch_at)):
            self.evolved = True  # this life and the later ones write the added column
            self.switch_at_life = index
        started = time.monotonic()
        self.reader.start(self.rows_in, self.input_counts)
        if self.follower is not None:
            self.follower.start(index)
        try:
            ending = self._run_child(life, armed, self.logs / f"life-{index:04d}.log")
            if life.kind == "failpoint":
                ending = self._count_failpoint(life, armed, ending)
            elif life.kind == "raise":
                self._count_raises(index, life, armed, ending)
            if self.spark_table_reads:
                self._check_spark_reads(index, life, self._spark_reads_file(armed))
            if ending == "done" and self.options.get("table.format"):
                # a driver that ran to its end brought the table up to date itself, from
                # whatever a killed one before it left: checked before any repair
                self._check_table(index, life, when="after the driver's own run")
            self._verify(index, life, ending)
        finally:
            self.reader.stop()
            if self.follower is not None:
                self.follower.kill()
        self.tally.problems += [f"life {index} ({life.label}): reader: {w}"
                                for w in self.reads.wrong]
        self.reads.wrong.clear()
        print(f"life {index:4d} {life.label:<60} {ending:<10} {time.monotonic() - started:5.1f}s",
              flush=True)
        return ending

    def _run_child(self, life: Life, armed: Path, log: Path) -> str:
        env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
        env[FILE_ENV_VAR] = str(armed)
        tasks = 0
        if self.lone_task_for_driver_rolls:
            tasks = 1 if life.reaches(DRIVER_CONVERT_POINTS) else 2
        options = {**self.options, INPUT_SCHEMA: "v2"} if self.evolved else self.options
        if self.spark_table_reads:
            options = {**options, SPARK_TABLE_READS: str(self._spark_reads_file(armed))}
        if life.kind == "raise":  # its query started again after each error
            options = {**options, RESTARTS: str(len(parse(life.spec)) + 2)}
        if not self.class_archives:
            options = {**options, CLASS_ARCHIVE: "off"}
        command = [sys.executable, "-m", "tests.crash_job", self.source_arg, self.out_url,
                   str(self.checkpoint), json.dumps(options), str(tasks)]
        with open(log, "w") as stderr:
            child = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=stderr, text=True,
                                     start_new_session=True)
            lines = _line_queue(child)
            try:
                return self._await(child, lines, life)
            finally:
                _kill_group(child.pid)
                child.wait()

    def _await(self, child: subprocess.Popen, lines: queue.Queue, life: Life) -> str:
        # A clean life consumes the backlog that killed lives left (hundreds of batches
        # after a long run): its time limit grows with it, so only a stuck query is "hung".
        timeout = self.life_timeout_s + self.catch_up_s * self._backlog()
        deadline = time.monotonic() + timeout
        ready_at = None
        kill_at = None
        while True:
            try:
                line = lines.get(timeout=0.05)
            except queue.Empty:
                line = ""
            if line == "READY":
                ready_at = time.monotonic()
                if life.kind == "random":
                    kill_at = ready_at + self.rng.uniform(0, self.window_s)
            elif line == "DONE":
                if ready_at is not None:  # random kills land anywhere in a life's run
                    self.window_s = max(1.0, 0.9 * (time.monotonic() - ready_at))
                if life.kind == "random":
                    self.tally.finished_early += 1
                child.wait()
                return "done"
            elif line and line.startswith("RESTART"):  # a raise life's query failed
                self.tally.restarts += 1
            elif line is None:  # stdout closed: the child died or failed
                code = child.wait()
                return "killed" if code == -signal.SIGKILL else f"exit {code}"
            if kill_at is not None and time.monotonic() >= kill_at:
                _kill_group(child.pid)
                self.tally.random_kills += 1
                child.wait()
                return "killed"
            if time.monotonic() > deadline:
                self.tally.problems.append(f"{life.label}: no end after {timeout:.0f}s")
                return "hung"

    def _backlog(self) -> int:
        """Input files the query has not consumed yet (one per batch: maxFilesPerTrigger 1)."""
        commits = self.checkpoint / "commits"
        done = sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0
        return max(0, self.files_written - done)

    def _count_failpoint(self, life: Life, armed: Path, ending: str) -> str:
        """Tally what fired (marker files of ``once``/``xN`` counts)."""
        for name, (action, _) in parse(life.spec).items():
            times = len(list(armed.parent.glob(f"{armed.name}.{name}.fired*")))
            if not times:
                continue
            self.tally.fired[name] += 1
            if action == "killall":
                self.tally.driver_kills += 1
                self.tally.killed_at[name] += 1
            elif action == "kill":
                self.tally.worker_kills += 1
            else:
                self.tally.task_failures += times
        fired = any(armed.parent.glob(f"{armed.name}.{life.point}.fired*"))
        return ending if fired else "not fired"

    def _count_raises(self, index: int, life: Life, armed: Path, ending: str) -> None:
        """Tally the points of a raise life that fired; its query must have gone on to the
        end after them (started again by its application after each error)."""
        for name in parse(life.spec):
            times = len(list(armed.parent.glob(f"{armed.name}.{name}.fired*")))
            if times:
                self.tally.fired[name] += 1
                if name in life.points:
                    self.tally.raised_at[name] += 1
        if ending != "done":
            self.tally.problems.append(f"life {index} ({life.label}): the query did not go on "
                                       f"after its errors: {ending}")

    @staticmethod
    def _spark_reads_file(armed: Path) -> Path:
        return armed.with_suffix(".spark-reads.jsonl")

    def _check_spark_reads(self, index: int, life: Life, reads_file: Path) -> None:
        """Before any repair: every read Spark's table reader made in this life's application
        is one version holding input rows once each and every row an earlier read held (the
        table is only appended to); after a run to its end, the table's rows equal
        ``spark.read.parquet(out)``'s in the same application."""
        lines = reads_file.read_text().splitlines() if reads_file.exists() else []
        where = f"life {index} ({life.label}): Spark's {self.options['table.format']} reader"
        for line in map(json.loads, lines):
            if "error" in line:
                self.tally.problems.append(f"{where} failed: {line['error']}")
                continue
            ids = Counter(line["ids"])
            if line.get("final"):
                self.tally.spark_final_checks += 1
                if ids != Counter(line["parquet"]):
                    self.tally.problems.append(
                        f"{where}: {sum(ids.values())} rows in the table, "
                        f"{len(line['parquet'])} by spark.read.parquet")
            else:
                self.tally.spark_table_reads += 1
            twice = sum(n - 1 for n in ids.values() if n > 1)
            unknown = sum(1 for i in ids if not 0 <= i < self.rows_in)
            vanished = sum((self._spark_table_ids - ids).values())
            if twice or unknown or vanished:
                self.tally.problems.append(f"{where}: {twice} rows twice, {unknown} not in the "
                                           f"input, {vanished} of an earlier read gone")
            self._spark_table_ids = ids

    def _verify(self, index: int, life: Life, ending: str) -> None:
        """What ``rotsink verify --repair`` does after every run (authenticating, when the
        output is encrypted); after a run to its end, first without repair: its driver (and
        a raise life's restarts) must have repaired everything itself."""
        from commit_protocol.checks.verification import verify_output
        from commit_protocol.crypto.keys import KeyRefs
        from commit_protocol.storage import open_storage
        from datasource.options.sink import fs_options

        keys = KeyRefs.from_options(self.options)
        if ending == "done":
            found = verify_output(self.storage(), ring=keys.ring() if keys else None,
                                  commit_timeout_s=0, fs_options=fs_options(self.options))
            self.tally.problems += [f"life {index} ({life.label}), before any repair: {p}"
                                    for p in found.problems]
            if found.pending:
                self.tally.problems.append(f"life {index} ({life.label}): a commit left "
                                           f"pending by a driver that ran to its end")
        # the driver was killed: no commit is in flight (timeout 0), though its commit worker
        # may outlive it for a moment and race the repair, which both must survive
        result = verify_output(self.storage(), ring=keys.ring() if keys else None, repair=True,
                               commit_timeout_s=0, fs_options=fs_options(self.options))
        if self.quarantine_url:  # the quarantine is an output of its own: the same checks
            kept = verify_output(open_storage(self.quarantine_url), repair=True,
                                 commit_timeout_s=0)
            self.tally.problems += [f"life {index} ({life.label}), the quarantine: {p}"
                                    for p in kept.problems]
        if self.options.get("table.format"):
            self._check_table(index, life, when="after verify --repair")
        if result.latest is None and not result.pending and not result.repaired:
            return  # killed before the first commit: nothing to verify yet
        self.tally.repaired += len(result.repaired)
        self.tally.problems += [f"life {index} ({life.label}): {p}" for p in result.problems]

    def _check_table(self, index: int, life: Life, *, when: str) -> None:
        """The table, read by its own reader as any reader would, holds exactly the rows of
        the finalized files (none lost, none twice): after a life that ran to its end, as its
        driver left it, and after every life's ``verify --repair``. A commit worker that
        outlived its driver may move the log meanwhile: looked at again, up to 3 times. The
        finalized files are those ``_spark_metadata`` lists, read by the tests' own code."""
        from tests.support.spark_log import finalized_ids, latest_batch
        from tests.support.tables import table_ids

        fs = {key.removeprefix("fs."): value for key, value in self.options.items()
              if key.startswith("fs.")}
        for _ in range(3):
            latest = latest_batch(self.out_url, fs)
            expected = Counter() if latest is None else finalized_ids(self.out_url, latest, fs)
            found = table_ids(self.out_url, self.options)
            if found == expected:
                break
            time.sleep(1)
        if when.startswith("after the driver"):
            self.tally.own_run_table_checks += 1
        else:
            self.tally.table_checks += 1
        self.tally.table_rows = sum(found.values())
        if found != expected:
            lost = sum((expected - found).values())
            twice = sum(n - 1 for n in found.values() if n > 1)
            extra = sum(n for i, n in found.items() if i not in expected)
            self.tally.problems.append(f"life {index} ({life.label}), {when}: the table holds "
                                       f"{sum(found.values())} rows, the finalized files "
                                       f"{sum(expected.values())}: {lost} lost, {twice} twice, "
                                       f"{extra} not finalized")


def _line_queue(child: subprocess.Popen) -> queue.Queue:
    """The child's stdout lines (``None`` at its end), read by a thread so waits can time out."""
    lines: queue.Queue = queue.Queue()
    stdout = child.stdout
    assert stdout is not None  # started with stdout=PIPE

    def pump() -> None:
        for line in stdout:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# Bulk formats (Parquet, ORC): rows staged across micro-batches and encoded at the roll, by
# tasks (record limits, and inactivity of their partition's directories that got no rows:
# each input file holds one group, so each batch touches one of the three directories) and
# by the driver (slots of a task partition that runs no task: see lone_task_for_driver_rolls).
BULK_OPTIONS = {**SINK_OPTIONS, "compression": "zstd",
                "rotation.maxRecords": "70",  # of a file's 100 rows, 30 stay staged
                "rotation.inactivity": "2s"}
CONVERT_POINTS = tuple(p for p in ALL_POINTS if p.endswith("_convert"))
SCHEMA_POINT = "driver.schema_change"
# the points a life can only reach by changing the schema: that life adds the column
SCHEMA_POINTS = (SCHEMA_POINT, "table.after_schema")
DRIVER_CONVERT_POINTS = tuple(p for p in CONVERT_POINTS if p.startswith("driver."))
SPARK_READERS = {"parquet": "parquet", "orc": "orc"}  # format -> spark.read.<method>; else json


def spark_reader(spark, fmt: str):
    """Spark's own reader of format ``fmt``: ``load(path)``-like (Avro through spark-avro)."""
    if fmt == "avro":
        return spark.read.format("avro").load
    return getattr(spark.read, SPARK_READERS.get(fmt, "json"))


def bulk_loop(workdir: Path, fmt: str, *, seed: int = 7, schema_change: bool = False
              ) -> CrashLoop:
    return CrashLoop(workdir, seed=seed, options={**BULK_OPTIONS, "format": fmt},
                     group_by_file=True, lone_task_for_driver_rolls=True,
                     schema_change=schema_change)


def table_loop(workdir: Path, table_format: str, *, seed: int = 7,
               schema_change: bool = False) -> CrashLoop:
    """Parquet whose table (``table.format``) follows the log; no partition markers, which a
    table refuses (its VACUUM would delete them)."""
    options = {k: v for k, v in BULK_OPTIONS.items() if k != "partition.commitDelay"}
    if table_format == "iceberg":  # snapshots expire while the lives run (and are killed)
        options["table.snapshotRetention"] = "1s"
    return CrashLoop(workdir, seed=seed, options={**options, "format": "parquet",
                                                  "table.format": table_format},
                     group_by_file=True, schema_change=schema_change)


def quarantine_loop(workdir: Path, *, seed: int = 7) -> CrashLoop:
    """Parquet into a Delta table another writer made with ``name`` NOT NULL, which the
    stream joins; every eleventh input row has a null name, and ``errors.mode=quarantine``
    keeps those rows aside: every input row must be in the table's output or in the
    quarantine, once (:func:`check_output`)."""
    from deltalake import DeltaTable, Field, Schema
    from deltalake.schema import PrimitiveType

    loop = table_loop(workdir, "delta", seed=seed)
    loop.options["errors.mode"] = "quarantine"
    loop.null_names = True
    DeltaTable.create(loop.out_url, Schema([
        Field("id", PrimitiveType("long")), Field("name", PrimitiveType("string"), nullable=False),
        Field("grp", PrimitiveType("string")), Field("score", PrimitiveType("double"))]),
        partition_by=["grp"])
    return loop


def table_points(table_format: str) -> tuple[str, ...]:
    """The table steps a loop of ``table_format`` passes: added columns take a commit of
    their own (Delta's in the batch's table commit, Iceberg's when the batch is planned,
    before its files get the table's field ids); Iceberg's snapshots expire after commits."""
    skipped = () if table_format == "iceberg" else ("table.before_expire", "table.after_expire")
    return tuple(p for p in TABLE_POINTS if p not in skipped)


def encrypted_s3_output(workdir: Path, endpoint: str) -> tuple[str, dict[str, str]]:
    """A fresh bucket on the local S3 server and options for zstd, encrypted output to it."""
    import uuid

    import s3fs

    bucket = f"rotsink-crash-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(endpoint_url=endpoint).mkdir(bucket)
    workdir.mkdir(parents=True, exist_ok=True)
    key = workdir / "key"
    key.write_text(os.urandom(32).hex())
    options = {**SINK_OPTIONS, "fs.endpoint_url": endpoint, "encryption.key": f"file:{key}"}
    return f"s3://{bucket}/out", options


def cloud_output(store: str, endpoint: str) -> tuple[str, dict[str, str]]:
    """A fresh bucket (``gcs``: fake-gcs-server) or container (``azure``: Azurite) on the
    emulator at ``endpoint``, and the sink's options for output to it."""
    import uuid

    name = f"rotsink-crash-{uuid.uuid4().hex[:8]}"
    if store == "gcs":
        from tests.support.gcsserver import OPTIONS, create_bucket

        fs = {"endpoint_url": endpoint, **OPTIONS}
        url = f"gs://{create_bucket(endpoint, name)}/out"
    else:
        from tests.support.azurite import ACCOUNT, create_container, options

        fs = options(endpoint)
        url = f"abfss://{create_container(endpoint, name)}@{ACCOUNT}.dfs.core.windows.net/out"
    return url, {**SINK_OPTIONS, **{f"fs.{key}": value for key, value in fs.items()}}


def cloud_table_loop(workdir: Path, store: str, endpoint: str, table_format: str, *,
                     seed: int = 7, schema_change: bool = False) -> CrashLoop:
    """A table loop (:func:`table_loop`) whose output and table are on an emulator
    (:func:`cloud_output`); an Iceberg table through a SQL catalog file in ``workdir`` (the
    embedded catalog is for local outputs only), its files beside the output."""
    url, options = cloud_output(store, endpoint)
    loop = table_loop(workdir, table_format, seed=seed, schema_change=schema_change)
    loop.out_url = url
    loop.options.update({k: v for k, v in options.items() if k.startswith("fs.")})
    if table_format == "iceberg":
        loop.options.update({"table.catalog.type": "sql",
                             "table.catalog.uri": f"sqlite:///{workdir}/catalog.db",
                             "table.catalog.warehouse": url.rsplit("/", 1)[0] + "/warehouse"})
    return loop


def catalog_table_loop(workdir: Path, catalog: str, server: str, *,
                       seed: int = 7) -> CrashLoop:
    """An Iceberg table loop (:func:`table_loop`) whose table is in a catalog server:
    ``glue`` (moto's at ``server``, the output in a bucket of its S3), ``iceberg-rest``
    (Apache Iceberg's REST catalog server at ``server``, the output local, partitioned by
    ``bucket(4, id), grp``), ``postgres`` (pyiceberg's SQL catalog, ``server`` its
    database's URI) or ``hive`` (Hive's metastore at ``server``, its Thrift URI). The table
    is created at the output (no warehouse), as ``table.location`` says by default."""
    import uuid

    loop = table_loop(workdir, "iceberg", seed=seed)
    loop.options["table.identifier"] = f"crash_{uuid.uuid4().hex[:8]}.events"
    if catalog in ("postgres", "hive"):  # a SQL catalog's database, a metastore's Thrift
        kind = {"postgres": "sql", "hive": "hive"}[catalog]
        loop.options.update({"table.catalog.type": kind, "table.catalog.uri": server})
        return loop
    if catalog == "iceberg-rest":  # and hidden partitioning: a bucket of the id above grp
        # A directory gets a quarter of a batch's ~100 rows (one grp a batch): at 70 rows a
        # file no file would roll in a short loop, and the table would hold no file at all.
        loop.options.update({"table.catalog.type": "rest", "table.catalog.uri": server,
                             "partitionBy": "bucket(4, id), grp",
                             "rotation.maxRecords": "20"})
        return loop
    from tests.support.s3server import create_bucket

    loop.out_url = f"s3://{create_bucket(server, f'crash-{uuid.uuid4().hex[:8]}')}/out"
    loop.options.update({"fs.endpoint_url": server, "table.catalog.type": "glue",
                         "table.catalog.glue.endpoint": server,
                         "table.catalog.glue.region": "us-east-1"})
    return loop


@dataclass(frozen=True)
class Outcome:
    """The row-by-row check of the output after the loop."""

    rows_in: int
    rotsink_rows: int
    lost: int
    duplicated: int
    finalized_rows: int
    spark_rows: int | None            # None: Spark's reader cannot read this output here
    spark_matches_finalized: bool | None
    batches: int
    # with a schema change: rows holding the added field, rows without it (written before
    # the change), rows holding a wrong value
    tags: tuple[int, int, int] | None = None
    # errors.mode=quarantine: the rows the quarantine holds (counted with the output's rows
    # above), and how many of them the input did not give a null name
    quarantined: int | None = None
    quarantined_wrongly: int = 0

    @property
    def exact(self) -> bool:
        return (self.lost == 0 and self.duplicated == 0 and self.rotsink_rows == self.rows_in
                and self.spark_matches_finalized is not False
                and self.quarantined_wrongly == 0)


def spark_ids(spark, loop: CrashLoop, finalized: Counter) -> Counter:
    """The ids Spark's own reader returns from the output. With no finalized file yet
    (every file still open), Spark has no file to infer a schema from and says so."""
    from pyspark.errors import AnalysisException

    read = spark_reader(spark, loop.options.get("format", ""))
    try:
        return Counter(r.id for r in read(loop.out_url).select("id").collect())
    except AnalysisException as e:
        if finalized or "UNABLE_TO_INFER_SCHEMA" not in str(e):
            raise
        return Counter()


def check_output(spark, loop: CrashLoop) -> Outcome:
    """Every input id exactly once through rotsink's reader; Spark's JSON reader (which
    honours ``_spark_metadata``) returns exactly the rows of the finalized files. Spark reads
    no ``.enc`` files (the S3 loop's are encrypted): then only rotsink's reader."""
    from commit_protocol.reading import open_committed

    def ids(**options: str) -> Counter:
        reader = spark.read.format("rotsink").options(**loop.read_options, **options)
        return Counter(r.id for r in reader.load(loop.out_url).select("id").collect())

    seen, finalized = ids(), ids(includeInProgress="false")
    kept = None
    if loop.quarantine_url:  # the rows the output refused: each input row in one of the two
        kept = Counter(json.loads(r.row)["id"] for r in spark.read.json(
            loop.quarantine_url).select("row").collect())
        seen = seen + kept
    spark_seen = None
    if "://" not in loop.out_url and "encryption.key" not in loop.options:
        spark_seen = spark_ids(spark, loop, finalized)
    expected = set(range(loop.rows_in))
    committed = open_committed(loop.storage())
    assert committed is not None  # the loop committed at least one batch
    _, latest, _ = committed
    tags = None
    if loop.evolved:
        rows = (spark.read.format("rotsink").options(**loop.read_options).load(loop.out_url)
                .select("id", "tag").collect())
        tags = (sum(r.tag is not None for r in rows), sum(r.tag is None for r in rows),
                sum(r.tag not in (None, tag_of(r.id)) for r in rows))
    written = loop.rows_in + sum(n - 1 for n in loop.input_counts.values())
    return Outcome(tags=tags, rows_in=written, rotsink_rows=sum(seen.values()),
                   lost=len(expected - set(seen)),
                   duplicated=(sum(n - loop.input_counts.get(i, 1) for i, n in seen.items()
                                   if n > loop.input_counts.get(i, 1))
                               + len(set(seen) - expected)),
                   finalized_rows=sum(finalized.values()),
                   spark_rows=None if spark_seen is None else sum(spark_seen.values()),
                   spark_matches_finalized=None if spark_seen is None else spark_seen == finalized,
                   batches=latest + 1,
                   quarantined=None if kept is None else sum(kept.values()),
                   quarantined_wrongly=0 if kept is None else sum(
                       1 for i in kept if not has_null_name(i)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crashloop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--random-kills", type=int, default=200)
    parser.add_argument("--workdir", help="default: a new temp directory")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--s3", nargs="?", const="seaweedfs", choices=("seaweedfs", "moto"),
                        help="write zstd, encrypted output to a local S3 server on 127.0.0.1: "
                             "SeaweedFS (the default), or moto")
    parser.add_argument("--store", choices=("gcs", "azure"),
                        help="write to Cloud Storage's or Azure's emulator on 127.0.0.1 "
                             "(fake-gcs-server, Azurite)")
    parser.add_argument("--bulk", choices=sorted(SPARK_READERS),
                        help="write staged Parquet or ORC (encoded at every roll) instead of "
                             "JSON lines")
    parser.add_argument("--table", choices=("delta", "iceberg"),
                        help="write Parquet into a table that follows the log, read by the "
                             "table's own reader after every life")
    args = parser.parse_args(argv)
    import tempfile

    from datasource.commands.session import local_session

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rotsink-crashloop-"))
    started = time.monotonic()
    stop_server = None
    loop = CrashLoop(workdir, seed=args.seed, schema_change=True)
    if args.s3:
        from tests.support.s3server import (
            DUMMY_CREDENTIALS,
            start_moto_server,
            start_seaweedfs_server,
        )

        # Dummy credentials for the loopback server only; inherited by every child driver.
        os.environ.update(DUMMY_CREDENTIALS)
        start = start_moto_server if args.s3 == "moto" else start_seaweedfs_server
        endpoint, stop_server = start()
        url, options = encrypted_s3_output(workdir, endpoint)
        loop = CrashLoop(workdir, seed=args.seed, out_url=url, options=options,
                         schema_change=True)
    if args.store:
        from tests.support.azurite import start_azurite
        from tests.support.gcsserver import start_fake_gcs

        endpoint, stop_server = (start_fake_gcs if args.store == "gcs" else start_azurite)()
        url, options = cloud_output(args.store, endpoint)
        loop = CrashLoop(workdir, seed=args.seed, out_url=url, options=options,
                         schema_change=True)
    if args.bulk:
        loop = bulk_loop(workdir, args.bulk, seed=args.seed, schema_change=True)
    if args.table:
        loop = table_loop(workdir, args.table, seed=args.seed, schema_change=True)
        loop.rewrites = True
    if args.table and args.store:  # the table on the emulator too (not Delta on gs://)
        loop = cloud_table_loop(workdir, args.store, endpoint, args.table, seed=args.seed,
                                schema_change=True)
    points = tuple(p for p in ALL_POINTS if (args.bulk or args.table or p not in CONVERT_POINTS)
                   and (p in table_points(args.table) if args.table else p not in TABLE_POINTS)
                   and p not in QUARANTINE_POINTS)
    loop.run(random_kills=args.random_kills, points=points)
    spark = local_session(app_name="rotsink-crash-loop-check")
    spark.sparkContext.setLogLevel("ERROR")
    outcome = check_output(spark, loop)
    spark.stop()
    if stop_server is not None:
        stop_server()
    report = summary(loop, outcome, time.monotonic() - started)
    print(report)
    return 0 if outcome.exact and not loop.tally.problems else 1


def summary(loop: CrashLoop, outcome: Outcome, wall_s: float) -> str:
    t = loop.tally
    points = loop.points
    unfired = sorted(set(points) - set(t.killed_at))
    lines = [
        f"lives {t.lives}: {t.random_kills} random SIGKILLs of the driver, {t.driver_kills} "
        f"driver kills at failpoints, {t.worker_kills} Python worker kills, {t.task_failures} "
        f"failed task attempts; {t.finished_early} random lives ended before their kill",
        f"driver killed at {len(points) - len(unfired)}/{len(points)} failpoints"
        + (f" (never at: {', '.join(unfired)})" if unfired else ""),
        *([f"errors raised at {len(set(points) & set(t.raised_at))}/"
           f"{len(set(points) - set(SCHEMA_POINTS))} failpoints; "
           f"the failed query started again {t.restarts} times and went on"]
          if loop.raises else []),
        f"commits rolled forward by verify --repair: {t.repaired}",
        *([f"another writer rewrote the table before each life: {t.rewritten} files "
           "replaced, rows kept"] if loop.rewrites else []),
        *([f"table ({loop.options['table.format']}) read after each of {t.table_checks} lives "
           f"(and before the repair of the {t.own_run_table_checks} whose driver ran to its "
           "end) "
           f"by its own reader: {t.table_rows} rows at the end, as the finalized files"]
          if loop.options.get("table.format") else []),
        *([f"Spark's {loop.options['table.format']} reader in each life's application: "
           f"{t.spark_table_reads} reads while the query committed, {t.spark_final_checks} "
           "after a run's end beside spark.read.parquet"] if loop.spark_table_reads else []),
        f"batches {outcome.batches}, rows in {outcome.rows_in}, rotsink reader "
        f"{outcome.rotsink_rows}, lost {outcome.lost}, duplicated {outcome.duplicated}",
        *([f"of those, in the quarantine: {outcome.quarantined} (rows without a null name "
           f"among them: {outcome.quarantined_wrongly})"] if outcome.quarantined is not None
          else []),
        f"finalized rows {outcome.finalized_rows}, Spark's reader "
        + ("not run (encrypted or object-store output)" if outcome.spark_rows is None else
           f"{outcome.spark_rows} "
           f"({'same rows' if outcome.spark_matches_finalized else 'MISMATCH'})"),
        loop.reads.line(),
        *([] if outcome.tags is None else [
            f"schema change (a column added at life {loop.switch_at_life}): "
            f"{outcome.tags[0]} rows with the column, {outcome.tags[1]} written before the "
            f"change without it, {outcome.tags[2]} wrong"]),
        f"problems {len(t.problems)}" + "".join(f"\n  {p}" for p in t.problems[:20]),
        f"wall time {wall_s:.0f}s",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CONVERT_POINTS", "SCHEMA_POINTS", "CrashLoop", "Outcome", "TABLE_POINTS",
           "TASK_POINTS", "bulk_loop", "table_points", "quarantine_loop",
           "check_output", "failpoint_lives", "summary", "table_loop"]
