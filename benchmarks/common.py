"""Small helpers the benchmarks share: memory and CPU readings, and the local session.

Peak memory (``peak_memory_mb``: ``/proc/<pid>/status``, ``VmHWM``, each process's
resident-set high-water mark) and CPU time (``cpu_seconds``: ``/proc/<pid>/stat``) of a
whole local Spark run are Linux only. Python workers are daemon children of the JVM and
live across queries, so their marks cover every query the session ran so far unless reset.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path


def driver_peak_rss_mb() -> float:
    """High-water mark of this (driver) Python process in MB (``ru_maxrss`` is KiB on Linux).

    The driver only talks to the JVM over py4j: rotsink's planning and commit run in Python
    worker processes the JVM forks per micro-batch, which this number does not include.
    """
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# Issue 55's goal: a long-running driver's memory (commits, or a query's micro-batches) is held
# against its memory here, once warm
TENTH = 10_000

# The settings that move a Python sink's throughput (README, Tuning): printed by every run.
SETTINGS = ("spark.master", "spark.driver.memory", "spark.sql.execution.arrow.maxRecordsPerBatch",
            "spark.sql.execution.arrow.maxBytesPerBatch", "spark.sql.shuffle.partitions")


def quiet_session(app_name: str, conf: dict[str, str] | None = None,
                  extra_jars: tuple[Path, ...] = ()):
    """``local_session`` without the console progress bar, log level ERROR; prints the
    settings it runs with (``conf`` overrides them: ``{"spark.driver.memory": "4g"}``;
    ``extra_jars`` go on Spark's classpath)."""
    from datasource.commands.session import local_session

    # The progress bar is set up with the SparkContext: only the launch arguments reach it.
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                          "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    spark = local_session(app_name=app_name, conf=conf, extra_jars=extra_jars)
    spark.sparkContext.setLogLevel("ERROR")
    print(settings_line(spark), flush=True)
    return spark


def _session_conf(spark, key: str) -> str:
    """A SQL setting's value, its default included; "(unset)" for a key Spark doesn't know."""
    try:
        return str(spark.conf.get(key))
    except Exception:  # noqa: BLE001 - py4j raises a generic error for an unknown key
        return "(unset)"


def settings_line(spark) -> str:
    """``settings: spark.master=local[2,4], spark.driver.memory=2g, ...`` and versions."""
    import platform

    import pyarrow
    import pyspark

    conf = spark.sparkContext.getConf()
    values = [f"{key}={conf.get(key, None) or _session_conf(spark, key)}" for key in SETTINGS]
    return (f"settings: {', '.join(values)}; {os.cpu_count()} cores; PySpark "
            f"{pyspark.__version__}, pyarrow {pyarrow.__version__}, "
            f"Python {platform.python_version()}")


def _heap_pools(spark) -> list:
    factory = spark._jvm.java.lang.management.ManagementFactory
    return [p for p in factory.getMemoryPoolMXBeans() if p.getType().toString() == "Heap memory"]


def reset_jvm_heap_peak(spark) -> None:
    """Start a new JVM heap high-water mark (per memory pool) before a measured query."""
    for pool in _heap_pools(spark):
        pool.resetPeakUsage()


def jvm_heap_peak_mb(spark) -> float:
    """Sum of the heap pools' peak use since the last reset, in MB (an upper bound on the
    peak heap use: the pools need not peak at the same moment)."""
    return sum(p.getPeakUsage().getUsed() for p in _heap_pools(spark)) / 1e6


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(ours: float, anchor: float) -> str:
    """``ours / anchor`` as ``1.23x`` (lower is better for times)."""
    return f"{ours / anchor:.2f}x" if anchor else "n/a"


def _status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # the process ended while we looked
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _children(root: int) -> list[int]:
    """Every live descendant of ``root``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = _status(int(entry)).get("PPid", "").strip()
            if ppid.isdigit():
                parents[int(entry)] = int(ppid)
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def reset_peak_memory(spark) -> None:
    """Start new resident-set high-water marks for the driver, the JVM and its Python
    workers (``5`` into ``/proc/<pid>/clear_refs``, Linux >= 4.0), so that the next
    :func:`peak_memory_mb` covers one measured query."""
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    for pid in [os.getpid(), jvm, *_children(jvm)]:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:  # ended meanwhile, or not ours to reset: its mark stays cumulative
            pass


def peak_memory_mb(spark) -> dict[str, float]:
    """High-water marks in MB: ``driver`` (this Python), ``jvm``, ``workers`` (sum)."""
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    workers = _children(jvm)
    return {"driver": memory_mb(os.getpid())["hwm"], "jvm": memory_mb(jvm)["hwm"],
            "workers": sum(memory_mb(p)["hwm"] for p in workers)}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and of its children it has reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # ended meanwhile: its time moved into its parent's reaped children
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(spark) -> dict[str, float]:
    """CPU seconds used so far by the ``jvm`` (with the helpers it forked and reaped, such
    as Hadoop's ``chmod``) and by its Python ``workers`` (daemons, the workers they forked,
    planning and commit runners). Subtract two readings to get one query's CPU: on a
    machine whose cores are all busy, wall time follows total CPU time."""
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    return {"jvm": _cpu_s(jvm), "workers": sum(_cpu_s(p) for p in _children(jvm))}


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {side: after[side] - before[side] for side in before}


def format_memory(mb: dict[str, float]) -> str:
    return "peak RSS " + ", ".join(f"{k} {v:,.0f} MB" for k, v in mb.items())


def memory_mb(pid: int) -> dict[str, float]:
    """A process's resident set now (``rss``) and its high-water mark (``hwm``), in MB; and
    the resident set's two parts: ``anon``, the process's own memory, and ``file``, the pages
    of files it maps (its libraries' code, shared with every process that maps them and
    dropped under memory pressure: deltalake's library alone is 134 MB). All 0 for a process
    that has ended."""
    status = _status(pid)
    return {key: int(status.get(field, "0 kB").split()[0]) / 1024
            for key, field in (("rss", "VmRSS"), ("hwm", "VmHWM"), ("anon", "RssAnon"),
                               ("file", "RssFile"))}


def own_memory_mb() -> dict[str, float]:
    """:func:`memory_mb` of this process."""
    return memory_mb(os.getpid())


def reset_own_peak() -> float:
    """Start a new high-water mark for this process and return its resident set in MB: a
    measured step's peak increase is then ``own_memory_mb()["hwm"]`` minus this. Without
    ``clear_refs`` (Linux < 4.0) the mark stays the process's, an upper bound."""
    try:
        Path(f"/proc/{os.getpid()}/clear_refs").write_text("5")
    except OSError:
        pass
    return own_memory_mb()["rss"]


def feed_and_drain(query, directory: Path, rows: int, row: Callable[[int], dict],
                   seconds: float) -> float:
    """Feeds ``query``'s source a JSON file a second for ``seconds``, then lets the query
    take all of it; returns the seconds from the first file to the drained query."""
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(directory, rows, row, stop), daemon=True)
    started = time.monotonic()
    feeder.start()
    time.sleep(seconds)
    stop.set()
    feeder.join()
    query.processAllAvailable()
    return time.monotonic() - started


def _feed(directory: Path, rows: int, row: Callable[[int], dict],
          stop: threading.Event) -> None:
    """One JSON file of ``rows`` rows (``row(i)`` each) per second until ``stop``, written
    hidden then renamed (Spark lists only whole files)."""
    n = 0
    next_at = time.monotonic()
    while not stop.is_set():
        lines = (json.dumps(row(i)) for i in range(n * rows, (n + 1) * rows))
        tmp = directory / f".in-{n:06d}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(directory / f"in-{n:06d}.json")
        n += 1
        next_at += 1.0
        stop.wait(max(0.0, next_at - time.monotonic()))
