"""Which rotsink wrote what: the release (``pyproject.toml`` takes its version from here), as
every committed state and table commit records it.

Releases are numbered ``MAJOR.MINOR.PATCH``: a release that changes what a log file holds beyond
fields an earlier one ignores raises the state version (``commit_protocol.records.state``), and an
earlier release refuses such a path, naming the log file and the version; within one state version,
releases continue each other's outputs both ways (docs/operations.md, "Upgrading").

A state records the release that committed it as ``{"rotsink": RELEASE, "batch": N}``. A
release that does not know the field copies it unchanged, so a batch id that is not the
state's own says that an earlier release committed the batches since (as the totals'
``batch`` does: :mod:`commit_protocol.metrics.totals`).
"""

from __future__ import annotations

from typing import Any

RELEASE = "0.2.0"
"""0.2.0: Iceberg files with field ids, totals that say what they miss, ``pyspark_rotsink
.backfill``, the release in each state and table commit. 0.1.0: everything before (every
commit until 9bc99cf carried that version)."""
RELEASE_KEY = "release"


def recorded(extra: dict[str, Any], batch_id: int) -> dict[str, Any]:
    """``extra`` of batch ``batch_id``'s state with this release recorded."""
    return {**extra, RELEASE_KEY: {"rotsink": RELEASE, "batch": batch_id}}


def writer_line(extra: dict[str, Any], batch_id: int) -> str:
    """Which release committed the state of batch ``batch_id``, as ``rotsink inspect`` says.

    >>> writer_line({"release": {"rotsink": "0.2.0", "batch": 7}}, 7)
    'written by: rotsink 0.2.0'
    >>> writer_line({"release": {"rotsink": "0.2.0", "batch": 7}}, 9)
    'written by: rotsink 0.2.0 up to batch 7, batches 8-9 by an earlier release'
    >>> writer_line({}, 3)
    'written by: a release before 0.2.0 (none recorded)'
    """
    mark = extra.get(RELEASE_KEY)
    if not isinstance(mark, dict):
        return "written by: a release before 0.2.0 (none recorded)"
    name, through = mark.get("rotsink", "?"), int(mark.get("batch", batch_id))
    if through >= batch_id:
        return f"written by: rotsink {name}"
    since = f"{through + 1}" if through + 1 == batch_id else f"{through + 1}-{batch_id}"
    return (f"written by: rotsink {name} up to batch {through}, batch"
            f"{'' if through + 1 == batch_id else 'es'} {since} by an earlier release")
