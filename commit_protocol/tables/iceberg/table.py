"""``table.format=iceberg``: rotsink's finalized files as snapshots of an Apache Iceberg table,
through a catalog (:mod:`~commit_protocol.tables.iceberg.catalog`: an embedded SQLite catalog
beside the output by default, a REST catalog for production), committed with pyiceberg.

The table is ``table.identifier``. One rotsink creates lives at the output's root, its
metadata in ``metadata/`` (where path-based readers look;
:mod:`~commit_protocol.tables.iceberg.creation`); its data files are rotsink's
finalized files where they are, by absolute path, partitioned by identity on ``partitionBy``
(:mod:`~commit_protocol.tables.iceberg.files`), with the table's field ids
(:mod:`~commit_protocol.tables.iceberg.ids`). One snapshot per micro-batch that finalizes
files: an append (merging manifests where the table asks,
:mod:`~commit_protocol.tables.iceberg.maintenance`) with the batch in its summary and the
query's mark (:mod:`~commit_protocol.tables.iceberg.marks`) in the same transaction.
pyiceberg retries a commit that lost a race on top of the winner, which would commit a batch
twice: rotsink's transactions start from a table object that says no retries (in memory only:
other writers keep theirs), and the append's requirement (the main branch at the snapshot
read) makes the commit conditional on the mark read; a lost race reads the table again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from commit_protocol.metrics import count
from commit_protocol.records.config import SinkConfig
from commit_protocol.tables import TableCommit, TableHealth
from commit_protocol.tables.iceberg.catalog import (
    IDENTIFIER,
    OPEN_CATALOGS,
    below,
    catalog_name,
    catalog_properties,
    data_root,
    default_identifier,
    described,
    same_uri,
)
from commit_protocol.tables.iceberg.creation import DATA_PATH, WRITTEN_VERSION, create_table
from commit_protocol.tables.iceberg.evolution import differs, evolve, promotes
from commit_protocol.tables.iceberg.files import DATA_CONTENT, data_file, listed
from commit_protocol.tables.iceberg.maintenance import (
    MERGE_KEY,
    ExpiryPolicy,
    created_by,
    expire,
    merged_away,
    missing_properties,
    retention_option,
)
from commit_protocol.tables.iceberg.marks import (
    MARK,
    NUM_RETRIES,
    OWNER,
    mark,
    mark_key,
    rotsink_appends,
    without_retries,
    writers,
)
from commit_protocol.tables.iceberg.schema import iceberg_schema
from commit_protocol.tables.iceberg.specs import appending, output_spec, spelled
from commit_protocol.tables.iceberg.transaction import transaction
from commit_protocol.tables.iceberg.transforms import check_sources, terms_of
from commit_protocol.vocabulary.errors import TableError
from commit_protocol.vocabulary.partition_terms import PartitionTerm
from commit_protocol.vocabulary.release import RELEASE

logger = logging.getLogger("rotsink.table")

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table as IcebergTable

# Where an embedded catalog's table keeps its metadata: <location>/metadata, which path-based
# readers (ClickHouse's icebergLocal, DuckDB's iceberg_scan, Spark's path tables) read. An
# earlier rotsink put it under _iceberg/metadata (hidden): its next commit moves new versions.
METADATA_DIR = "metadata"
METADATA_PATH = "write.metadata.path"
LEGACY_METADATA_DIR = "_iceberg/metadata"
_ATTEMPTS = 5


class IcebergFollowedTable:
    """The Iceberg table of one output path (see the module's docstring)."""

    def __init__(self, root_uri: str, config: SinkConfig) -> None:
        self.root = data_root(root_uri)
        self.root_uri, self.fs_options = root_uri, config.fs_options
        self.options = config.table_options
        self.properties = catalog_properties(root_uri, config.table_options,
                                             config.fs_options)
        self.identifier = config.table_options.get(IDENTIFIER) or default_identifier(root_uri)
        self._catalog: Catalog | None = None
        self._read: IcebergTable | None = None  # as read by committed_batch, for the commit
        self._committed: IcebergTable | None = None  # as this process's last commit left it
        self._merged_away: list[str] = []  # manifests its commits wrote that no snapshot names
        self._spec_said = False  # whether an evolved spec was logged (once a process)
        self.retention = retention_option(config.table_options)

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:  # this process's, kept across commits (OPEN_CATALOGS)
            self._catalog = OPEN_CATALOGS.get(catalog_name(self.options), self.properties)
        return self._catalog

    # -- reading -------------------------------------------------------------------------
    def loaded(self) -> IcebergTable | None:
        """The table as the catalog has it now; None when there is none. A table of another
        kind under the name (a Hive or Delta table in Glue or a metastore) is refused; a
        catalog that cannot answer is a TableError naming it, with the cause (tried again
        after the commit point, as any catalog error)."""
        from pyiceberg.exceptions import (
            NoSuchIcebergTableError,
            NoSuchNamespaceError,
            NoSuchPropertyException,
            NoSuchTableError,
        )

        where = f"{self.identifier} in the Iceberg catalog ({described(self.properties)})"
        try:
            return self.catalog.load_table(self.identifier)
        except TableError:
            raise  # the catalog could not be opened: said so already
        except (NoSuchIcebergTableError, NoSuchPropertyException, ValueError) as e:
            # pyiceberg's words for a table of another kind (Glue: no table_type ICEBERG)
            raise TableError(f"{where} is not an Iceberg table ({type(e).__name__}: {e}): "
                             "choose another table.identifier") from None
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        except Exception as e:  # down, refusing the credentials: the client's own words
            raise TableError(f"cannot load {where}: {type(e).__name__}: {e}") from e

    def committed_batch(self, owner: str, *, fresh: bool = True) -> int | None:
        """Read fresh (a catalog lookup), or not ``fresh``: from the table the version read
        kept, if any (the commit is conditional on the snapshot it starts from, so a newer
        one fails it and it reads again); the table read is kept for the commit that
        follows, which starts its transaction from it."""
        if fresh or self._read is None:
            self._read = self.loaded()
        return mark(self._read, owner)

    def version(self) -> int | None:
        """(The table read is kept for the table commit after the log file.)"""
        self._read = table = self.loaded()
        current = None if table is None else table.current_snapshot()
        return None if current is None else current.sequence_number

    def appends_since(self, version: int) -> set[int]:
        return set() if self._read is None else rotsink_appends(self._read, version)

    def files(self) -> dict[str, int]:
        current = listed(self.loaded())
        if current is None:
            return {}
        prefix = same_uri(self.root) + "/"
        return {below(path, prefix): size
                for path, size, content in zip(current.column("file_path").to_pylist(),
                                               current.column("file_size_in_bytes").to_pylist(),
                                               current.column("content").to_pylist(),
                                               strict=True)
                if content == DATA_CONTENT}

    def row_deletes(self) -> int:
        current = listed(self.loaded())
        contents = [] if current is None else current.column("content").to_pylist()
        return sum(content != DATA_CONTENT for content in contents)

    def check(self, *, owner: str | None, schema_json: str, partition_by: tuple[str, ...],
              partition_terms: tuple[PartitionTerm, ...] = (),
              planned_columns: bool = False) -> None:
        """An Iceberg table is shared through its catalog: a new output (``owner`` None) may
        join a table that exists (another rotsink query's, a backfill's), partitioned and
        typed as the output; an output with committed batches must find its own mark."""
        terms = spelled_terms(partition_terms, partition_by)
        check_sources(terms, iceberg_schema(schema_json))
        table = self.loaded()
        if table is None:
            return
        if table.format_version > WRITTEN_VERSION:  # else each table commit would fail
            raise TableError(f"Iceberg table {self.identifier} is format version "
                             f"{table.format_version}, which pyiceberg (the library that commits "
                             f"it) cannot write yet (apache/iceberg-python#1551): join a table of "
                             f"version {WRITTEN_VERSION} or lower, or write to a new table")
        if output_spec(table.metadata, terms) is None:
            raise TableError(f"Iceberg table {self.identifier} is partitioned by "
                             f"{spelled(terms_of(table.spec(), table.schema()))}, the output "
                             f"by {spelled(terms)} (partitionBy), which no spec of the "
                             "table's was")
        ours = {f.name: f.field_type for f in iceberg_schema(schema_json).fields}
        for field in table.schema().fields:
            if field.name not in ours and planned_columns:
                continue  # added by a batch planned after the log's last (iceberg_ids)
            if field.name not in ours:
                raise TableError(f"Iceberg table {self.identifier} has a column "
                                 f"{field.name!r} the output does not ({sorted(ours)})")
            if field.field_type != ours[field.name] and not promotes(ours[field.name],
                                                                     field.field_type):
                raise TableError(f"Iceberg table {self.identifier}: column {field.name!r} is "
                                 f"{field.field_type} in the table, {ours[field.name]} in the "
                                 "output")
        holding = writers(table)
        if owner is None:
            logger.warning("Iceberg table %s exists (rotsink writers: %s): this output joins "
                           "it, one more writer of the table", self.identifier,
                           ", ".join(holding) or "none")
        elif mark(table, owner) is None:
            raise TableError(
                f"Iceberg table {self.identifier} holds no batch of this output's query "
                f"({owner}; its rotsink writers: {', '.join(holding) or 'none'}), though the "
                "output has committed batches: the table was replaced since; choose another "
                "table.identifier")

    # -- committing ----------------------------------------------------------------------
    def commit(self, commit: TableCommit) -> int | None:
        from pyiceberg.exceptions import (
            CommitFailedException,
            CommitStateUnknownException,
            TableAlreadyExistsError,
        )

        for _ in range(_ATTEMPTS):
            table, self._read = self._read or self.loaded(), None
            held = mark(table, commit.owner)
            if held is not None and held >= commit.batch_id:
                return None
            try:
                if table is None:
                    made = self._create(commit)
                else:  # the leftovers read before retries are turned off in memory
                    leftovers = self._leftovers(table)
                    made = self._append(without_retries(table), commit, leftovers=leftovers)
                current = made.current_snapshot()
                assert current is not None and current.sequence_number is not None
                self._committed = made  # for the clean-up after the commit (maintain)
                return current.sequence_number
            except (CommitFailedException, CommitStateUnknownException,
                    TableAlreadyExistsError):
                count("tableCommitRetries-total")
                continue  # another commit landed first, or might have: read again at once
        raise TableError(f"Iceberg table {self.identifier}: the commit of batch "
                         f"{commit.batch_id} lost {_ATTEMPTS} races with other writers in a "
                         "row; is another query or a maintenance job committing to it?")

    def health(self, *, owner: str, now_ms: int) -> TableHealth:
        from commit_protocol.tables.health import iceberg_health

        table = self.loaded()
        if table is None:
            return TableHealth(["no iceberg table yet"])
        policy = ExpiryPolicy.of(table.properties, self.retention, ours=created_by(table, owner))
        from commit_protocol.storage import open_storage

        at_output = same_uri(table.location()).rstrip("/") == same_uri(self.root)
        return iceberg_health(open_storage(self.root_uri, self.fs_options), table,
                              policy=policy, at_output=at_output, now_ms=now_ms)

    def maintain(self, *, owner: str, now_ms: int) -> None:
        """After this process's commit: expire the snapshots due (see
        :mod:`commit_protocol.tables.iceberg.maintenance`); nothing without a commit."""
        table, self._committed = self._committed, None
        written, self._merged_away = self._merged_away, []
        if table is None:
            return
        for path in written:  # this process wrote them, no snapshot names them: no reader
            table.io.delete(path)
        policy = ExpiryPolicy.of(table.properties, self.retention,
                                 ours=created_by(table, owner))
        due = policy.due(table, now_ms)
        if due:
            expire(table, due)

    def _create(self, commit: TableCommit) -> IcebergTable:
        return create_table(self.catalog, self.identifier, root=self.root,
                            options=self.options, commit=commit, append_to=self._append_to)

    def _leftovers(self, table: IcebergTable) -> tuple[str, ...]:
        """Table properties an earlier rotsink set that this one removes: retries off, which
        bound every writer of the table, and its metadata hidden under ``_iceberg/metadata``
        (new versions then go to ``metadata/``, where path-based readers look; the older
        ones stay where the table's history names them)."""
        properties = table.properties
        return tuple(key for key, value in ((NUM_RETRIES, "0"), (METADATA_PATH,
                     f"{self.root}/{LEGACY_METADATA_DIR}")) if properties.get(key) == value)

    def _append(self, table: IcebergTable, commit: TableCommit, *,
                leftovers: tuple[str, ...] = ()) -> IcebergTable:
        """Commit the batch on ``table``; returns it, brought to the version committed."""
        missing = missing_properties(table, commit.owner)  # a table an earlier rotsink made
        with transaction(table) as tx:
            if leftovers:
                tx.remove_properties(*leftovers)
            if DATA_PATH not in tx.table_metadata.properties:
                missing[DATA_PATH] = self.root
            if missing:
                tx.set_properties(missing)
            have, wanted = tx.table_metadata.schema(), iceberg_schema(commit.schema_json)
            if differs(have, wanted, identifier=self.identifier):
                with tx.update_schema() as update:
                    evolve(update, have, wanted, identifier=self.identifier)
            append = self._append_to(tx, commit)
        self._merged_away += merged_away(table, append)
        return table

    def _append_to(self, tx: Any, commit: TableCommit) -> Any:
        """Stage the mark and the batch's snapshot (an empty one for a batch without files,
        so that every commit is conditional on the snapshot read); returns the append."""
        tx.set_properties({mark_key(commit.owner): str(commit.batch_id)})
        if tx.table_metadata.properties.get(OWNER) == commit.owner:  # an earlier rotsink's mark
            tx.remove_properties(OWNER, MARK)
        summary = {MARK: str(commit.batch_id), OWNER: commit.owner, "rotsink.release": RELEASE}
        snapshot = tx.update_snapshot(snapshot_properties=summary)
        merging = tx.table_metadata.properties.get(MERGE_KEY, "false").lower() == "true"
        spec = self._output_spec(tx.table_metadata, commit) if commit.files else \
            tx.table_metadata.spec()
        with appending(snapshot, merging=merging, spec=spec) as append:
            for f in commit.files:
                append.append_data_file(data_file(self.root, tx.table_metadata, f, spec,
                                                  commit.time_zone))
        return append

    def _output_spec(self, metadata: Any, commit: TableCommit) -> Any:
        """The table's spec the output's files are laid out by (:mod:`.specs`), current or
        earlier; a table that never had it (replaced under the name) fails the commit."""
        terms = spelled_terms(commit.partition_terms, commit.partition_by)
        spec = output_spec(metadata, terms)
        if spec is None:
            raise TableError(
                f"Iceberg table {self.identifier} is partitioned by "
                f"{spelled(terms_of(metadata.spec(), metadata.schema()))} and never was by "
                f"{spelled(terms)}, this output's partitioning (partitionBy), so batch "
                f"{commit.batch_id}'s files are in the output's log but not in the table: "
                "was the table replaced? Write to a new path, or give the table that spec "
                "again and restart the query (its replay adds them)")
        if spec.spec_id != metadata.spec().spec_id and not self._spec_said:
            self._spec_said = True
            logger.warning(
                "Iceberg table %s is now partitioned by %s (spec %d, changed by another "
                "writer): this output adds its files under spec %d (%s), the one they are "
                "laid out by; Iceberg's readers read both. A new output path takes up the new "
                "spec", self.identifier, spelled(terms_of(metadata.spec(), metadata.schema())),
                metadata.spec().spec_id, spec.spec_id, spelled(terms))
        return spec


def spelled_terms(terms: tuple[PartitionTerm, ...],
                  columns: tuple[str, ...]) -> tuple[PartitionTerm, ...]:
    """An output's partition terms: its hidden partitioning's, or identity on its columns."""
    return terms or tuple(PartitionTerm(c, c) for c in columns)
