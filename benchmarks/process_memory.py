"""Where a long-running process's memory is, sampled cheaply enough to take every 1,000
commits: what grows can then be told apart (Python objects, Arrow buffers, the C allocator's
own holdings) before anyone reads a heap profile.

- ``rss_mb``: the resident set after a full collection (the operating system's view), and
  its parts: ``rss_anon_mb``, the process's own memory, and ``rss_file_mb``, the pages of
  the files it maps (libraries' code: shared, reclaimable, and more or less of them resident
  from one machine or run to another: tens of MB apart for the same commits).
- ``python_mb``: the Python heap as ``tracemalloc`` counts it, when it traces (it slows a
  commit about 3x, so only on demand); ``python_blocks``: the blocks Python's allocator has
  handed out (``sys.getallocatedblocks``), free to read, always; ``python_arenas_mb``: the
  arenas Python's small-object allocator holds (``sys._debugmallocstats``), which a few live
  objects can keep from being returned.
- ``arrow_mb``: bytes pyarrow's default memory pool holds.
- ``malloc_in_use_mb`` / ``malloc_free_mb``: glibc's ``mallinfo2``: bytes handed out by
  ``malloc`` (Python's large objects, pyarrow's system pool, Rust's and SQLite's
  allocations) and bytes it holds free in its arenas (fragmentation: resident, but no one's).

When the blocks rise, :class:`HeapGrowth` says which calls allocated what stayed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import re
import sys
import tempfile
import tracemalloc
from pathlib import Path

from benchmarks.common import own_memory_mb


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo2() -> _MallInfo2 | None:
    """glibc's statistics (2.33 on), None elsewhere (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    found: _MallInfo2 = function()
    return found


def _python_arenas_mb() -> float | None:
    """The arenas pymalloc holds now (CPython prints them to the C-level stderr only)."""
    if not hasattr(sys, "_debugmallocstats"):
        return None
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(captured.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        found = re.search(rb"(\d+) arenas \* (\d+) bytes/arena", captured.read())
    return None if found is None else int(found[1]) * int(found[2]) / 2**20


def sample() -> dict[str, float | None]:
    """This process's memory now, by where it is (see the module's docstring)."""
    gc.collect()
    resident = own_memory_mb()
    found: dict[str, float | None] = {"rss_mb": resident["rss"],
                                      "rss_anon_mb": resident["anon"] or None,
                                      "rss_file_mb": resident["file"] or None,
                                      "python_blocks": float(sys.getallocatedblocks()),
                                      "python_arenas_mb": _python_arenas_mb(),
                                      "python_mb": None, "arrow_mb": None,
                                      "malloc_in_use_mb": None, "malloc_free_mb": None}
    if tracemalloc.is_tracing():
        found["python_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
    if "pyarrow" in sys.modules:
        import pyarrow as pa

        found["arrow_mb"] = pa.total_allocated_bytes() / 2**20
    info = _mallinfo2()
    if info is not None:
        found["malloc_in_use_mb"] = (info.uordblks + info.hblkhd) / 2**20
        found["malloc_free_mb"] = info.fordblks / 2**20
    return found


def free_unused() -> None:
    """Hand back what the allocators hold free: pyarrow's pool (mimalloc's retained pages)
    and glibc's heaps (``malloc_trim``). An A/B of ``long_run.py --free-every`` against
    none says whether the resident set that grows is memory in use or memory kept."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class HeapGrowth:
    """Where the Python heap grew between two reports: ``tracemalloc``'s snapshots compared by
    the call that allocated (its innermost ``frames`` frames), the calls whose live blocks
    grew the most first.

    Tracing starts at :meth:`start`, after a warm-up, so that the imports and the caches
    filling over the first commits do not drown a block a commit, and the warm-up runs at
    full speed (traced with 6 frames, an Iceberg driver on SeaweedFS commits about once a
    second instead of five times). The cost of that late start: an entry that a full cache
    replaces shows as growth, since the entry it drops was made before tracing began. A
    grower is confirmed by ``python_blocks``, which counts every block.
    """

    def __init__(self, frames: int, top: int = 5) -> None:
        self.frames, self.top = frames, top
        self.last: tracemalloc.Snapshot | None = None

    def start(self) -> None:
        tracemalloc.start(self.frames)
        self.last = self._snapshot()

    def since_last(self) -> list[dict]:
        """The ``top`` calls whose live blocks grew most since the last report (or the
        start): their blocks and KiB gained, and where, innermost call first; none before
        :meth:`start`."""
        if self.last is None:
            return []
        now = self._snapshot()
        grown = [stat for stat in now.compare_to(self.last, "traceback") if stat.count_diff > 0]
        self.last = now
        grown.sort(key=lambda stat: -stat.count_diff)
        return [{"blocks": stat.count_diff, "kib": round(stat.size_diff / 1024, 1),
                 "where": [f"{_short(frame.filename)}:{frame.lineno}"
                           for frame in reversed(stat.traceback)]}
                for stat in grown[:self.top]]

    @staticmethod
    def _snapshot() -> tracemalloc.Snapshot:
        gc.collect()
        return tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__),
             tracemalloc.Filter(False, "<frozen importlib._bootstrap*>")])


def _short(filename: str) -> str:
    """A frame's file as a reader finds it: from its package (``pydantic/main.py``), or its
    place in this repository, or the standard library's module."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1:])
    root = Path(__file__).resolve().parents[1]
    try:
        return Path(filename).resolve().relative_to(root).as_posix()
    except ValueError:
        return "/".join(parts[-2:]) if len(parts) > 1 else filename
