"""Peak memory of a local Spark run: the Python driver, its JVM and the Python workers.

Linux only (``/proc/<pid>/status``, ``VmHWM``: the resident-set high-water mark of each
process). Workers are daemon children of the JVM and live across queries, so their
high-water marks cover every query the session ran so far: measure one side per session, or
compare the growth between two readings.
"""

from __future__ import annotations

import os
from pathlib import Path


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


def _hwm_mb(pid: int) -> float:
    value = _status(pid).get("VmHWM", "0 kB").split()[0]
    return int(value) / 1024


def peak_memory_mb(spark) -> dict[str, float]:
    """High-water marks in MB: ``driver`` (this Python), ``jvm``, ``workers`` (sum)."""
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    workers = _children(jvm)
    return {"driver": _hwm_mb(os.getpid()), "jvm": _hwm_mb(jvm),
            "workers": sum(_hwm_mb(p) for p in workers)}


def format_memory(mb: dict[str, float]) -> str:
    return "peak RSS " + ", ".join(f"{k} {v:,.0f} MB" for k, v in mb.items())
