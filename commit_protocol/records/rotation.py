"""The driver's rotation rules, applied at every commit to every in-progress file."""

from __future__ import annotations

from commit_protocol.records.config import RotationPolicy
from commit_protocol.records.state import InProgressFile

# Roll reasons beside the limits roll_reason names, as the commit report prints them
IDLE = "idle"  # the roll reason of rotation.rollOnIdle
SCHEMA = "schema"  # the roll reason of a schema change (schema.evolution)


def roll_reason(f: InProgressFile, policy: RotationPolicy, now_ms: int) -> str | None:
    """The first limit ``f`` has reached, or None if it stays open.

    >>> p = RotationPolicy(max_batches=2, interval_ms=0, inactivity_ms=0)
    >>> f = InProgressFile(0, "", "part", ".t", 10, 5, 2, 0, 0)
    >>> roll_reason(f, p, now_ms=1)
    'maxBatches'
    """
    if policy.max_batches and f.batches >= policy.max_batches:
        return "maxBatches"
    if policy.max_bytes and f.size >= policy.max_bytes:
        return "maxBytes"
    if policy.max_records and f.records >= policy.max_records:
        return "maxRecords"
    if policy.interval_ms and now_ms - f.opened_ms >= policy.interval_ms:
        return "interval"
    if policy.inactivity_ms and now_ms - f.last_append_ms >= policy.inactivity_ms:
        return "inactivity"
    return None
