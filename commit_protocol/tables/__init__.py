"""Tables that follow the log: rotsink's finalized files committed into a Delta Lake or an
Apache Iceberg table, exactly once (``table.format``; DESIGN 4.11).

rotsink's own log stays the commit point: batch N is committed when ``_spark_metadata/N``
exists. A table is a second log that follows it (:mod:`commit_protocol.tables.follow`): after
the log file of batch N, one table commit adds the files batch N finalized, carrying N (a
Delta ``txn``, an Iceberg snapshot summary and table property) so that a table that already
holds N is recognised and left alone. A driver killed between the two commit points leaves a
table one batch behind, which the next commit, the next start of the query or ``rotsink
verify --repair`` brings up to date from rotsink's log, before anything else.

A table format is one object (:class:`TableFormat`), found by its ``table.format`` name in
one registry (:data:`TABLE_FORMATS`: the name and the module defining ``FORMAT``, imported
when the format is first named, as fsspec's ``known_implementations`` are). The object
carries everything about the format: the library it needs and the extra that installs it,
the sink formats it lists, the ``table.*`` options it takes and how it checks them, the
:class:`Table` it opens on an output (every table library call behind that small
interface), and how the demo reads the table back. The options are parsed into a
``SinkConfig`` holding the object; from then on callers hold the object, never the name,
and nothing else in rotsink branches on a table format. The name alone is what a committed
state records (:func:`recorded_table` reads it back). Adding a format (Hudi, say) is one
folder (``tables/hudi/``, its ``format`` module defining ``FORMAT``) and one line in
:data:`TABLE_FORMATS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from commit_protocol.vocabulary.errors import OptionError
from commit_protocol.vocabulary.partition_terms import PartitionTerm, refuse_transforms

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from commit_protocol.records.config import SinkConfig
    from commit_protocol.records.messages import TaskReport
    from commit_protocol.storage import Storage


# The keys under which a committed state records the table that follows the log and its
# options (so that ``rotsink verify`` finds it): secrets only as references (env:, file:)
TABLE_KEY, TABLE_OPTIONS_KEY = "table", "table_options"
# ... and the zone its timestamp partition directories are named in (Spark's session zone, as
# the batch's tasks found it), which a table recording instants needs to read them back
PARTITION_ZONE_KEY = "partition_time_zone"
SECRET_WORDS = ("secret", "credential", "token", "password")


def recorded_options(options: Mapping[str, str]) -> dict[str, str]:
    """The table options a state may record: every one but a literal secret.

    >>> recorded_options({"catalog.uri": "u", "catalog.token": "env:T", "storage.SECRET": "x"})
    {'catalog.uri': 'u', 'catalog.token': 'env:T'}
    """
    return {key: value for key, value in options.items()
            if not any(word in key.lower() for word in SECRET_WORDS)
            or value.startswith(("env:", "file:"))}


@dataclass(frozen=True)
class TableFile:
    """A finalized part file as a table lists it: its path below the output's root as it
    is on storage (partition values escaped as Spark escapes them), its size, its commit
    time, the directory of its partition values and its Parquet footer (statistics)."""

    path: str
    size: int
    mtime_ms: int
    footer: pq.FileMetaData = field(compare=False, repr=False)

    @property
    def directory(self) -> str:
        """``day=2024-01-01`` for ``day=2024-01-01/part-....parquet`` ("" at the root)."""
        return self.path.rpartition("/")[0]


@dataclass(frozen=True)
class TableCommit:
    """One table commit: the files rotsink's batch ``batch_id`` finalized, with the schema
    and partition columns of the output as of that batch, made by writer ``owner``."""

    batch_id: int
    owner: str
    schema_json: str
    partition_by: tuple[str, ...]
    files: tuple[TableFile, ...]
    partition_terms: tuple[PartitionTerm, ...] = ()  # hidden partitioning's, in order
    time_zone: str | None = None  # of timestamp partition directories (PARTITION_ZONE_KEY)


@dataclass(frozen=True)
class TableHealth:
    """What a table keeps of its history, for ``rotsink inspect`` and ``verify``: ``facts``
    (versions or snapshots, the oldest kept, metadata on storage, manifests, checkpoints)
    and ``warnings`` where something grows with every commit (a joined table nobody
    expires, metadata files never deleted)."""

    facts: list[str]
    warnings: list[str] = field(default_factory=list)


class Table(Protocol):
    """A table following one output path (runs on the driver, or in ``rotsink verify``)."""

    def committed_batch(self, owner: str, *, fresh: bool = True) -> int | None:
        """The newest rotsink batch of ``owner`` the table holds, read from the table now
        (``fresh``), or as this process last knew the table, which costs no request (a
        commit checks the table again before it commits); None when the table does not exist
        or ``owner`` never committed to it."""

    def check(self, *, owner: str | None, schema_json: str, partition_by: tuple[str, ...],
              partition_terms: tuple[PartitionTerm, ...] = (),
              planned_columns: bool = False) -> None:
        """Refuse (``TableError``, naming what differs) a table this output cannot follow:
        another writer's (``owner`` None: the output has no committed batch yet, so any
        existing table is another writer's), other partition columns (or ``partition_terms``:
        other transforms, a column a transform cannot take), or a schema that is
        not the output's (a table may lack columns a batch adds, never have others; but with
        ``planned_columns``, when only the log's schema is known, it may have the columns a
        batch planned since gave it: Iceberg's, :mod:`~commit_protocol.tables.iceberg.ids`)."""

    def commit(self, commit: TableCommit) -> int | None:
        """Make ``commit`` one table commit and return the table version it made, unless the
        table holds its batch already (checked on a fresh read, against zombies too): then
        None."""

    def version(self) -> int | None:
        """The table's current version, read now: a number every commit of data raises
        (Delta's version, the sequence number of Iceberg's current snapshot); None when
        there is no table yet."""

    def appends_since(self, version: int) -> set[int]:
        """The versions after ``version``, as :meth:`version` last read the table, that only
        appended a rotsink query's files (each below its own output): nothing for another
        output to follow. Empty where the table does not tell without more reads (Delta:
        this process knows its own commits apart)."""

    def files(self) -> dict[str, int]:
        """Every data file the table's current version lists, read now: its path below the
        output's root (a file elsewhere by its whole URI) -> size."""

    def row_deletes(self) -> int:
        """How many of the current version's data files have rows deleted in place (Delta's
        deletion vectors, Iceberg's delete files), which path readers cannot apply."""

    def health(self, *, owner: str, now_ms: int) -> TableHealth:
        """The table's age and what bounds its metadata (see :class:`TableHealth`)."""

    def maintain(self, *, owner: str, now_ms: int) -> None:
        """After this process's table commit of a batch: the clean-up that keeps the table's
        metadata bounded (Iceberg: expired snapshots and the manifests only they named;
        Delta's checkpoints and log clean-up run with its snapshot's refresh)."""


@dataclass(frozen=True)
class TableRead:
    """A table read back whole by its own library (the demo's check): what it is, in one
    line, and the ids of its rows."""

    description: str
    ids: list[int]


@dataclass(frozen=True)
class TableFormat:
    """One ``table.format``: see the package docstring. Frozen and picklable: a
    ``SinkConfig`` carries it to the executors."""

    name: str
    # the library the driver needs (its import name) and the extra that installs it
    library: str
    extra: str
    # what the format cannot take from the sink, checked when the query starts
    formats: tuple[str, ...] = ("parquet",)
    # the table.* options it takes (without "table."): whole keys, and prefixes of keys the
    # table library takes as they are
    option_keys: tuple[str, ...] = ()
    option_prefixes: tuple[str, ...] = ()

    def check_installed(self) -> None:
        """Refuse, when the query starts, a table whose library the driver lacks."""
        import importlib.util

        if importlib.util.find_spec(self.library) is None:
            raise OptionError(f"option table.format={self.name!r} needs the {self.library} "
                              "package in the driver's Python: pip install "
                              f"'rotsink[{self.extra}]'")

    def takes(self, key: str) -> bool:
        """Whether ``table.<key>`` is an option of this format (any case: Spark lower-cases
        the options it passes)."""
        return self.canonical(key) in self.option_keys or key.startswith(self.option_prefixes)

    def canonical(self, key: str) -> str:
        """``key`` as this format names it (``snapshotretention`` -> ``snapshotRetention``);
        a key under a prefix as given.

        >>> TableFormat("x", "lib", "x", option_keys=("snapshotRetention",)).canonical(
        ...     "snapshotretention")
        'snapshotRetention'
        """
        return next((k for k in self.option_keys if k.lower() == key.lower()), key)

    def check_options(self, config: SinkConfig) -> None:
        """Refuse, naming the option, what this format cannot take (driver, at start)."""
        for key, value in config.table_options.items():
            if not self.takes(key):
                taken = [f"table.{k}" for k in self.option_keys] + \
                    [f"table.{p}*" for p in self.option_prefixes]
                raise OptionError(f"option table.{key}={value!r} is not taken by "
                                  f"table.format={self.name} (it takes "
                                  f"{', '.join(taken) or 'no other table option'})")
        self.check_partitioning(config)

    def check_partitioning(self, config: SinkConfig) -> None:
        """Refuse partitionBy terms this format cannot partition by: by default an Iceberg
        transform (``days(ts)``), which only Iceberg tables have."""
        refuse_transforms(config.partition_terms, table_format=self.name)

    def open(self, storage: Storage, config: SinkConfig) -> Table:
        """The table that follows the output on ``storage`` (the library imported now)."""
        raise NotImplementedError

    def read_back(self, out: str) -> TableRead:
        """The local output ``out``'s table (made with no ``table.*`` option but the format),
        read whole by the format's library (``rotsink demo --table``)."""
        raise NotImplementedError

    def planned(self, storage: Storage, config: SinkConfig, schema_json: str) -> SinkConfig:
        """Driver, when a batch is planned: ``config`` as the batch's files are encoded, with
        what the table asks of them, read now: the Parquet field ids (Iceberg resolves a
        file's columns by id, the table given the batch's new columns first; Delta by name)
        and the NOT NULL columns, which the tasks check before writing a row. As given by
        default."""
        return config

    def widened(self, config: SinkConfig, schema_json: str) -> str:
        """Driver, for each micro-batch's writer: the stream's schema with the columns the
        table computes (Delta's generated ones) appended, as the output's; as given by default."""
        return schema_json

    def with_credentials(self, config: SinkConfig, schema_json: str) -> SinkConfig:
        """Driver, before it opens the output's storage: ``config`` with the storage
        credentials the table's catalog vends (Iceberg's REST catalogs); as given by default."""
        return config

    def joined_terms(self, storage: Storage, config: SinkConfig) -> tuple[PartitionTerm, ...]:
        """Driver, when the first batch of an output is planned: every partition term of its
        directories, partitionBy's; a format whose tables name partition fields apart from
        columns (Iceberg) gives a joined table's names, or its whole partitioning where
        partitionBy was not given."""
        return config.all_terms

    def owned_directories(self, config: SinkConfig) -> tuple[str, ...]:
        """Top-level directories below the output's root holding the table's own files (its
        metadata): ``rotsink verify`` leaves them to it. None by default (Delta's ``_delta_log``
        is hidden from every listing already)."""
        return ()

    def record(self, config: SinkConfig, reports: Iterable[TaskReport] = ()) -> dict[str, object]:
        """What a committed state records of the table (``SinkState.extra``), so that
        ``rotsink verify`` and a restart find it: the format's name and its options, secrets
        only as references; the zone the batch's tasks named timestamp partition directories
        in (:data:`PARTITION_ZONE_KEY`), kept from an earlier batch whose tasks had no row."""
        zones = {r.time_zone for r in reports if r is not None and r.time_zone}
        return {TABLE_KEY: self.name, TABLE_OPTIONS_KEY: recorded_options(config.table_options),
                **({PARTITION_ZONE_KEY: min(zones)} if zones else {})}


# table.format name -> the module defining its FORMAT
TABLE_FORMATS: dict[str, str] = {
    "delta": "commit_protocol.tables.delta.format",
    "iceberg": "commit_protocol.tables.iceberg.format",
}


def table_format_named(name: str) -> TableFormat:
    """The format named ``name`` (``table.format``, or what a state recorded)."""
    if name not in TABLE_FORMATS:
        raise OptionError(f"option table.format={name!r}: expected one of "
                          f"{', '.join(sorted(TABLE_FORMATS))}")
    found: TableFormat = importlib.import_module(TABLE_FORMATS[name]).FORMAT
    return found


def table_format_of(config: SinkConfig) -> TableFormat:
    """The format of the table that follows ``config``'s output (one is: ``table.format``)."""
    assert config.table_format is not None, "no table.format"
    return table_format_named(config.table_format)


def table_option_names() -> set[str]:
    """Every whole ``table.<key>`` option some format takes (the families under a prefix,
    ``table.catalog.<property>``, apart)."""
    return {f"table.{key}" for name in TABLE_FORMATS
            for key in table_format_named(name).option_keys}


def a_format_takes(key: str) -> bool:
    """Whether ``table.<key>`` is an option of any table format (a typo is none's)."""
    return any(table_format_named(name).takes(key) for name in TABLE_FORMATS)


def recorded_table(extra: Mapping[str, object]) -> tuple[TableFormat, dict[str, str]] | None:
    """The table format and options a committed state recorded (:meth:`TableFormat.record`);
    None for an output no table follows."""
    name = extra.get(TABLE_KEY)
    if name is None:
        return None
    options = extra.get(TABLE_OPTIONS_KEY) or {}
    assert isinstance(options, dict)
    return table_format_named(str(name)), {str(k): str(v) for k, v in options.items()}


def owner_of(query_id: str) -> str:
    """The table writer id of the query writing an output path (one per path for its life):
    Delta's ``txn`` application id, Iceberg's summary.

    >>> owner_of("5f0c")
    'rotsink-5f0c'
    """
    return f"rotsink-{query_id}"


def option_values(options: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The options under ``prefix`` (``catalog.`` of ``table.catalog.uri``), prefix removed."""
    return {k[len(prefix):]: v for k, v in options.items() if k.startswith(prefix)}


def same_uri(uri: str) -> str:
    """``uri`` as every writer's spelling of it compares: Spark's Iceberg writers name a local
    file ``file:/data/x`` (Hadoop's), pyiceberg and rotsink ``file:///data/x``; S3 as s3://.

    >>> same_uri("file:/data/out/a.parquet"), same_uri("file:///data/out/a.parquet")
    ('file:///data/out/a.parquet', 'file:///data/out/a.parquet')
    >>> same_uri("s3a://b/out/a.parquet")
    's3://b/out/a.parquet'
    """
    scheme, colon, rest = uri.partition(":")
    if not colon:
        return uri
    if scheme.lower() == "file":
        return "file:///" + rest.lstrip("/")
    if scheme.lower() in ("s3", "s3a", "s3n"):
        return "s3:" + rest
    return uri
