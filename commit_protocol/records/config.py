"""The validated sink configuration: built once on the driver, pickled to the executors."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.formats import FORMATS
from commit_protocol.vocabulary.partition_terms import PartitionTerm, identity_columns


@dataclass(frozen=True)
class RotationPolicy:
    """When a part file rolls; 0 disables a limit.

    Size and record limits apply inside a task; batch count, age and inactivity are checked
    by the driver at every commit for every in-progress file.
    """

    max_bytes: int = 128 * 1024 * 1024
    max_records: int = 0
    max_batches: int = 0
    interval_ms: int = 60_000
    inactivity_ms: int = 60_000
    # An idle micro-batch (no row for the sink in any task: a heartbeat's) rolls every file.
    roll_on_idle: bool = False


@dataclass(frozen=True)
class SinkConfig:
    """Everything a writer, committer or reader needs to know about one output path."""

    path: str
    format: str = "jsonl"
    compression: str = "none"
    compression_level: int | None = None
    rotation: RotationPolicy = field(default_factory=RotationPolicy)
    partition_by: tuple[str, ...] = ()  # the columns the directories hold (Hive-style)
    # With an Iceberg transform among them (hidden partitioning: days(ts), bucket(16, id)):
    # every partitionBy term in order, naming the directory levels; empty otherwise, the
    # directories then being partition_by's
    partition_terms: tuple[PartitionTerm, ...] = ()
    # whether partitionBy was given (the option or .partitionBy): an output following a
    # table takes, without it, the partitioning of the table it joins, then its own
    partition_by_given: bool = True
    file_prefix: str = "part"
    file_suffix: str = ".jsonl"
    max_open_files: int = 100
    # Arrow bytes a Parquet file buffers before it writes them as one row group (Spark's
    # parquet.block.size is 128 MB too): row groups of one Arrow batch (10,000 rows) compress
    # worse and read slower. For ORC, the writer's stripe size (orc.stripeBytes).
    row_group_bytes: int = 128 * 1024 * 1024
    compact_interval: int = 10
    compact_interval_explicit: bool = False
    retention_ms: int | None = None
    # partition.commitDelay: write <dir>/_SUCCESS once a directory had no in-progress file
    # and no new row for this long (None: off)
    partition_commit_delay_ms: int | None = None
    cleanup_delay_ms: int = 600_000
    # feed.retention: the states of batches whose log files the clean-up deletes are kept
    # this long for change feeds that paused (commit_protocol.log.feed_states; None: off)
    feed_retention_ms: int | None = None
    fs_options: dict[str, str] = field(default_factory=dict, repr=False)  # credentials
    keys: KeyRefs | None = None  # references only: key bytes are resolved where used
    # schema.evolution: "none" (a changed schema is refused) or "addColumns"
    schema_evolution: str = "none"
    # commit.fsync: make a batch's bytes and names durable (fsync) before its commit point,
    # on storages with a page cache (local disks); object stores need nothing
    fsync: bool = True
    # table.format: the name of a table format (delta, iceberg) whose table follows the log;
    # commit_protocol.tables.table_format_of(config) is its object (a name here keeps the
    # records below the tables that use them). table.* options (catalog settings...) without
    # the prefix
    table_format: str | None = None
    table_options: dict[str, str] = field(default_factory=dict)
    # the Parquet field ids of the files' columns by path, decided at planning from the table
    # (Iceberg: commit_protocol.tables.iceberg.ids); empty: columns resolved by name
    field_ids: tuple[tuple[str, int], ...] = ()
    # the table's NOT NULL columns (Delta) or required fields (Iceberg), read at planning:
    # a task fails rather than write a null into one (commit_protocol.task.row_rules)
    required_columns: tuple[str, ...] = ()
    # the table's generated columns (Delta's), read at planning: (name, expression, type),
    # computed by the tasks where the stream lacks them (commit_protocol.tables.delta.generated)
    generated_columns: tuple[tuple[str, str, str], ...] = ()
    # the table's sort order (Iceberg's), read at planning: (column, transform, ascending,
    # nulls first) per key, and its id; a roll writes each finished file in it
    # (commit_protocol.task.sorting)
    sort_order: tuple[tuple[str, str, bool, bool], ...] = ()
    sort_order_id: int = 0
    # .queryName(...): names the query in rotsink's log lines and its log (`rotsink inspect`)
    query_name: str = ""
    # Spark's streaming metrics on: the driver directory the commits leave the query's
    # metrics in (commit_protocol.metrics), set by rotsink's start of the query
    metrics_mailbox: str | None = None
    # errors.mode=quarantine: the config of the output that rows this one refuses go to
    # (commit_protocol.task.quarantine), None with errors.mode=fail; errors.maxQuarantinedShare
    quarantine: SinkConfig | None = None
    max_quarantined_share: float | None = None
    # the columns this query gives wider than the path committed them, which the tasks cast
    # back, quarantining what does not fit: (name, committed Spark type), set at planning
    # (commit_protocol.records.schema_evolution.into_committed)
    committed_types: tuple[tuple[str, str], ...] = ()

    @property
    def all_terms(self) -> tuple[PartitionTerm, ...]:
        """Every partition term in order, identity columns as terms of their own."""
        return self.partition_terms or tuple(PartitionTerm(c, c) for c in self.partition_by)

    def laid_out(self, terms: tuple[PartitionTerm, ...]) -> SinkConfig:
        """This config partitioned by ``terms`` (a joined table's, or as committed)."""
        return replace(self, partition_by=identity_columns(terms),
                       partition_terms=terms if any(t.hidden for t in terms) else ())

    @property
    def directory_keys(self) -> tuple[str, ...]:
        """The keys of the partition directories' levels, in order (``day``; ``ts_day``,
        ``id_bucket`` under hidden partitioning)."""
        return tuple(t.name for t in self.partition_terms) or self.partition_by

    @property
    def encrypted(self) -> bool:
        return self.keys is not None and self.keys.write_ref is not None

    @property
    def is_bulk(self) -> bool:
        """Bulk formats (Parquet, ORC) stage their in-progress rows and are encoded at a roll."""
        return FORMATS[self.format].bulk
