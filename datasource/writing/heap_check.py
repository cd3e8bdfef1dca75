"""One warning when a task's JVM has a heap too small for the Arrow path to Python sinks.

Measured (README, Tuning; ``benchmarks/tuning.py``): with Spark's default 1g heap, 6M rows
moved 15-25% slower on every side than with 2g, and rotsink's runs varied most. In local
mode the executors live in the driver's JVM, so ``spark.driver.memory`` is the setting; on a
cluster ``spark.executor.memory``. The check is cheap: a task's Python worker looks up its
JVM among its ancestors in ``/proc`` (Linux; elsewhere it says nothing) and reads ``-Xmx``
from its command line, once per process; a marker file per JVM (named by its pid and start
time, so a reused pid warns again; markers of JVMs gone are removed) makes it one line per JVM.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

LOG = logging.getLogger("rotsink.task")
ENOUGH_HEAP = 2 << 30  # below this, the warning (Spark's default is 1g)
_XMX = re.compile(r"^-Xmx(\d+)([kKmMgGtT]?)$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_checked = False
_MARKER = "rotsink-small-heap-warned-"


def max_heap_bytes(argv: list[str]) -> int | None:
    """The ``-Xmx`` of a java command line in bytes (the last one wins, as in the JVM).

    >>> max_heap_bytes(["java", "-Xmx1g", "-cp", "x", "Main"])
    1073741824
    >>> max_heap_bytes(["java", "-Xmx2g", "-Xmx512m"]) == 512 << 20
    True
    >>> max_heap_bytes(["java", "Main"]) is None
    True
    """
    heap = None
    for arg in argv:
        match = _XMX.match(arg)
        if match:
            heap = int(match.group(1)) * _UNITS[match.group(2).lower()]
    return heap


def jvm_ancestor(pid: int, proc: Path = Path("/proc")) -> tuple[int, list[str]] | None:
    """The nearest ancestor of ``pid`` that runs ``java``: its pid and command line."""
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: ppid
            argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            return None
        if argv and Path(argv[0].decode(errors="replace")).name == "java":
            return pid, [a.decode(errors="replace") for a in argv if a]
    return None


def warn_once_if_heap_is_small(proc: Path = Path("/proc"), markers: Path | None = None) -> bool:
    """Runs in each task (cheap after the first); returns whether it warned. The marker of a
    JVM goes to ``markers`` (default: the temp directory)."""
    global _checked
    if _checked:
        return False
    _checked = True
    found = jvm_ancestor(os.getpid(), proc)
    if found is None:
        return False
    jvm, argv = found
    heap = max_heap_bytes(argv)
    if heap is None or heap >= ENOUGH_HEAP:
        return False
    if not first_in_jvm(jvm, _MARKER, proc, markers):
        return False
    LOG.warning("the JVM running this task (pid %d) has a %d MB heap: Spark's Arrow path to "
                "Python sinks runs 15-25%% slower and less steadily below 2g (README, "
                "Tuning); set spark.driver.memory (local mode) or spark.executor.memory to 2g "
                "or more", jvm, heap >> 20)
    return True


def first_in_jvm(jvm: int, marker: str, proc: Path = Path("/proc"),
                 markers: Path | None = None) -> bool:
    """Whether this is the first Python worker of JVM ``jvm`` to get here for ``marker`` (a
    file name prefix; one line per JVM, whichever of its workers comes first): creates the
    marker in ``markers`` (default: the temp directory), and removes those of JVMs gone."""
    directory = markers or Path(tempfile.gettempdir())
    try:
        (directory / f"{marker}{jvm}-{start_time(jvm, proc)}").open("x").close()
    except OSError:
        return False
    remove_stale_markers(directory, proc, marker)
    return True


def start_time(pid: int, proc: Path = Path("/proc")) -> str:
    """The process's start time (``/proc/<pid>/stat`` field 22, clock ticks since boot): with
    the pid it names one process, though pids are reused; "0" when unreadable."""
    try:
        fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return fields[19]  # fields after the command start at field 3 (the state)
    except (OSError, IndexError):
        return "0"


def remove_stale_markers(directory: Path, proc: Path = Path("/proc"),
                         prefix: str = _MARKER) -> list[Path]:
    """Delete the markers of JVMs no longer running (so they do not pile up in the temp
    directory, one per JVM ever started); returns what it deleted."""
    removed = []
    for marker in directory.glob(f"{prefix}*"):
        pid, _, started = marker.name[len(prefix):].partition("-")
        if pid.isdigit() and start_time(int(pid), proc) != started:
            marker.unlink(missing_ok=True)
            removed.append(marker)
    return removed
