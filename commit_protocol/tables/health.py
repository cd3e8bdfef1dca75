"""A table's age, as ``rotsink inspect`` and ``verify`` show it: what it keeps of its history
and what bounds it, from the table's own metadata and a listing of its metadata directory
(:class:`~commit_protocol.tables.TableHealth`).

Delta: versions in the log, the oldest still there, the last checkpoint (a table opens from
it), the log's files and bytes, and ``delta.logRetentionDuration`` (30 days by default), by
which the log is cleaned at checkpoints and at least daily. Iceberg: snapshots and the
oldest, the expiry in effect (:mod:`commit_protocol.tables.iceberg.maintenance`), manifests
in the current snapshot, metadata files kept, and for a table at the output's root its
``metadata/`` on storage.
"""

from __future__ import annotations

import json
from typing import Any

from commit_protocol.storage import Storage
from commit_protocol.tables import TableHealth

CHECKPOINT_WARN_VERSIONS = 1000  # versions since the last checkpoint worth a warning
MANIFESTS_WARN = 200  # manifests in one snapshot worth a warning (merging merges at 100)
DAY_MS = 86_400_000


def age(ms: float) -> str:
    """``90061000`` -> ``'1.0 days'``; a short span in hours or minutes.

    >>> age(90_061_000), age(7_200_000), age(90_000)
    ('1.0 days', '2.0 hours', '1.5 minutes')
    """
    if ms >= DAY_MS:
        return f"{ms / DAY_MS:.1f} days"
    if ms >= 3_600_000:
        return f"{ms / 3_600_000:.1f} hours"
    return f"{ms / 60_000:.1f} minutes"


def listed(storage: Storage, directory: str) -> tuple[int, int]:
    """Files and bytes below ``directory`` of the output (0, 0 where there is none)."""
    files = size = 0
    for f in storage.walk(directory):
        files += 1
        size += f.size
    return files, size


def delta_health(storage: Storage, table: Any) -> TableHealth:
    """``table``: delta-rs's, at its newest version."""
    version = table.version()
    log_files, log_bytes = listed(storage, "_delta_log")
    versions = sorted(int(f.path.rsplit("/", 1)[-1].split(".")[0])
                      for f in storage.list("_delta_log") if f.path.endswith(".json"))
    checkpoint = _last_checkpoint(storage)
    retention = table.metadata().configuration.get("delta.logRetentionDuration",
                                                   "interval 30 days (Delta's default)")
    facts = [f"delta table at version {version}: {_delta_rows(table)} row(s); the log holds "
             f"versions "
             f"{versions[0] if versions else version} to {version} ({log_files} files, "
             f"{log_bytes / 1e6:,.2f} MB); last checkpoint at version "
             f"{'none' if checkpoint is None else checkpoint}; log retention {retention}"]
    warnings = []
    since = version - (checkpoint if checkpoint is not None else -1)
    if since > CHECKPOINT_WARN_VERSIONS:
        warnings.append(f"no checkpoint for {since} versions: opening the table replays "
                        "every commit since (rotsink checkpoints at the table's "
                        "delta.checkpointInterval, 100 by default)")
    return TableHealth(facts, warnings)


def _delta_rows(table: Any) -> str:
    """The rows of the table's version, from its files' statistics less its deletion
    vectors' rows ("unknown" where a file has no statistics)."""
    actions = table.get_add_actions(flatten=True)
    names = actions.schema.names
    if "num_records" not in names:
        return "unknown"
    records = actions.column("num_records").to_pylist()
    if any(n is None for n in records):
        return "unknown"
    deleted = actions.column("deletionVector.cardinality").to_pylist() \
        if "deletionVector.cardinality" in names else []
    return f"{sum(records) - sum(n or 0 for n in deleted):,}"


def _last_checkpoint(storage: Storage) -> int | None:
    try:
        data = storage.read("_delta_log/_last_checkpoint", 0, 1 << 16)
    except FileNotFoundError:
        return None
    return int(json.loads(data)["version"])


def iceberg_health(storage: Storage, table: Any, *, policy: Any, at_output: bool,
                   now_ms: int) -> TableHealth:
    """``table``: pyiceberg's; ``policy``: the snapshot expiry in effect."""
    from commit_protocol.tables.iceberg.maintenance import MERGE_KEY

    snapshots = table.snapshots()
    oldest = min((s.timestamp_ms for s in snapshots), default=now_ms)
    current = table.current_snapshot()
    manifests = 0 if current is None else len(current.manifests(table.io))
    kept = len(table.metadata.metadata_log) + 1
    properties = table.properties
    expiry = "never" if policy.max_age_ms is None else \
        f"after {age(policy.max_age_ms)}, keeping at least {policy.min_keep}"
    rows = "0" if current is None else _iceberg_rows(current)
    facts = [f"iceberg table: {rows} row(s); {len(snapshots)} snapshot(s), the oldest "
             f"{age(now_ms - oldest)} "
             f"old; snapshots expire {expiry}; {manifests} manifest(s) in the current "
             f"snapshot; {kept} metadata file(s) in its log"]
    if at_output:  # its metadata in <output>/metadata
        files, size = listed(storage, "metadata")
        facts[0] += f"; metadata/ on storage: {files} files, {size / 1e6:,.2f} MB"
    warnings = []
    if policy.max_age_ms is None:
        warnings.append("no snapshot expiry: the table keeps every snapshot, and every commit "
                        "reads and writes all of them (a table rotsink joined: set "
                        "table.snapshotRetention, or expire snapshots with the table's own "
                        "maintenance)")
    if properties.get("write.metadata.delete-after-commit.enabled", "false") != "true":
        warnings.append("write.metadata.delete-after-commit.enabled is off: every commit "
                        "leaves a metadata file behind")
    if manifests > MANIFESTS_WARN and properties.get(MERGE_KEY, "false") != "true":
        warnings.append(f"{manifests} manifests in one snapshot and {MERGE_KEY} off: a scan "
                        "plans each of them; merge them (rewrite_manifests) or enable merging")
    return TableHealth(facts, warnings)


def _iceberg_rows(snapshot: Any) -> str:
    """The rows of ``snapshot`` from its summary, and its row-level deletes where it has
    some (an equality delete removes as many rows as match it: no sum says how many)."""
    totals = {} if snapshot.summary is None else snapshot.summary.additional_properties
    if "total-records" not in totals:
        return "unknown"
    records = f"{int(totals['total-records']):,}"
    deletes = int(totals.get("total-position-deletes", 0)) + \
        int(totals.get("total-equality-deletes", 0))
    return f"{records} (and {deletes:,} row delete(s) on them)" if deletes else records
