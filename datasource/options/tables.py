"""The ``table.*`` options (``table.format`` and the options of that format), checked on the
driver when the query starts: what a table cannot follow is refused naming both options.
What each format takes is its own (``commit_protocol.tables``); what no table can follow
is here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commit_protocol.records.config import SinkConfig
from commit_protocol.tables import table_format_named, table_format_of
from commit_protocol.vocabulary.errors import OptionError
from commit_protocol.vocabulary.partition_terms import refuse_transforms

if TYPE_CHECKING:
    from commit_protocol.tables import TableFormat


def table_format(text: str | None) -> TableFormat | None:
    """The format ``table.format`` names; None for no table (absent, "" or "none")."""
    if text is None or text.strip().lower() in ("", "none"):
        return None
    return table_format_named(text.strip().lower())


def check_table_options(config: SinkConfig) -> None:
    """What a table cannot follow, refused naming both options: formats its readers do not
    take, files its readers cannot decrypt, and rotsink features that would make the table
    and the log list different files or put rotsink's files where table maintenance looks;
    then the format's own options (:meth:`TableFormat.check_options`)."""
    if config.table_format is None:
        if config.table_options:
            key, value = next(iter(config.table_options.items()))
            raise OptionError(f"option table.{key}={value!r} is for a table: set "
                              "table.format (delta or iceberg)")
        refuse_transforms(config.partition_terms, table_format=None)
        return
    entry = table_format_of(config)
    given = f"option table.format={entry.name!r}"
    entry.check_installed()
    if config.format not in entry.formats:
        raise OptionError(f"{given} with option format={config.format!r}: a {entry.name} "
                          f"table takes format {' or '.join(entry.formats)}")
    if config.keys is not None:
        raise OptionError(f"{given} with option encryption.key: {entry.name} "
                          "readers cannot decrypt rotsink's Parquet files; encrypt at rest in "
                          "the store instead (e.g. S3 server-side encryption)")
    if config.retention_ms is not None:
        raise OptionError(f"{given} with option log.retention: retention drops files from "
                          "rotsink's log but not from the table, and the two must list the same "
                          "files; delete old data through the table instead")
    if config.partition_commit_delay_ms is not None:
        raise OptionError(f"{given} with option partition.commitDelay: the _SUCCESS "
                          "markers it writes into partition directories are deleted by the "
                          "table's VACUUM; table readers see a batch's files when the table "
                          "commit lists them")
    entry.check_options(config)
