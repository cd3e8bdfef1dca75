"""A table's long run: tens of thousands of commits through rotsink's real driver-side commit,
the table step included, and what every kind of metadata does meanwhile (issue 45).

    python benchmarks/long_run.py                                  # 20,000 commits, local disk
    python benchmarks/long_run.py --commits 100000                 # on demand
    python benchmarks/long_run.py --storage s3 --commits 5000      # SeaweedFS (Iceberg: REST)
    python benchmarks/long_run.py --png benchmarks/long_run.png    # and the picture (.[bench])
    python benchmarks/long_run.py --table none,delta,iceberg --plain-commits 0   # memory (55)

Each commit is one micro-batch as rotsink's driver and one task run it, without Spark: the
planning reads the log (``Committer.latest_state``), a task (``TaskWriter``) writes 10 rows
that finish their file in the batch (``rotation.maxBatches=1``: every commit is a table
commit, as a query rolling once a minute makes one a minute), and ``Committer.commit`` runs
the whole commit: the log file, the publish, the table commit, the follow step, the
table's clean-up (Iceberg's snapshot expiry), the log's compaction and clean-up. What this
skips of a Spark query: the scheduling of a micro-batch and its tasks (seconds, the same for
every batch), and Spark's checkpoint, which Spark writes and bounds itself
(``spark.sql.streaming.minBatchesToRetain``, 100 batches): it is not printed.

Time is the machine's: to show that what a commit reads and writes is bounded by the
retentions and not by the number of commits, within one run of minutes, the retentions are
compressed to ``--retention`` (60 s by default): Iceberg's snapshot age
(``table.snapshotRetention``), Delta's ``delta.logRetentionDuration`` and rotsink's
``log.cleanupDelay``. The plateau a real table reaches after its retention (Iceberg's 5 days,
Delta's 30 days of log) is the one this run reaches after ``--retention``, at the commit
rate of the run (printed), which is far higher than a query's: keep that in mind reading the
picture.

The table keeps its last days, as a stream's table does: each commit's rows are of the day
``commit // --day-commits`` (500 commits a day by default), and at the start of each day the
user's retention job, another writer beside the stream, deletes the days older than
``--days-kept`` (4) through the table's own library (a DELETE of whole partitions, which
rotsink follows at its next commit) and deletes from storage the files its previous run
removed (the table's clean-up: VACUUM, ``remove_orphan_files``, after their retention). Its
time is not a commit's. So the table's live files stay about ``--days-kept`` days of commits,
and what grows, if anything, grows with the commits. ``--days-kept 0`` keeps every file: then
every commit's reading of the live files (the table's snapshot, Spark's log compaction, whose
compact file lists every live file) grows with them, as for any table that never drops data.

``--table none`` runs rotsink's commit with no table (plain output, the log alone). Its
retention is the log's: ``log.retention`` drops the entries older than ``--retention`` at each
compaction (files nothing deletes stay listed otherwise, and each compaction copies them all).

Beside rotsink, the formats' plain writers, as a Python pipeline without rotsink writes: a
pyiceberg fast append of the same 10 rows per commit, a delta-rs ``write_deltalake`` append,
neither with any maintenance (``--plain-commits``, 3,000 by default: they slow down).

Printed every ``--every`` commits, per writer: the commit's median and p99 (and the table
step's, inside rotsink's commit), the bytes and files of every kind of metadata on storage
(the table's: ``_delta_log/``, Iceberg's ``metadata/`` and its catalog, or on S3 the REST
catalog's ``metadata/`` in its warehouse bucket; ``_spark_metadata/``;
``_rotsink/``), the time to open the table and plan a full scan with its own library, the
committing process's memory (its resident set after a full collection, and where it is:
Python's blocks, or with ``--tracemalloc`` its heap and the calls whose blocks grew most
since the last report, traced from ``--trace-from``, told apart by ``--trace-frames``;
pyarrow's pool; what glibc's ``malloc`` holds in use and free:
:mod:`benchmarks.process_memory`), and on S3 rotsink's own requests
a commit by operation and part of the output with their median time (:class:`S3Calls`:
whether a commit that slows down asks more of the store, or the store answers more slowly).
``--png`` draws them against the commit number.

The committing process takes Arrow's pool as a query's committing process does
(:mod:`datasource.spark.memory_pool`: jemalloc unless ``ARROW_DEFAULT_MEMORY_POOL`` names one):
``ARROW_DEFAULT_MEMORY_POOL=mimalloc`` measures pyarrow's own default beside it, and
``--free-every N`` hands the allocators' free memory back every N commits.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers

from benchmarks.common import TENTH  # noqa: E402

SCHEMA_JSON = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "day", "type": "string", "nullable": True, "metadata": {}}]})
ROWS = 10
KINDS = ("table", "_spark_metadata", "_rotsink")
NO_TABLE = "none"  # --table none: plain output, rotsink's log alone


def day_of(commit: int, day_commits: int) -> str:
    return f"d{commit // day_commits:05d}"


def rows_of(commit: int, day_commits: int):
    import pyarrow as pa

    ids = list(range(commit * ROWS, (commit + 1) * ROWS))
    return pa.record_batch({"id": pa.array(ids, pa.int64()),
                            "day": pa.array([day_of(commit, day_commits)] * ROWS)})


# -- one writer, in a process of its own -----------------------------------------------------
class RotsinkWriter:
    """rotsink's planning, one task and the commit of every micro-batch."""

    def __init__(self, url: str, table: str, options: dict[str, str], retention_s: int,
                 fs: dict[str, str], day_commits: int) -> None:
        from commit_protocol.records.config import RotationPolicy, SinkConfig
        from commit_protocol.storage import open_storage
        from commit_protocol.tables.follow import TableFollower

        if table == "iceberg":
            options = {"snapshotRetention": f"{retention_s}s", **options}
        self.cfg = SinkConfig(path=url, format="parquet", compression="snappy",
                              file_suffix=".parquet", partition_by=("day",),
                              table_format=None if table == NO_TABLE else table,
                              table_options=options,
                              fs_options=fs, cleanup_delay_ms=retention_s * 1000,
                              retention_ms=retention_s * 1000 if table == NO_TABLE else None,
                              rotation=RotationPolicy(max_batches=1, interval_ms=0,
                                                      inactivity_ms=0))
        self.storage = open_storage(url, fs)
        self.table_ms = 0.0
        self.retention_s = retention_s
        self.day_commits = day_commits
        follow = TableFollower.follow

        def timed(follower: TableFollower, state: Any, **kwargs: Any) -> list[int]:
            started = time.perf_counter()
            try:
                return follow(follower, state, **kwargs)
            finally:
                self.table_ms = (time.perf_counter() - started) * 1000

        TableFollower.follow = timed  # type: ignore[method-assign,assignment]

    def commit(self, n: int) -> tuple[float, float]:
        from commit_protocol.commit.committer import Committer
        from commit_protocol.records.plan import WritePlan
        from commit_protocol.task.task_writer import TaskWriter

        started = time.perf_counter()
        plan = WritePlan.from_state(Committer(self.storage, self.cfg, SCHEMA_JSON)
                                    .latest_state(), self.storage.root_uri)
        report = TaskWriter(self.storage, self.cfg, plan, batch_id=n, partition=0, attempt=0,
                            query_id="long-run").write([rows_of(n, self.day_commits)])
        self.table_ms = 0.0
        Committer(self.storage, self.cfg, SCHEMA_JSON).commit(n, [report])
        if n == 0 and self.cfg.table_format is not None \
                and self.cfg.table_format == "delta":  # the retention, compressed
            from deltalake import DeltaTable

            from commit_protocol.tables.delta.storage import delta_location

            uri, storage_options = delta_location(self.storage.root_uri, self.cfg)
            DeltaTable(uri, storage_options=storage_options or None).alter \
                .set_table_properties({
                    "delta.logRetentionDuration": f"interval {self.retention_s} seconds",
                    # the removed files a checkpoint carries (a week by default)
                    "delta.deletedFileRetentionDuration":
                        f"interval {self.retention_s} seconds"})
        return (time.perf_counter() - started) * 1000, self.table_ms


class PlainWriter:
    """The format's library appending the same rows, no maintenance."""

    def __init__(self, url: str, table: str, options: dict[str, str], fs: dict[str, str],
                 day_commits: int) -> None:
        self.url, self.table, self.options, self.fs = url, table, options, fs
        self.day_commits = day_commits

    def commit(self, n: int) -> tuple[float, float]:
        import pyarrow as pa

        rows = pa.Table.from_batches([rows_of(n, self.day_commits)])
        started = time.perf_counter()
        if self.table == "delta":
            from deltalake import write_deltalake

            write_deltalake(delta_uri(self.url), rows, mode="append", partition_by=["day"],
                            storage_options=delta_storage(self.fs) or None)
        else:
            iceberg_table(self.url, self.options, self.fs, rows.schema).append(rows)
        return (time.perf_counter() - started) * 1000, 0.0


def delta_uri(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def delta_storage(fs: dict[str, str]) -> dict[str, str]:
    from commit_protocol.records.config import SinkConfig
    from commit_protocol.tables.delta.storage import delta_location

    if not fs:
        return {}
    return delta_location("s3://x/y", SinkConfig(path="s3://x/y", fs_options=fs))[1]


_ICEBERG: dict[str, Any] = {}


def iceberg_table(url: str, options: dict[str, str], fs: dict[str, str], schema: Any) -> Any:
    """The plain writer's table (created on first use), loaded afresh as a writer would."""
    from pyiceberg.catalog import load_catalog

    from commit_protocol.tables.iceberg.catalog import catalog_properties

    catalog = _ICEBERG.get(url)
    if catalog is None:
        properties = catalog_properties(url if "://" in url else f"file://{url}", options, fs)
        catalog = _ICEBERG[url] = load_catalog("plain", **properties)
        catalog.create_namespace_if_not_exists("plain")
        location: dict[str, Any] = {"location": url} if "://" not in url else {}
        catalog.create_table("plain.t", schema=schema, **location)
    return catalog.load_table("plain.t")


class DataRetention:
    """The user's retention job beside the stream (see above): at the start of each day past
    ``days_kept``, the files its last run removed leave storage, then the old days leave the
    table."""

    def __init__(self, url: str, fs: dict[str, str], table: str, plain: bool,
                 options: dict[str, str], day_commits: int, days_kept: int) -> None:
        from commit_protocol.storage import open_storage

        self.url, self.fs, self.table, self.plain, self.options = url, fs, table, plain, options
        self.day_commits, self.days_kept = day_commits, days_kept
        self.storage = open_storage(url, fs)
        self.removed: set[str] = set()

    def due(self, commit: int) -> bool:
        return (self.days_kept > 0 and self.table != NO_TABLE and commit % self.day_commits == 0
                and commit // self.day_commits > self.days_kept)

    def run(self, commit: int) -> None:
        for uri in self.removed:
            path = below(self.storage.root_uri, uri)
            if path is not None:  # (a plain Iceberg table's files on S3 are the catalog's)
                self.storage.delete(path)
        cutoff = day_of(commit - self.days_kept * self.day_commits, self.day_commits)
        before = self.live_files()
        if self.table == "delta":
            from deltalake import DeltaTable

            DeltaTable(delta_uri(self.url), storage_options=delta_storage(self.fs) or None
                       ).delete(f"day < '{cutoff}'")
        else:
            load_iceberg(self.url, self.fs, self.plain, self.options).delete(
                f"day < '{cutoff}'")
        self.removed = before - self.live_files()

    def live_files(self) -> set[str]:
        if self.table == "delta":
            from deltalake import DeltaTable

            return set(DeltaTable(delta_uri(self.url),
                                  storage_options=delta_storage(self.fs) or None).file_uris())
        loaded = load_iceberg(self.url, self.fs, self.plain, self.options)
        return {task.file.file_path for task in loaded.scan().plan_files()}


def below(root_uri: str, uri: str) -> str | None:
    """``uri``'s path below the output's root, None when it is elsewhere."""
    for root in (root_uri, root_uri.removeprefix("file://")):
        if uri.startswith(root + "/"):
            return uri[len(root) + 1:]
    return None


def metadata(url: str, fs: dict[str, str]) -> dict[str, list[int]]:
    """Bytes and files of each kind of metadata below the output (the table's: its log or
    its metadata and catalog)."""
    from commit_protocol.storage import open_storage

    storage = open_storage(url, fs)
    found = {kind: [0, 0] for kind in KINDS}
    for f in storage.walk():
        top = f.path.split("/", 1)[0]
        kind = "table" if top in ("_delta_log", "metadata", "_iceberg") else top
        if kind in found:
            found[kind][0] += f.size
            found[kind][1] += 1
    return found


def catalog_metadata(table: Any, fs: dict[str, str]) -> list[int]:
    """Bytes and files of an Iceberg table's ``metadata/`` where its catalog keeps it (a REST
    catalog's warehouse, outside the output): the directory of its current metadata file."""
    from commit_protocol.storage import open_storage

    directory = table.metadata_location.rpartition("/")[0]
    sizes = [f.size for f in open_storage(directory, fs).walk()]
    return [sum(sizes), len(sizes)]


def open_and_plan(url: str, fs: dict[str, str], table: str, plain: bool,
                  options: dict[str, str]) -> tuple[float, int]:
    """Milliseconds to open the table and plan a full scan with its own library; files."""
    started = time.perf_counter()
    if table == NO_TABLE:
        return 0.0, 0
    if table == "delta":
        from deltalake import DeltaTable

        files = len(DeltaTable(delta_uri(url), storage_options=delta_storage(fs) or None)
                    .file_uris())
    else:
        files = len(list(load_iceberg(url, fs, plain, options).scan().plan_files()))
    return (time.perf_counter() - started) * 1000, files


def load_iceberg(url: str, fs: dict[str, str], plain: bool, options: dict[str, str]) -> Any:
    """The Iceberg table of a writer, loaded afresh from its catalog."""
    if plain:
        return iceberg_table(url, options, fs, None)
    from commit_protocol.records.config import SinkConfig
    from commit_protocol.storage import open_storage
    from commit_protocol.tables.iceberg.table import IcebergFollowedTable

    root = open_storage(url, fs).root_uri
    return IcebergFollowedTable(root, SinkConfig(
        path=url, format="parquet", table_format="iceberg",
        table_options=options, fs_options=fs)).loaded()


class S3Calls:
    """rotsink's own S3 requests inside the commits, by operation and area of the output (every
    one goes through s3fs's ``_call_s3``; delta-rs's and pyiceberg's requests do not, and are
    not seen): when a run slows down, this says whether rotsink asks more of the store or the
    store answers more slowly. Timed in the client, not through the recording proxy of
    ``tests/support/faulty_proxy.py`` the other S3 benchmarks use: a Python HTTP hop on each of
    hundreds of thousands of requests would change the very times this run follows."""

    def __init__(self) -> None:
        import s3fs
        from fsspec.asyn import sync_wrapper

        self.active = False
        self.calls: dict[str, list[float]] = {}
        call_s3 = s3fs.S3FileSystem._call_s3
        recorder = self

        async def timed(fs: Any, method: str, *args: Any, **kwargs: Any) -> Any:
            if not recorder.active:
                return await call_s3(fs, method, *args, **kwargs)
            started = time.perf_counter()
            try:
                return await call_s3(fs, method, *args, **kwargs)
            finally:
                recorder.calls.setdefault(f"{method} {_area(kwargs)}", []).append(
                    (time.perf_counter() - started) * 1000)

        s3fs.S3FileSystem._call_s3 = timed  # type: ignore[method-assign]
        # (s3fs's blocking ``call_s3`` wraps the coroutine its class body saw)
        s3fs.S3FileSystem.call_s3 = sync_wrapper(timed)  # type: ignore[method-assign]

    def take(self, commits: int) -> dict[str, list[float]]:
        """Per request kind since the last take: requests a commit, median ms, ms a commit."""
        taken = {kind: [len(ms) / commits, statistics.median(ms), sum(ms) / commits]
                 for kind, ms in self.calls.items()}
        self.calls = {}
        return taken


def _area(kwargs: dict[str, Any]) -> str:
    """The part of the output a request is about: ``_spark_metadata``, ``_rotsink``, the
    table's log or a data file (``data``); a listing's later pages apart."""
    key = kwargs.get("Key") or kwargs.get("Prefix") or ""
    if not key and "Delete" in kwargs:
        key = kwargs["Delete"]["Objects"][0]["Key"]
    parts = key.split("/")[1:]  # keys are <output dir>/<area>/...
    area = "/".join(parts[:2] if parts[:1] == ["_rotsink"] else parts[:1])  # its kinds apart
    page = " (next page)" if "ContinuationToken" in kwargs else ""
    return (area if area.startswith("_") else "data") + page


def drive(args: argparse.Namespace) -> None:
    """The child: commit, and print one JSON line every ``--every`` commits."""
    from benchmarks import process_memory
    from datasource.spark.memory_pool import use_for_commits

    pool = use_for_commits()  # as the query's committing process does (ARROW_DEFAULT_MEMORY_POOL)
    growth = process_memory.HeapGrowth(args.trace_frames) if args.tracemalloc else None
    fs = json.loads(args.fs)
    s3 = S3Calls() if args.url.startswith("s3://") else None
    options = json.loads(args.options)
    plain = args.writer == "plain"
    writer: Any = PlainWriter(args.url, args.table, options, fs, args.day_commits) if plain \
        else RotsinkWriter(args.url, args.table, options, args.retention, fs, args.day_commits)
    retention = DataRetention(args.url, fs, args.table, plain, options, args.day_commits,
                              args.days_kept)
    # The retention job and the readers are other processes beside a real driver: here too,
    # or their memory would be counted as the committing process's.
    others = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    commits, tables = [], []
    started = time.perf_counter()
    for n in range(args.commits):
        if growth is not None and n == args.trace_from:
            growth.start()
        if retention.due(n):
            others.submit(retain, args.url, fs, args.table, plain, options, args.day_commits,
                          args.days_kept, n).result()
        if s3 is not None:
            s3.active = True
        total, step = writer.commit(n)
        if s3 is not None:
            s3.active = False
        commits.append(total)
        tables.append(step)
        if args.free_every and (n + 1) % args.free_every == 0:
            process_memory.free_unused()
        if (n + 1) % args.every == 0 or n == 0:
            plan_ms, files, found = others.submit(look, args.url, fs, args.table, plain,
                                                  options).result()
            point = {
                "commit": n + 1, "commit_ms": _stats(commits), "table_ms": _stats(tables),
                "pool": pool,
                "metadata": found, "plan_ms": plan_ms,
                "files": files, "rate": len(commits) / (time.perf_counter() - started),
                "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "s3_calls": s3.take(len(commits)) if s3 is not None else {}}
            # this benchmark's own records of the interval go before the memory is sampled:
            # they are not the committing process's
            commits, tables = [], []
            point.update(process_memory.sample())
            point["heap_growth"] = growth.since_last() if growth is not None else []
            print(json.dumps(point), flush=True)
            started = time.perf_counter()
    others.shutdown()


# In the process beside the driver (``drive``'s ``others``): the user's retention job, and a
# reader opening the table and looking at the metadata on storage.
_RETENTIONS: dict[str, DataRetention] = {}


def retain(url: str, fs: dict[str, str], table: str, plain: bool, options: dict[str, str],
           day_commits: int, days_kept: int, commit: int) -> None:
    if url not in _RETENTIONS:  # (it remembers what its last run removed)
        _RETENTIONS[url] = DataRetention(url, fs, table, plain, options, day_commits,
                                         days_kept)
    _again_if_the_log_moved(_RETENTIONS[url].run, commit)


def look(url: str, fs: dict[str, str], table: str, plain: bool,
         options: dict[str, str]) -> tuple[float, int, dict[str, list[int]]]:
    plan_ms, files = _again_if_the_log_moved(open_and_plan, url, fs, table, plain, options)
    found = metadata(url, fs)
    if table == "iceberg" and options:  # a REST catalog: metadata in its bucket
        found["table"] = catalog_metadata(load_iceberg(url, fs, plain, options), fs)
    return plan_ms, files, found


def _again_if_the_log_moved(step: Any, *args: Any) -> Any:
    """``step(*args)``, once more if a Delta log file it listed was gone when read: the
    driver's log clean-up, in the background after its commit, removes files past the
    retention, compressed here to ``--retention`` seconds (a real table keeps 30 days, so a
    reader never reads files that old)."""
    try:
        return step(*args)
    except FileNotFoundError:
        time.sleep(1)
        return step(*args)


def _stats(values: list[float]) -> list[float]:
    ordered = sorted(values)
    return [statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]]


# -- the parent ----------------------------------------------------------------------------------
def run(label: str, cmd: list[str], env: dict[str, str],
        keep: Callable[[list[dict]], None] = lambda points: None) -> list[dict]:
    """The points of one writer's run, each shown and handed to ``keep`` as it comes (a run
    of hours that is stopped keeps what it measured)."""
    print(f"== {label}", flush=True)
    points: list[dict] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) as child:
        assert child.stdout is not None
        for line in child.stdout:
            point = json.loads(line)
            points.append(point)
            show(point)
            keep(points)
    if child.returncode:
        raise SystemExit(f"{label}: the writer failed (exit {child.returncode})")
    return points


def show(p: dict) -> None:
    now = f" (now {p['rss_mb']:,.0f} MB)" if p.get("rss_mb") else ""  # older --json
    kinds = ", ".join(f"{kind} {b / 1e6:,.2f} MB in {n:,} files"
                      for kind, (b, n) in p["metadata"].items() if n)
    print(f"  commit {p['commit']:>7,}: commit {p['commit_ms'][0]:6.1f} ms (p99 "
          f"{p['commit_ms'][1]:6.1f}), table step {p['table_ms'][0]:5.1f} ms (p99 "
          f"{p['table_ms'][1]:5.1f}); open+plan {p['plan_ms']:6.1f} ms for {p['files']:,} "
          f"files; {p['rate']:,.0f} commits/s; peak {p['peak_mb']:,.0f} MB{now}; {kinds}",
          flush=True)
    if "python_blocks" in p:  # (older --json files have the resident set only)
        heap = f"Python heap {p['python_mb']:,.1f} MB, " if p.get("python_mb") else ""
        pool = f" ({p['pool']})" if p.get("pool") else ""
        # (pymalloc tells its arenas only while tracemalloc does not wrap it)
        arenas = f" in {p['python_arenas_mb']:,.0f} MB of arenas" \
            if p.get("python_arenas_mb") is not None else ""
        # (older --json files have no split of the resident set)
        split = f"resident {p['rss_anon_mb']:,.1f} MB own and {p['rss_file_mb']:,.1f} MB of " \
            "mapped files; " if p.get("rss_anon_mb") else ""
        print(f"    memory: {split}{heap}{p['python_blocks'] / 1e3:,.0f}k Python blocks{arenas}, "
              f"Arrow{pool} "
              f"{p['arrow_mb'] or 0:,.1f} MB, malloc in use {p['malloc_in_use_mb'] or 0:,.1f} "
              f"MB and free {p['malloc_free_mb'] or 0:,.1f} MB", flush=True)
    for grown in p.get("heap_growth", []):
        print(f"    heap grew {grown['blocks']:+,} blocks ({grown['kib']:+,.1f} KiB) at "
              + " <- ".join(grown["where"]), flush=True)
    calls = sorted(p.get("s3_calls", {}).items(), key=lambda kv: -kv[1][2])
    if calls:
        print("    rotsink's S3 requests a commit: " + ", ".join(
            f"{kind} {n:.2f} x {median:.1f} ms" for kind, (n, median, _) in calls), flush=True)


def draw(results: dict[str, list[dict]], png: Path) -> None:
    """Per writer against the commit number (the first commit, a cold start, left out): the
    median commit, the table's metadata, rotsink's own (``_spark_metadata``, ``_rotsink``),
    the table's open and plan, and the committing process's memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("commit, median ms", lambda p: p["commit_ms"][0]),
              ("table metadata on storage, MB", lambda p: p["metadata"]["table"][0] / 1e6),
              ("_spark_metadata and _rotsink on storage, MB",
               lambda p: (p["metadata"]["_spark_metadata"][0]
                          + p["metadata"]["_rotsink"][0]) / 1e6),
              ("open the table and plan a full scan, ms", lambda p: p["plan_ms"]),
              ("the committing process's resident memory, MB\n"
               "(dotted: without the libraries' code)", lambda p: p["rss_mb"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(25, 4.8))
    for n, (label, points) in enumerate(results.items()):
        shown = [p for p in points if p["commit"] > 1]
        xs = [p["commit"] for p in shown]
        style = "--" if label.startswith("plain") else "-"
        for ax, (_, value) in zip(axes, panels, strict=True):
            if label.startswith("plain") and ax is axes[2]:
                continue  # no rotsink log beside a plain writer
            if label.startswith(f"rotsink {NO_TABLE}") and ax in (axes[1], axes[3]):
                continue  # no table
            ax.plot(xs, [value(p) for p in shown], style, label=label, color=f"C{n}")
        own = [(p["commit"], p["rss_anon_mb"]) for p in shown if p.get("rss_anon_mb")]
        if own:  # (older --json files have no split)
            axes[-1].plot(*zip(*own, strict=True), ":", color=f"C{n}")
    for ax, (title, _) in zip(axes, panels, strict=True):
        ax.set_title(title)
        ax.set_xlabel("commit")
        ax.set_yscale("linear" if ax is axes[-1] else "log")  # memory: growth shows
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"drew {png}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", default="delta,iceberg")
    parser.add_argument("--storage", default="local", help="local, s3, or local,s3")
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument("--plain-commits", type=int, default=3_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--retention", type=int, default=60, help="seconds (see above)")
    parser.add_argument("--day-commits", type=int, default=500,
                        help="commits a day (a partition)")
    parser.add_argument("--days-kept", type=int, default=4,
                        help="days the retention job keeps; 0: no retention job")
    parser.add_argument("--png", type=Path)
    parser.add_argument("--json", type=Path, help="every point, for later drawing")
    parser.add_argument("--redraw", type=Path,
                        help="summarize and draw the points of an earlier --json, run nothing")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="trace the Python heap of each writer (slows its commits) and "
                             "print the calls whose blocks grew most between reports")
    parser.add_argument("--trace-from", type=int, default=0, metavar="COMMIT",
                        help="with --tracemalloc, start tracing at this commit (after the "
                             "caches' warm-up)")
    parser.add_argument("--trace-frames", type=int, default=1, metavar="N",
                        help="with --tracemalloc, the calls' innermost frames to tell apart")
    parser.add_argument("--free-every", type=int, default=0,
                        help="hand back the allocators' free memory every N commits (an A/B "
                             "of the resident set's growth: memory kept, or in use?)")
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--writer", default="rotsink", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--fs", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trace_from < 0 or args.trace_frames < 1:
        parser.error(f"--trace-from must be 0 or more and --trace-frames 1 or more, not "
                     f"{args.trace_from} and {args.trace_frames}")
    if args.drive:
        drive(args)
        return 0
    if args.redraw:
        drawn: dict[str, list[dict]] = json.loads(args.redraw.read_text())
        summarize(drawn)
        if args.png:
            draw(drawn, args.png)
        return 0
    from tests.support.s3server import DUMMY_CREDENTIALS, create_bucket

    env = {**os.environ, **DUMMY_CREDENTIALS}
    os.environ.update(DUMMY_CREDENTIALS)
    results: dict[str, list[dict]] = {}
    stop = None
    try:
        for storage in args.storage.split(","):
            server = None
            if storage == "s3":
                from tests.support.s3server import start_seaweedfs_with_catalog

                s3, catalog, stop = start_seaweedfs_with_catalog()
                server = (s3, catalog)
            for table in args.table.split(","):
                for writer, commits in (("rotsink", args.commits),
                                        ("plain", args.plain_commits)):
                    if not commits or (writer == "plain" and table == NO_TABLE):
                        continue
                    fs: dict[str, str] = {}
                    options: dict[str, str] = {}
                    if server is None:
                        url = tempfile.mkdtemp(prefix=f"long-run-{table}-{writer}-")
                    else:
                        bucket = create_bucket(server[0], f"long-{uuid.uuid4().hex[:8]}")
                        url, fs = f"s3://{bucket}/out", {"endpoint_url": server[0]}
                        if table == "iceberg":
                            from benchmarks.table_commits import iceberg_options

                            options = iceberg_options(server[1], server[0])
                    label = f"{writer} {table}, {storage}"
                    cmd = [sys.executable, __file__, "--drive", "--writer", writer,
                           "--table", table, "--url", url, "--fs", json.dumps(fs),
                           "--options", json.dumps(options), "--commits", str(commits),
                           "--every", str(args.every), "--retention", str(args.retention),
                           "--day-commits", str(args.day_commits),
                           "--days-kept", str(args.days_kept),
                           "--free-every", str(args.free_every),
                           *(["--tracemalloc", "--trace-from", str(args.trace_from),
                              "--trace-frames", str(args.trace_frames)]
                             if args.tracemalloc else [])]
                    # (the environment as now: an Iceberg catalog's secret was just set)
                    def keep(points: list[dict], label: str = label) -> None:
                        if args.json:  # as it goes: a run of hours keeps what it measured
                            args.json.write_text(json.dumps({**results, label: points}))

                    results[label] = run(label, cmd, {**os.environ, **env}, keep)
            if stop is not None:
                stop()
                stop = None
    finally:
        if stop is not None:
            stop()
    summarize(results)
    if args.png:
        draw(results, args.png)
    return 0


def summarize(results: dict[str, list[dict]]) -> None:
    print("summary: median commit ms at the first full report and at the last, their ratio; "
          "the table's metadata then and at the end")
    for label, points in results.items():
        first = next((p for p in points if p["commit"] >= 1000), points[0])
        last = points[-1]
        print(f"  {label:<26} commit {first['commit_ms'][0]:6.1f} ms at {first['commit']:,}, "
              f"{last['commit_ms'][0]:6.1f} ms at {last['commit']:,} "
              f"({last['commit_ms'][0] / first['commit_ms'][0]:.2f}x); table metadata "
              f"{first['metadata']['table'][0] / 1e6:,.2f} MB -> "
              f"{last['metadata']['table'][0] / 1e6:,.2f} MB "
              f"({last['metadata']['table'][1]:,} files); open+plan "
              f"{first['plan_ms']:.0f} -> {last['plan_ms']:.0f} ms; resident "
              f"{first['rss_mb']:,.0f} -> {last['rss_mb']:,.0f} MB "
              f"({last['rss_mb'] / first['rss_mb']:.2f}x)")
        at = next((n for n, p in enumerate(points) if p["commit"] >= TENTH), None)
        if at is not None and points[at] is not last:  # issue 55's goal: against 10,000
            tenth = points[at]
            print(f"  {'':<26} from commit {tenth['commit']:,} to {last['commit']:,}: resident "
                  f"{tenth['rss_mb']:,.1f} -> {last['rss_mb']:,.1f} MB "
                  f"({last['rss_mb'] / tenth['rss_mb']:.3f}x){_own_part(tenth, last)}; "
                  "commit median of 5 reports "
                  f"{_median_around(points, at):.1f} -> "
                  f"{_median_around(points, len(points) - 3):.1f} ms")


def _own_part(first: dict, last: dict) -> str:
    """The resident set's own part (not the mapped libraries') between two reports, where
    both have it."""
    if not (first.get("rss_anon_mb") and last.get("rss_anon_mb")):
        return ""
    return (f", its own part {first['rss_anon_mb']:,.1f} -> {last['rss_anon_mb']:,.1f} MB "
            f"({last['rss_anon_mb'] / first['rss_anon_mb']:.3f}x)")


def _median_around(points: list[dict], at: int) -> float:
    """The median of the commit medians of the 5 reports around ``points[at]`` (one report
    moves with whatever else the machine ran meanwhile)."""
    return statistics.median(p["commit_ms"][0] for p in points[max(0, at - 2):at + 3])


if __name__ == "__main__":
    sys.exit(main())
