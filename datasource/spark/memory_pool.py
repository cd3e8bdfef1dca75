"""The Arrow memory pool of the process that commits: jemalloc where the application chose
none, so that a driver committing for months keeps a flat resident set.

PySpark runs a streaming sink's commits in one long-lived Python process on the driver
(``python_streaming_sink_runner``). pyarrow's default pool there is mimalloc, which keeps the
pages it freed: over 5,000 Iceberg commits with a retention job deleting old days, that
process grew from 188 to 221 MB and was still growing, while pyarrow held no bytes between
commits (``pa.total_allocated_bytes()`` 0) and Python's objects stayed flat; the growth was in
mimalloc's reserved region (``/proc/<pid>/smaps``). Handing the free pages back every 100
commits (``release_unused()`` and ``malloc_trim``) took 6 MB off but did not stop it. With
jemalloc, which returns freed pages to the system after a decay time, the same run was flat at
195 MB from commit 3,500 to 5,000 (benchmarks/README.md, "The driver's memory"; pyarrow's
mimalloc holding memory it freed: apache/arrow#47266, microsoft/mimalloc#1111).

``ARROW_DEFAULT_MEMORY_POOL`` set by the application is kept; a pyarrow without jemalloc
(its Windows wheels) keeps its default. Buffers made before the switch are freed into the pool
that made them, so switching in a process that already allocated is safe.
"""

from __future__ import annotations

import os

ENV_VAR = "ARROW_DEFAULT_MEMORY_POOL"
_chosen: str | None = None


def use_for_commits() -> str:
    """Make jemalloc the default pool of this process, once, unless the application chose a
    pool; return the pool's backend in use."""
    global _chosen
    import pyarrow as pa

    if _chosen is None:
        if not os.environ.get(ENV_VAR):
            try:
                pa.set_memory_pool(pa.jemalloc_memory_pool())
            except NotImplementedError:  # a pyarrow built without jemalloc
                pass
        _chosen = pa.default_memory_pool().backend_name
    return _chosen
