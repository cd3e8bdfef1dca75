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


# The spans of earlier releases a state keeps (newest first): an upgrade, a downgrade and
# back, each adds one or two, and the record stays this size whatever the commits.
SPANS_KEPT = 8
EARLIER = "an earlier release"  # one that records no release: before 0.2.0


def recorded(extra: dict[str, Any], batch_id: int) -> dict[str, Any]:
    """``extra`` of batch ``batch_id``'s state with this release recorded: the release, the
    batch it committed since, and the spans of batches earlier releases committed, as the
    state before it (``extra``, as this release or an earlier one left it) says them.

    >>> recorded({}, 0)["release"]
    {'rotsink': '0.2.0', 'batch': 0, 'since': 0, 'spans': []}
    >>> recorded({}, 9)["release"]  # an output 0.1.0 began
    {'rotsink': '0.2.0', 'batch': 9, 'since': 9, 'spans': [[None, None, 8]]}
    >>> m = recorded(recorded(recorded({}, 9), 10), 11)  # 0.2.0 went on from 0.1.0's 0-8
    >>> recorded(m, 14)["release"]  # then 0.1.0 wrote 12-13 (copying the mark), 0.2.0 14
    {'rotsink': '0.2.0', 'batch': 14, 'since': 14, 'spans': [[None, 12, 13], ['0.2.0', 9, \
11], [None, None, 8]]}
    """
    mark = extra.get(RELEASE_KEY)
    since: int | None = batch_id
    if not isinstance(mark, dict):  # none recorded: a release before 0.2.0 began the output
        spans = [] if batch_id == 0 else [[None, None, batch_id - 1]]
    else:
        name, through = mark.get("rotsink"), int(mark.get("batch", batch_id - 1))
        since, spans = mark.get("since"), list(mark.get("spans", []))
        if name != RELEASE or through < batch_id - 1:  # another release's commits between
            gap = [[None, through + 1, batch_id - 1]] if through < batch_id - 1 else []
            spans = (gap + [[name, since, through]] + spans)[:SPANS_KEPT]
            since = batch_id
    return {**extra, RELEASE_KEY: {"rotsink": RELEASE, "batch": batch_id, "since": since,
                                   "spans": spans}}


def writer_line(extra: dict[str, Any], batch_id: int) -> str:
    """Which releases committed the output up to batch ``batch_id``, as ``rotsink inspect``
    says, newest first.

    >>> writer_line(recorded({}, 0), 7)
    'written by: rotsink 0.2.0 up to batch 0, batches 1-7 by an earlier release'
    >>> writer_line({"release": {"rotsink": "0.2.0", "batch": 7}}, 7)
    'written by: rotsink 0.2.0'
    >>> writer_line(recorded(recorded(recorded(recorded({}, 9), 10), 11), 14), 14)
    'written by: rotsink 0.2.0 since batch 14; batches 12-13 by an earlier release; 9-11 by \
rotsink 0.2.0; up to 8 by an earlier release'
    >>> writer_line({}, 3)
    'written by: a release before 0.2.0 (none recorded)'
    """
    mark = extra.get(RELEASE_KEY)
    if not isinstance(mark, dict):
        return "written by: a release before 0.2.0 (none recorded)"
    name, through = mark.get("rotsink", "?"), int(mark.get("batch", batch_id))
    since, spans = mark.get("since"), mark.get("spans", [])
    if through >= batch_id:
        line = f"written by: rotsink {name}"
        if spans:
            line += f" since batch {since}"
    else:
        line = (f"written by: rotsink {name} up to batch {through}, batch"
                f"{'' if through + 1 == batch_id else 'es'} {_batches(through + 1, batch_id)} "
                f"by {EARLIER}")
    described = [f"{_batches(first, last)} by {'rotsink ' + who if who else EARLIER}"
                 for who, first, last in spans]
    if described:
        line += "; batches " + "; ".join(described)
    return line


def _batches(first: int | None, last: int) -> str:
    if first is None:
        return f"up to {last}"
    return f"{first}" if first == last else f"{first}-{last}"
