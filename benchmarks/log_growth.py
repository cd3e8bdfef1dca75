"""Metadata log growth: driver time per batch, compaction time and memory up to 1M entries.

    python benchmarks/log_growth.py                      # 300 x 100, about a minute
    python benchmarks/log_growth.py --batches 10000 --files-per-batch 100   # 1,000,000 entries

Drives rotsink's real driver path without Spark, on a local directory with the sink's default
options (compaction every 10 batches, log clean-up after 10 minutes): per micro-batch, what
``datasource/writing/writer.py`` runs on the driver -- a ``Committer`` reads the latest state for
planning, another reads it again and commits, with one task report per finalized file
(``--files-per-batch`` tasks each rolling one small part file). The clock advances
``--trigger-ms`` per batch (default 1 s: a stream with a 1 s trigger, whose clean-up keeps
about 600 log files); ``--trigger-ms 0`` uses the wall clock, so nothing is older than 10
minutes and the log directory keeps every file of the run (the worst case for its listing,
and every ``.compact`` file: about 95 GB at 10,000 x 100, against about 11 GB with 1 s).

Prints, at batches 100, 1,000, 5,000 and 10,000 (those within ``--batches``):

- the files in ``_spark_metadata`` (each batch lists them three times: planning, the commit's
  writer, the commit), the median planning and commit ms of the last 50 non-compaction
  batches, and the commit time's ratio to batch 100 (target: within 2x up to batch 10,000);
- the last compaction batch before it (its whole commit): ms, entries written, entries/s and
  MB/s of log bytes written.

Then the largest compaction, run under ``tracemalloc``: its Python peak and the growth of
``ru_maxrss`` (target: under 200 MB at 1,000,000 entries); and the anchor, listing the finished
log: Spark's own ``FileStreamSinkLog.allFiles()`` (the JVM class, through py4j, in a local
session) and ``spark.read.json``'s listing against rotsink's (``MetadataLog.finalized_entries``
and the reader's ``committed_files``), with rotsink's time as a ratio of Spark's. ``--no-spark``
skips the anchor. Rows/s are meaningless for a log; entries/s and MB/s of log bytes are printed.

``--profile N`` profiles (``cProfile``) the driver path of the last N batches and prints the
functions with the most cumulative and own time: where a micro-batch's plan and commit go.
``python benchmarks/log_growth.py --batches 300 --files-per-batch 2 --profile 100 --no-spark``
is the per-batch path of a two-task query.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import TypeVar

from commit_protocol.commit import committer as committer_module
from commit_protocol.commit.committer import Committer
from commit_protocol.log import MetadataLog
from commit_protocol.log.feed_states import FEED_DIR
from commit_protocol.log.files import is_compaction_batch, log_file_name
from commit_protocol.reading import CommittedFile, committed_files, open_committed
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import FileReport, TaskReport
from commit_protocol.storage import LocalStorage
from commit_protocol.vocabulary.naming import INPROGRESS_DIR, LOG_DIR, final_name, temp_name

SCHEMA_JSON = ('{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,'
               '"metadata":{}}]}')
CHECKPOINTS = (100, 1_000, 5_000, 10_000)
WINDOW = 50  # batches per median
QUERY_ID = "log-growth-bench"
SPARK_LOG = "org.apache.spark.sql.execution.streaming.sinks.FileStreamSinkLog"  # Spark 4
T = TypeVar("T")


@dataclass
class Compaction:
    batch_id: int
    ms: float
    entries: int
    log_bytes: int
    traced: bool


@dataclass
class Run:
    plan_ms: list[float] = field(default_factory=list)
    commit_ms: list[float] = field(default_factory=list)
    compactions: list[Compaction] = field(default_factory=list)
    log_bytes: int = 0
    log_files: dict[int, int] = field(default_factory=dict)  # in the log directory, by batch
    feed_segments: dict[int, int] = field(default_factory=dict)  # in _rotsink/feed/, by batch
    feed_bytes: int = 0  # in _rotsink/feed/ at the end
    cleanup_ms: list[float] = field(default_factory=list)  # each clean-up (compaction batches)
    traced_peak: int = 0
    rss_growth_kb: int = 0


def task_reports(root: Path, batch_id: int, files: int) -> list[TaskReport | None]:
    """One task per file, each rolling (closing) one part file it wrote."""
    reports: list[TaskReport | None] = []
    for partition in range(files):
        data = b'{"id":%d}\n' % (batch_id * files + partition)
        name = final_name(directory="", prefix="part", partition=partition, batch=batch_id,
                          roll=0, suffix=".jsonl")
        temp = temp_name(name)
        (root / temp).write_bytes(data)
        report = FileReport(partition=partition, directory="", name=name, temp=temp, start=0,
                            end=len(data), records=1, new_records=1, closed=True)
        reports.append(TaskReport(batch_id=batch_id, partition=partition, attempt=0,
                                  query_id=QUERY_ID, files=(report,), claimed=True))
    return reports


def drive(root: Path, batches: int, files: int, trigger_ms: int,
          profiler: cProfile.Profile | None = None, profiled: int = 0,
          feed_retention_ms: int = 0) -> Run:
    """Commit ``batches`` micro-batches as ``RotSinkStreamWriter`` does on the driver (minus
    its schema check): a committer reads the state for planning, another reads it again and
    commits. ``trigger_ms`` > 0 runs a clock that advances that much per batch (each log file
    is stamped with it, as a stream with that trigger would find it); 0 uses the wall clock."""
    config = SinkConfig(path=str(root), feed_retention_ms=feed_retention_ms or None)
    interval = config.compact_interval
    run = Run()
    clean_up = committer_module.clean_up

    def timed_clean_up(*args, **kwargs):  # the clean-up's own time, apart from compaction's
        started = time.perf_counter()
        try:
            return clean_up(*args, **kwargs)
        finally:
            if is_compaction_batch(args[2].batch_id, interval):
                run.cleanup_ms.append((time.perf_counter() - started) * 1000)

    committer_module.clean_up = timed_clean_up
    storage = LocalStorage(str(root))
    last_compaction = max((b for b in range(batches) if is_compaction_batch(b, interval)),
                          default=-1)
    (root / INPROGRESS_DIR).mkdir(parents=True)
    started_ms = int(time.time() * 1000) - batches * trigger_ms
    for batch_id in range(batches):
        reports = task_reports(root, batch_id, files)
        now_ms = started_ms + batch_id * trigger_ms if trigger_ms else None
        traced = batch_id == last_compaction
        if traced:
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            tracemalloc.start()
        active = profiler if batch_id >= batches - profiled else None
        if active is not None:
            active.enable()
        started = time.perf_counter()
        Committer(storage, config, SCHEMA_JSON).latest_state()  # planning
        planned = time.perf_counter()
        committer = Committer(storage, config, SCHEMA_JSON)
        committer.latest_state()  # the writer created again for the commit
        committer.commit(batch_id, reports, now_ms=now_ms)
        ended = time.perf_counter()
        if active is not None:
            active.disable()
        if traced:
            run.traced_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            run.rss_growth_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
        log_file = root / LOG_DIR / log_file_name(batch_id, interval)
        if now_ms is not None:
            os.utime(log_file, ns=(now_ms * 1_000_000, now_ms * 1_000_000))
        size = log_file.stat().st_size
        run.log_bytes += size
        plan_ms, commit_ms = (planned - started) * 1000, (ended - planned) * 1000
        if is_compaction_batch(batch_id, interval):  # reported apart, left out of the medians
            run.compactions.append(Compaction(batch_id, commit_ms, (batch_id + 1) * files,
                                              size, traced))
            plan_ms = commit_ms = float("nan")
        run.plan_ms.append(plan_ms)
        run.commit_ms.append(commit_ms)
        run.log_files[batch_id + 1] = len(os.listdir(root / LOG_DIR))
        feed = root / FEED_DIR
        run.feed_segments[batch_id + 1] = len(os.listdir(feed)) if feed.exists() else 0
    if (root / FEED_DIR).exists():
        run.feed_bytes = sum(f.stat().st_size for f in (root / FEED_DIR).iterdir())
        if batch_id + 1 in CHECKPOINTS or (batch_id + 1) % 1000 == 0:
            print(f"  ... batch {batch_id + 1:,} committed", file=sys.stderr, flush=True)
    return run


def median_before(values: list[float], end: int) -> float:
    return statistics.median(v for v in values[max(0, end - WINDOW):end] if v == v)


def report_growth(run: Run, batches: int) -> None:
    print(f"\n{'batch':>7} {'log files':>9} {'segments':>8} {'plan ms':>8} {'commit ms':>10} "
          f"{'ratio':>6}   {'compaction':>10} {'ms':>8} {'entries':>10} {'entries/s':>11} "
          f"{'MB/s':>6}")
    base = None
    for end in sorted({c for c in CHECKPOINTS if c <= batches} | {batches}):
        commit = median_before(run.commit_ms, end)
        base = commit if base is None else base
        line = (f"{end:>7,} {run.log_files[end]:>9,} {run.feed_segments[end]:>8,} "
                f"{median_before(run.plan_ms, end):8.2f} "
                f"{commit:10.2f} {commit / base:5.2f}x")
        untraced = [c for c in run.compactions if c.batch_id < end and not c.traced]
        if untraced:
            c = untraced[-1]
            line += (f"   {c.batch_id:>10,} {c.ms:8.1f} {c.entries:>10,} "
                     f"{c.entries / c.ms * 1000:>11,.0f} {c.log_bytes / 1e3 / c.ms:6.1f}")
        print(line)
    late = [c.ms for c in run.compactions[len(run.compactions) // 2:] if not c.traced]
    if late:  # the clean-up runs in these batches: with feed.retention, it keeps states too
        cleanups = run.cleanup_ms[len(run.cleanup_ms) // 2:]
        print(f"\ncompaction batches, last half of the run: median {statistics.median(late):.1f}"
              f" ms over {len(late)}, of which the clean-up {statistics.median(cleanups):.2f} "
              f"ms; change-feed segments {run.feed_segments[batches]:,}, "
              f"{run.feed_bytes / 1e6:,.2f} MB")
    total_ms = sum(v for v in run.commit_ms if v == v) + sum(c.ms for c in run.compactions)
    print(f"\nlog written: {run.log_bytes / 1e6:,.1f} MB in {total_ms / 1000:,.1f} s of commits "
          f"({run.log_bytes / 1e3 / total_ms:,.1f} MB/s); commit ms leave out compaction batches")
    if run.compactions:
        last = run.compactions[-1]
        print(f"largest compaction, under tracemalloc: batch {last.batch_id:,}, "
              f"{last.entries:,} entries, {last.log_bytes / 1e6:,.1f} MB, {last.ms / 1000:,.2f} s;"
              f" peak {run.traced_peak / 1e6:,.1f} MB (Python heap), ru_maxrss growth "
              f"{run.rss_growth_kb / 1e3:,.1f} MB (target < 200 MB)")


def timed(action: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def report_anchor(root: Path, spark_anchor: bool) -> None:
    storage = LocalStorage(str(root))
    log = MetadataLog(storage, compact_interval=SinkConfig(path=str(root)).compact_interval)
    latest = log.latest_batch_id()
    assert latest is not None, f"{root}: no batch committed"

    def plan() -> list[CommittedFile]:
        committed = open_committed(storage)
        assert committed is not None
        return committed_files(*committed, include_in_progress=False)

    raw, raw_s = timed(lambda: sum(1 for _ in log.finalized_entries(latest)))
    planned, planned_s = timed(plan)
    print(f"\nlisting the finished log (batch {latest:,}):")
    print(f"  rotsink MetadataLog.finalized_entries: {raw:>10,} files {raw_s:7.2f} s")
    print(f"  rotsink reader committed_files:        {len(planned):>10,} files {planned_s:7.2f} s")
    if not spark_anchor:
        return
    from datasource.commands.session import local_session

    spark = local_session(app_name="rotsink-log-growth")
    spark.sparkContext.setLogLevel("ERROR")
    cls = reduce(getattr, SPARK_LOG.split("."), spark._jvm)
    no_retention = getattr(cls, "$lessinit$greater$default$4")()  # scala.None
    spark_log = cls(cls.VERSION(), spark._jsparkSession, str(root / LOG_DIR), no_retention)
    for attempt in ("cold", "warm"):
        listed, spark_s = timed(lambda: len(spark_log.allFiles()))
        df, read_s = timed(lambda: spark.read.schema("id long").json(str(root)))
        print(f"  Spark FileStreamSinkLog.allFiles ({attempt}): {listed:>8,} entries "
              f"{spark_s:7.2f} s  (with one rotsink state entry per log file read)")
        print(f"  Spark spark.read.json listing ({attempt}):    {len(df._jdf.inputFiles()):>8,} "
              f"files   {read_s:7.2f} s")
    print(f"ratio rotsink/Spark listing time (warm): finalized_entries/allFiles "
          f"{raw_s / spark_s:.3f}x, committed_files/spark.read.json {planned_s / read_s:.3f}x")
    spark.stop()


def report_profile(profiler: cProfile.Profile, batches: int) -> None:
    """The driver path's heaviest functions, per batch (plan and commit together)."""
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]  # set by Stats, not in its stub
    print(f"\nprofile of the last {batches} batches: {total / batches * 1000:.2f} ms of CPU "
          "per batch (profiled, so slower than above)")
    for key in ("cumulative", "tottime"):
        print(f"heaviest by {key} time:")
        stats.sort_stats(key).print_stats(18)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--files-per-batch", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="100 batches")
    parser.add_argument("--trigger-ms", type=int, default=1000,
                        help="clock advance per batch (0: the wall clock)")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark anchor")
    parser.add_argument("--keep", action="store_true", help="keep the output directory")
    parser.add_argument("--feed-retention-ms", type=int, default=0,
                        help="the sink's feed.retention (0: off): segments kept for change feeds")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile the driver path of the last N batches")
    args = parser.parse_args()
    batches = 100 if args.quick else args.batches
    root = Path(tempfile.mkdtemp(prefix="rotsink-log-growth-"))
    print(f"$ python {' '.join(sys.argv)}\n{batches:,} batches x {args.files_per_batch} "
          f"finalized files = {batches * args.files_per_batch:,} log entries in {root}")
    try:
        profiler = cProfile.Profile() if args.profile else None
        run = drive(root, batches, args.files_per_batch, args.trigger_ms, profiler,
                    args.profile, args.feed_retention_ms)
        report_growth(run, batches)
        if profiler is not None:
            report_profile(profiler, args.profile)
        report_anchor(root, not args.no_spark)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
