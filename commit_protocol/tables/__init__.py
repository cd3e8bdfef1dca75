"""Tables that follow the log: rotsink's finalized files committed into a Delta Lake or an
Apache Iceberg table, exactly once (``table.format``; DESIGN 4.11).

rotsink's own log stays the commit point: batch N is committed when ``_spark_metadata/N``
exists. A table is a second log that follows it (:mod:`commit_protocol.tables.follow`): after
the log file of batch N, one table commit adds the files batch N finalized, carrying N (a
Delta ``txn``, an Iceberg snapshot summary and table property) so that a table that already
holds N is recognised and left alone. A driver killed between the two commit points leaves a
table one batch behind, which the next commit, the next start of the query or ``rotsink
verify --repair`` brings up to date from rotsink's log, before anything else.

One registry entry per table format (:data:`TABLE_FORMATS`: the ``table.format`` value, the
module implementing it, and what it refuses at start). Its module defines
``open_table(storage, config) -> Table``: the small interface below, with every table
library call behind it (delta-rs for Delta, pyiceberg for Iceberg), so that nothing else in
rotsink branches on a table format. Adding one is a module and a line.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from commit_protocol.errors import OptionError

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from commit_protocol.config import SinkConfig
    from commit_protocol.storage import Storage


# The keys under which a committed state records the table that follows the log and its
# options (so that ``rotsink verify`` finds it): secrets only as references (env:, file:)
TABLE_KEY, TABLE_OPTIONS_KEY = "table", "table_options"
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


class Table(Protocol):
    """A table following one output path (runs on the driver, or in ``rotsink verify``)."""

    def committed_batch(self, owner: str) -> int | None:
        """The newest rotsink batch the table holds, read fresh; None when the table does
        not exist or ``owner`` never committed to it."""

    def check(self, *, owner: str | None, schema_json: str,
              partition_by: tuple[str, ...]) -> None:
        """Refuse (``TableError``, naming what differs) a table this output cannot follow:
        another writer's (``owner`` None: the output has no committed batch yet, so any
        existing table is another writer's), other partition columns, or a schema that is
        not the output's (a table may lack columns a batch adds, never have others)."""

    def commit(self, commit: TableCommit) -> bool:
        """Make ``commit`` one table commit, unless the table holds its batch already
        (checked on a fresh read, against zombies too): then False."""

    def files(self) -> dict[str, int]:
        """Every file the table's current version lists: path below the root -> size."""


@dataclass(frozen=True)
class TableFormat:
    """One ``table.format``: see the package docstring."""

    name: str
    module: str
    # the library the driver needs (its import name) and the extra that installs it
    library: str
    extra: str
    # what the format cannot take from the sink, checked when the query starts
    formats: tuple[str, ...] = ("parquet",)

    def check_installed(self) -> None:
        """Refuse, when the query starts, a table whose library the driver lacks."""
        import importlib.util

        if importlib.util.find_spec(self.library) is None:
            raise OptionError(f"option table.format={self.name!r} needs the {self.library} "
                              "package in the driver's Python: pip install "
                              f"'rotsink[{self.extra}]'")


TABLE_FORMATS: dict[str, TableFormat] = {f.name: f for f in (
    TableFormat("delta", "commit_protocol.tables.delta", library="deltalake", extra="delta"),
    TableFormat("iceberg", "commit_protocol.tables.iceberg", library="pyiceberg",
                extra="iceberg"),
)}


def table_format_named(name: str) -> TableFormat:
    if name not in TABLE_FORMATS:
        raise OptionError(f"option table.format={name!r}: expected one of "
                          f"{', '.join(sorted(TABLE_FORMATS))}")
    return TABLE_FORMATS[name]


def open_table(storage: Storage, config: SinkConfig) -> Table:
    """The table of ``config.table_format`` at the output path (the library imported now)."""
    assert config.table_format is not None
    module = importlib.import_module(table_format_named(config.table_format).module)
    table: Table = module.open_table(storage, config)
    return table


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
