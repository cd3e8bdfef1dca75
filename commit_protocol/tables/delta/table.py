"""``table.format=delta``: the output's root is also a Delta Lake table, committed with delta-rs.

The table lives where Delta readers look for it, at the output's root (``_delta_log/`` beside
``_spark_metadata/``), and lists the finalized Parquet files where they are: a Delta table
may name any file below its root, so nothing is copied. Each table commit is one delta-rs
transaction of ``add`` actions (the file's path as it is on storage, its size, its partition
values as Spark spells them in the directory name, statistics from its footer:
:mod:`commit_protocol.tables.delta.stats`) with a ``txn`` action: application id
``rotsink-<query id>``, version the batch id, as Delta's own streaming sink records its
batches. A table without this writer's ``txn`` is another writer's: a new output joins it
(its features honoured or refused by name: :mod:`commit_protocol.tables.delta.features`),
and its files are followed into the output's log (:mod:`commit_protocol.tables.sharing`);
each commit's info also names the writer and the batch (``rotsinkOwner``, ``rotsinkBatch``); an
append says ``isBlindAppend`` (:func:`_properties`: what other writers' DELETE, UPDATE and
MERGE may then conflict with).

delta-rs accepts a repeated or lower ``txn`` version, and retries a commit that lost a race
on top of the winner: so every commit here is made with no retry (``max_commit_retries=0``:
at exactly the version read, +1) after reading the table's ``txn``, and a lost race reads
the table afresh and looks again -- a batch the table holds is never committed twice, by a
zombie driver either. Two concurrent creations would both succeed the same way; with no
retry, one fails. What a process knows of the table between its commits, and why a commit
then costs one request: :mod:`commit_protocol.tables.delta.snapshots`.

Added columns (``schema.evolution=addColumns``) take a commit of their own just before the
batch's files: delta-rs commits a wider schema only in an overwrite, which could drop files.
The table is then one metadata commit ahead of its files, which readers see as columns of
nulls; a crash in between is caught up like any other.

On S3 and Azure delta-rs makes each commit one ``PUT`` with ``If-None-Match: *`` (no locking
provider needed: its DynamoDB provider is gone since 1.x); the store must honour it, as S3,
MinIO, SeaweedFS and Azure do. Where the table is found: :mod:`delta_storage`.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from commit_protocol.metrics import count
from commit_protocol.storage import Storage
from commit_protocol.tables import (
    TableCommit,
    TableFile,
    TableHealth,
)
from commit_protocol.tables.delta.features import (
    check_table_features,
    generated_columns,
    required_columns,
)
from commit_protocol.tables.delta.generated import Generated
from commit_protocol.tables.delta.mapping import planned_ids
from commit_protocol.tables.delta.snapshots import Snapshot, forget, snapshot
from commit_protocol.tables.sharing import is_elsewhere
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import TableError
from commit_protocol.vocabulary.naming import parse_partition_dir
from commit_protocol.vocabulary.partition_terms import PartitionTerm
from commit_protocol.vocabulary.release import RELEASE

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from commit_protocol.tables.delta.names import CatalogNames

logger = logging.getLogger("rotsink.table")

_ATTEMPTS = 5  # reads and commits when other writers' commits (an OPTIMIZE) land between


class DeltaFollowedTable:
    """The Delta table of one output path (see the module's docstring)."""

    def __init__(self, uri: str, options: dict[str, str], storage: Storage,
                 names: CatalogNames | None = None) -> None:
        self.uri = uri
        self.options = options
        self.storage = storage
        self.names = names  # the catalog that keeps the table's name (table.identifier)

    # -- reading -------------------------------------------------------------------------
    def loaded(self, *, fresh: bool = True) -> DeltaTable | None:
        """The table at its newest version (``fresh``), or at the version this process last
        knew; None when there is none yet."""
        known = snapshot(self.uri, self.options, fresh=fresh)
        return None if known is None else known.ready()

    def committed_batch(self, owner: str, *, fresh: bool = True) -> int | None:
        """Not ``fresh``: as this process last knew the table (no request); a newer commit
        by another writer then fails the next commit, which reads the table again
        (:meth:`commit`)."""
        known = snapshot(self.uri, self.options, fresh=fresh)
        return None if known is None else known.mark(owner)

    def version(self) -> int | None:
        table = self.loaded()
        return None if table is None else table.version()

    def appends_since(self, version: int) -> set[int]:
        return set()  # a Delta table is one output's: its other rotsink writer is a zombie

    def files(self) -> dict[str, int]:
        table = self.loaded()
        if table is None:
            return {}
        actions = table.get_add_actions(flatten=True)
        # Delta's log holds paths as URIs, percent-encoded (grp=a%20b): the log's are decoded
        return {path if is_elsewhere(path) else unquote(path): size
                for path, size in zip(actions.column("path").to_pylist(),
                                      actions.column("size_bytes").to_pylist(), strict=True)}

    def health(self, *, owner: str, now_ms: int) -> TableHealth:
        from commit_protocol.tables.health import delta_health

        table = self.loaded()
        if table is None:
            return TableHealth(["no delta table yet"])
        return delta_health(self.storage, table)

    def maintain(self, *, owner: str, now_ms: int) -> None:
        """Nothing here: checkpoints (at the table's ``delta.checkpointInterval``, 100 by
        default) and the clean-up of log files past ``delta.logRetentionDuration`` (at each
        checkpoint and at least daily) run in the snapshot's refresh after each commit
        (:mod:`commit_protocol.tables.delta.snapshots`)."""

    def row_deletes(self) -> int:
        table = self.loaded(fresh=False)
        return 0 if table is None else sum(batch.num_rows for batch in table.deletion_vectors())

    def check(self, *, owner: str | None, schema_json: str, partition_by: tuple[str, ...],
              partition_terms: tuple[PartitionTerm, ...] = (),
              planned_columns: bool = False) -> None:
        # partition_terms: none but columns reach a Delta table (TableFormat.check_partitioning)
        # planned_columns: nothing to allow, Delta's columns come in the batch's table commit,
        # after its log file
        if self.names is not None:
            self.names.ensure(self.uri)
        known = snapshot(self.uri, self.options, fresh=True)
        if known is None:
            return
        table = known.ready()
        check_table_features(self.uri, table)
        partitions = list(table.metadata().partition_columns)
        if partitions != list(partition_by):
            raise TableError(f"{self.uri}: the Delta table is partitioned by {partitions}, "
                             f"the output by {list(partition_by)}: give partitionBy "
                             f"{', '.join(partitions) or 'nothing'} (or no partitionBy: the "
                             "output then takes the table's)")
        _check_columns(self.uri, json.loads(table.schema().to_json()), json.loads(schema_json))
        if owner is None or known.mark(owner) is None:
            logger.warning("Delta table %s exists (version %d, last written by %s): this "
                           "output joins it; the table's files are followed into the "
                           "output's log at its first batch", self.uri, table.version(),
                           _writer(table))

    def partition_columns(self) -> tuple[str, ...] | None:
        """The table's partition columns; None where there is no table yet."""
        table = self.loaded(fresh=False)
        return None if table is None else tuple(table.metadata().partition_columns)

    def generated_columns(self) -> tuple[Generated, ...]:
        """The table's generated columns (as this process last knew the table)."""
        table = self.loaded(fresh=False)
        return () if table is None else generated_columns(table)

    def mapped_ids(self, schema_json: str) -> tuple[tuple[str, int], ...]:
        """The files' field ids under the table's column mapping (as last known)."""
        return planned_ids(self.uri, self.loaded(fresh=False), schema_json)

    def required_columns(self) -> tuple[str, ...]:
        """The table's NOT NULL top-level columns (as this process last knew the table: a
        column's nullability changes only by a metadata commit the next commit reads)."""
        table = self.loaded(fresh=False)
        return () if table is None else required_columns(table)

    # -- committing ----------------------------------------------------------------------
    def commit(self, commit: TableCommit) -> int | None:
        """Read the mark (as last known, then afresh after a lost race), skip a batch the
        table holds, commit with no retry at exactly the next version."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        for attempt in range(_ATTEMPTS):
            known = snapshot(self.uri, self.options, fresh=attempt > 0)
            try:
                if known is None:
                    self._create(commit)
                    forget(self.uri, self.options)
                    return 0
                with known.lock:
                    held = known.mark(commit.owner)
                    if held is not None and held >= commit.batch_id:
                        return None
                    return self._append(known, commit)
            except CommitFailedError:
                count("tableCommitRetries-total")
                continue  # another commit landed first: read the table again
            except DeltaError as e:
                if known is None and "exist" in str(e).lower():
                    continue  # created meanwhile by another driver
                raise TableError(f"{self.uri}: the Delta commit of batch {commit.batch_id} "
                                 f"failed: {e}") from e
        raise TableError(f"{self.uri}: the Delta commit of batch {commit.batch_id} lost "
                         f"{_ATTEMPTS} races with other writers in a row; is another query "
                         "or a maintenance job committing to the table?")

    def _create(self, commit: TableCommit) -> None:
        from deltalake import Schema
        from deltalake.transaction import create_table_with_add_actions

        create_table_with_add_actions(
            self.uri, Schema.from_json(nullable(commit.schema_json)), _adds(commit),
            mode="error", partition_by=list(commit.partition_by),
            storage_options=self.options or None,
            commit_properties=_properties(commit, blind=False),  # it creates the table
            post_commithook_properties=_NO_HOOKS())

    def _append(self, known: Snapshot, commit: TableCommit) -> int:
        table = known.ready()
        added = _new_columns(json.loads(table.schema().to_json()),
                             json.loads(nullable(commit.schema_json)))
        if added:
            from deltalake import Field
            from deltalake.transaction import CommitProperties

            table.alter.add_columns([Field.from_json(json.dumps(f)) for f in added],
                                    commit_properties=CommitProperties(max_commit_retries=0),
                                    post_commithook_properties=_NO_HOOKS())
            failpoints.hit("table.after_schema")
            known.refresh()
        version = table.version() + 1
        table.create_write_transaction(_adds(commit), mode="append", schema=table.schema(),
                                       partition_by=list(commit.partition_by),
                                       commit_properties=_properties(commit),
                                       post_commithook_properties=_NO_HOOKS())
        known.committed(commit.owner, commit.batch_id, version)
        return version


def _NO_HOOKS() -> Any:
    """No checkpoint or log clean-up inside a commit: the snapshot's background refresh
    makes them (:mod:`commit_protocol.tables.delta.snapshots`)."""
    from deltalake.transaction import PostCommitHookProperties

    return PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


def _writer(table: DeltaTable) -> str:
    """Who made the table's newest commit, as its commit info says."""
    info = (table.history(1) or [{}])[0]
    owner = info.get("rotsinkOwner") or info.get("engineInfo") or "an unknown writer"
    return f"{owner} ({info.get('operation', 'an unknown operation')})"


def _properties(commit: TableCommit, *, blind: bool = True) -> Any:
    """The commit's info: its batch and writer, and (an append of new files that read
    nothing of the table) ``isBlindAppend``, as Delta's own streaming sink marks its appends:
    a DELETE, UPDATE or MERGE that read the table before this commit landed does not conflict
    with it where the table runs WriteSerializable (conflict checkers skip a winning commit's
    added files only when it says so). Under Serializable, the only level open-source Delta
    lets a table set and delta-rs's default, such a DELETE conflicts with the appended files
    its predicate may match (by their partition and statistics), and is run again; rotsink
    sets no isolation level (delta-spark refuses any but Serializable)."""
    from deltalake.transaction import CommitProperties, Transaction

    info: dict[str, Any] = {"rotsinkBatch": commit.batch_id, "rotsinkOwner": commit.owner,
                            "rotsinkRelease": RELEASE}
    if blind:
        info["isBlindAppend"] = True
    return CommitProperties(
        max_commit_retries=0, app_transactions=[Transaction(commit.owner, commit.batch_id)],
        custom_metadata=info)


def _adds(commit: TableCommit) -> list[Any]:
    from deltalake.transaction import AddAction

    # imported here, not with the module: parsing any table option (every query's planning)
    # imports this module, and pyarrow alone costs a fresh Python process about 250 ms
    from commit_protocol.tables.delta.stats import delta_stats

    instants = {f["name"] for f in json.loads(commit.schema_json)["fields"]
                if f["type"] == "timestamp" and f["name"] in commit.partition_by}
    return [AddAction(path=f.path, size=f.size,
                      partition_values=_partition_values(f, instants, commit.time_zone),
                      modification_time=f.mtime_ms, data_change=True,
                      stats=delta_stats(f.footer)) for f in commit.files]


def _partition_values(f: TableFile, instants: set[str],
                      zone: str | None) -> dict[str, str | None]:
    """Delta spells a partition value as Spark's cast to string, which is how Spark (and so
    rotsink) names the directory; null (and Spark's empty string) as JSON null. A timestamp
    (an instant: ``instants``) is named in the session's ``zone``, and Delta records it in
    UTC, as ISO 8601 with microseconds (``2026-12-01T18:00:00.000000Z``), what Delta's own
    writers record (``utcTimestampPartitionValues``)."""
    from commit_protocol.vocabulary.partition_values import utc_partition_value  # pyarrow

    values = parse_partition_dir(f.directory)
    for name in instants & set(values):
        text = values[name]
        if text is not None:
            values[name] = utc_partition_value(text, zone, where=f.path)
    return values


def nullable(schema_json: str) -> str:
    """The schema with every field, element and value nullable, as Delta's own writers
    store a stream's schema (``asNullable``): a restarted query may relax nullability.

    >>> json.loads(nullable('{"type":"struct","fields":[{"name":"a","type":"long",'
    ...                     '"nullable":false,"metadata":{}}]}'))["fields"][0]["nullable"]
    True
    """
    def relaxed(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: True if k in ("nullable", "containsNull", "valueContainsNull")
                    else relaxed(v) for k, v in node.items()}
        if isinstance(node, list):
            return [relaxed(v) for v in node]
        return node
    return json.dumps(relaxed(json.loads(schema_json)))


def _new_columns(table: dict[str, Any], output: dict[str, Any]) -> list[dict[str, Any]]:
    """Top-level fields of the output's schema that the table lacks."""
    have = {f["name"] for f in table["fields"]}
    return [f for f in output["fields"] if f["name"] not in have]


def _check_columns(uri: str, table: dict[str, Any], output: dict[str, Any]) -> None:
    """The table's columns must be the output's (same types; the output may have more,
    which its next commit adds, and fewer where the table's are nullable: readers see
    nulls in them, as Delta's own writers leave them)."""
    def types(schema: dict[str, Any]) -> dict[str, str]:  # nullability aside
        return {f["name"]: json.dumps(f["type"], sort_keys=True)
                for f in json.loads(nullable(json.dumps(schema)))["fields"]}

    ours, theirs = types(output), types(table)
    for f in table["fields"]:
        if f["name"] not in ours and not f.get("nullable", True):
            raise TableError(f"{uri}: the Delta table has a NOT NULL column {f['name']!r} "
                             f"the output does not (output columns: {sorted(ours)})")
        if f["name"] in ours and theirs[f["name"]] != ours[f["name"]]:
            raise TableError(f"{uri}: column {f['name']!r} is {json.dumps(f['type'])} in the "
                             f"Delta table, {ours[f['name']]} in the output")
