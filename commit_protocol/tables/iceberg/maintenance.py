"""An Iceberg table that stays flat for years: what rotsink's tables keep of their history,
for how long, and the clean-up rotsink runs after its commits (DESIGN 4.13, 4.14).

An Iceberg commit writes a new ``metadata.json`` holding every snapshot the table keeps, and a
fast append adds a manifest per commit: a table committed once a minute and never maintained
grows by a metadata file, a snapshot and a manifest a minute, and each commit reads and
writes all of it (measured: 600 commits, 133 MB of metadata, batches 60% slower). Iceberg's
own mechanisms keep it bounded, and every writer honours them:

- **metadata files**: ``write.metadata.delete-after-commit.enabled`` with
  ``write.metadata.previous-versions-max`` (10, not Iceberg's 100): each commit deletes the
  ``metadata.json`` files that drop out of the metadata log (pyiceberg does so after its
  commits). Each holds every snapshot kept, about 5 MB at the 5-day plateau of a commit a
  minute, so 100 of them would be half a gigabyte that no reader needs: time travel and
  incremental reads walk the snapshots of the current one;
- **manifests**: ``commit.manifest-merge.enabled`` (Iceberg's Java API merges by default,
  Flink's and Kafka Connect's sinks with it): an append merges the snapshot's small manifests
  once ``commit.manifest.min-count-to-merge`` (100) of them are there; rotsink appends that
  way whenever the table says so;
- **snapshots**: expired by age, as the table's ``history.expire.max-snapshot-age-ms`` and
  ``history.expire.min-snapshots-to-keep`` say (Iceberg's defaults, 5 days and 1), or as the
  option ``table.snapshotRetention`` says (a duration, ``off``). After a commit, once
  :data:`EXPIRE_AT_ONCE` snapshots are due (or one is twice the age), rotsink commits their
  removal, then deletes the manifest lists and manifests that only they referenced
  (pyiceberg's expiry edits metadata only). Data files are never deleted here: rotsink's log
  may list a file the table no longer does until its next compaction, and the files others
  removed are their writers' (or ``remove_orphan_files``') to delete. Marks are table
  properties, which expiry keeps.

Deletes, updates and merges of other writers validate against concurrent appends under
Iceberg's default ``serializable`` isolation, so a DELETE that read the table before a
rotsink commit would fail after it: the tables rotsink creates ask for ``snapshot`` isolation
(``write.{delete,update,merge}.isolation-level``), under which they land, deleting the rows
of the snapshot they read, as under Delta's WriteSerializable.

Tables rotsink creates get all of this (and a table an earlier rotsink created gets the
properties it lacks at its next commit: :func:`missing_properties`); a table rotsink joined
keeps its own settings, and is expired only when ``table.snapshotRetention`` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from commit_protocol.tables.iceberg.transaction import expire_snapshots
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import OptionError

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

logger = logging.getLogger("rotsink.table")

ISOLATION = {f"write.{change}.isolation-level": "snapshot"
             for change in ("delete", "update", "merge")}
BOUNDED_METADATA = {"write.metadata.delete-after-commit.enabled": "true",
                    "write.metadata.previous-versions-max": "10",
                    "commit.manifest-merge.enabled": "true"}
MERGE_KEY = "commit.manifest-merge.enabled"
MAX_AGE_KEY = "history.expire.max-snapshot-age-ms"
MIN_KEEP_KEY = "history.expire.min-snapshots-to-keep"
DEFAULT_MAX_AGE_MS = 5 * 24 * 3600 * 1000  # Iceberg's defaults
DEFAULT_MIN_KEEP = 1
# who created the table: the tables rotsink made get its settings, joined ones keep theirs
CREATED_BY = "rotsink.created-by"
# Snapshots due before an expiry runs: each expiry is a metadata commit of its own
EXPIRE_AT_ONCE = 20
RETENTION = "snapshotRetention"  # table.snapshotRetention: table | off | a duration
# Manifest list path -> the manifests it names (immutable files), for the table's snapshots
# as the last expiry saw them: bounded by the snapshots the retention keeps (each expiry drops
# the lists of snapshots gone, whoever expired them).
_MANIFESTS: dict[str, frozenset[str]] = {}


def retention_option(options: Mapping[str, str]) -> int | str | None:
    """``table.snapshotRetention``: ``table`` (the table's ``history.expire.*``), ``off``,
    or a duration (milliseconds); None when not given.

    >>> retention_option({}), retention_option({RETENTION: "OFF"})
    (None, 'off')
    >>> retention_option({RETENTION: "2 days"})
    172800000
    """
    from commit_protocol.vocabulary.durations import parse_duration_ms

    given = options.get(RETENTION)
    if given is None:
        return None
    if given.strip().lower() in ("table", "off"):
        return given.strip().lower()
    age = parse_duration_ms(f"table.{RETENTION}", given)
    if age <= 0:
        raise OptionError(f"option table.{RETENTION}={given!r}: expected a duration above 0, "
                          "'table' (the table's history.expire.* properties) or 'off'")
    return age


def created_properties(owner: str) -> dict[str, str]:
    """What a table rotsink creates asks of every writer (with copy-on-write, elsewhere)."""
    return {**ISOLATION, **BOUNDED_METADATA, CREATED_BY: owner}


def created_by(table: IcebergTable, owner: str) -> bool:
    """Whether ``owner`` created ``table``: its property, or (a table an earlier rotsink made,
    before the property) its first snapshot's summary names ``owner``."""
    properties = table.properties
    if CREATED_BY in properties:
        return properties[CREATED_BY] == owner
    snapshots = table.snapshots()
    first = min(snapshots, key=lambda s: s.sequence_number or 0) if snapshots else None
    return first is not None and first.parent_snapshot_id is None and \
        first.summary is not None and \
        first.summary.additional_properties.get("rotsink.owner") == owner


def missing_properties(table: IcebergTable, owner: str) -> dict[str, str]:
    """The settings a table ``owner`` created lacks (made by an earlier rotsink): set at its
    next commit; a value anyone set is kept. None for a table rotsink joined."""
    if not created_by(table, owner):
        return {}
    wanted = created_properties(owner)
    return {k: v for k, v in wanted.items() if k not in table.properties}


@dataclass(frozen=True)
class ExpiryPolicy:
    """Snapshots older than ``max_age_ms`` are expired, but the ``min_keep`` newest;
    ``max_age_ms`` None: never."""

    max_age_ms: int | None
    min_keep: int = DEFAULT_MIN_KEEP

    @classmethod
    def of(cls, properties: Mapping[str, str], option: int | str | None,
           *, ours: bool) -> ExpiryPolicy:
        """``option``: ``table.snapshotRetention`` parsed (milliseconds, ``"off"``,
        ``"table"``, or None when not given). A table rotsink joined is expired only when the
        option is given.

        >>> ExpiryPolicy.of({}, None, ours=True).max_age_ms == DEFAULT_MAX_AGE_MS
        True
        >>> ExpiryPolicy.of({}, None, ours=False).max_age_ms is None
        True
        >>> ExpiryPolicy.of({MAX_AGE_KEY: "60000"}, "table", ours=False)
        ExpiryPolicy(max_age_ms=60000, min_keep=1)
        >>> ExpiryPolicy.of({MAX_AGE_KEY: "60000"}, 1000, ours=True).max_age_ms
        1000
        """
        keep = int(properties.get(MIN_KEEP_KEY, DEFAULT_MIN_KEEP))
        if option == "off" or (option is None and not ours):
            return cls(None, keep)
        if isinstance(option, int):
            return cls(option, keep)
        return cls(int(properties.get(MAX_AGE_KEY, DEFAULT_MAX_AGE_MS)), keep)

    def due(self, table: IcebergTable, now_ms: int) -> list[int]:
        """The snapshots to expire now: older than the age, beyond the newest ``min_keep``,
        no branch's or tag's head; none until :data:`EXPIRE_AT_ONCE` are due or one is
        twice the age (an expiry is a metadata commit: not one per batch)."""
        if self.max_age_ms is None:
            return []
        heads = {ref.snapshot_id for ref in table.metadata.refs.values()}
        newest_first = sorted(table.snapshots(), key=lambda s: -s.timestamp_ms)
        old = [s for s in newest_first[self.min_keep:]
               if s.timestamp_ms < now_ms - self.max_age_ms and s.snapshot_id not in heads]
        overdue = any(s.timestamp_ms < now_ms - 2 * self.max_age_ms for s in old)
        return [s.snapshot_id for s in old] if len(old) >= EXPIRE_AT_ONCE or overdue else []


def expire(table: IcebergTable, due: list[int]) -> int:
    """Expire the snapshots ``due`` of ``table`` (one metadata commit), then delete the
    manifest lists and manifests only they referenced; returns how many files it deleted.
    A crash between the two (``table.after_expire``) leaves those files unreferenced, for
    the table's orphan removal: nothing a snapshot kept is touched."""
    from pyiceberg.exceptions import CommitFailedException

    failpoints.hit("table.before_expire")
    before = table.metadata
    unreferenced = _only_in(table, before.snapshots, set(due))
    try:
        expire_snapshots(table).by_ids(due).commit()
    except CommitFailedException:
        return 0  # another writer committed meanwhile: the next commit's expiry tries again
    failpoints.hit("table.after_expire")
    for path in unreferenced:
        table.io.delete(path)
    for snapshot in before.snapshots:
        if snapshot.snapshot_id in due:
            _MANIFESTS.pop(snapshot.manifest_list, None)
    logger.info("table iceberg: expired %d snapshot(s), deleted %d metadata file(s) only they "
                "referenced", len(due), len(unreferenced))
    return len(unreferenced)


def merged_away(table: IcebergTable, append: Any) -> list[str]:
    """The manifests ``append``, just committed on ``table``, wrote that its snapshot does not
    name, to delete after the commit (:meth:`IcebergFollowedTable.maintain`).

    A merging append writes the batch's manifest, then merges it with the snapshot's small
    manifests into a new one, so the first is named by no snapshot; Iceberg's Java writers
    delete it after their commit, pyiceberg (0.12) leaves it on storage, where no expiry
    finds it: one file every ``commit.manifest.min-count-to-merge`` commits, for good
    (measured: 600 of them after 65,000 commits). pyiceberg keeps the paths it wrote in
    ``_written_manifests``; without that attribute nothing is deleted. The snapshot read is
    the one the expiry reads later, so it is remembered for it."""
    written = list(getattr(append, "_written_manifests", ()))
    snapshot = table.current_snapshot()
    if len(written) < 2 or snapshot is None \
            or str(getattr(append, "commit_uuid", "")) not in snapshot.manifest_list:
        return []  # nothing merged (the one manifest written is the snapshot's), or not ours
    named = _manifests(table, snapshot)
    return [path for path in written if path not in named]


def _only_in(table: IcebergTable, snapshots: Iterable[Any], due: set[int]) -> list[str]:
    """Manifest lists of the snapshots ``due``, and manifests no other snapshot names."""
    kept: set[str] = set()
    going: set[str] = set()
    lists: list[str] = []
    snapshots = list(snapshots)
    live = {snapshot.manifest_list for snapshot in snapshots}
    for gone in [path for path in _MANIFESTS if path not in live]:
        del _MANIFESTS[gone]  # expired by another writer, or another table's (one process)
    for snapshot in snapshots:
        named = _manifests(table, snapshot)
        if snapshot.snapshot_id in due:
            going |= named
            lists.append(snapshot.manifest_list)
        else:
            kept |= named
    return sorted(lists) + sorted(going - kept)


def _manifests(table: IcebergTable, snapshot: Any) -> frozenset[str]:
    found = _MANIFESTS.get(snapshot.manifest_list)
    if found is None:
        found = frozenset(m.manifest_path for m in snapshot.manifests(table.io))
        _MANIFESTS[snapshot.manifest_list] = found
    return found
