"""The ``table.*`` options (``table.format``, ``table.identifier``, ``table.catalog.*``,
``table.storage.*``), checked on the driver when the query starts: what a table cannot follow
is refused naming both options."""

from __future__ import annotations

from commit_protocol.config import SinkConfig
from commit_protocol.errors import OptionError


def table_format(text: str | None) -> str | None:
    from commit_protocol.tables import table_format_named

    if text is None or text.strip().lower() in ("", "none"):
        return None
    return table_format_named(text.strip().lower()).name


def check_table_options(config: SinkConfig) -> None:
    """What a table cannot follow, refused naming both options: formats its readers do not
    take, files its readers cannot decrypt, and rotsink features that would make the table
    and the log list different files or put rotsink's files where table maintenance looks."""
    from commit_protocol.tables import TABLE_FORMATS

    if config.table_format is None:
        return
    given = f"option table.format={config.table_format!r}"
    entry = TABLE_FORMATS[config.table_format]
    entry.check_installed()
    identifier = config.table_options.get("identifier")
    if identifier is not None and (config.table_format != "iceberg" or identifier.count(".") < 1
                                   or "" in identifier.split(".")):
        raise OptionError(f"option table.identifier={identifier!r}: expected namespace.table, "
                          "for table.format=iceberg")
    if config.format not in entry.formats:
        raise OptionError(f"{given} with option format={config.format!r}: a "
                          f"{config.table_format} table takes format "
                          f"{' or '.join(entry.formats)}")
    if config.keys is not None:
        raise OptionError(f"{given} with option encryption.key: {config.table_format} "
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
