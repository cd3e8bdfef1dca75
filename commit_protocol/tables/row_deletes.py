"""Rows another writer deletes in place, and what each reader of the output returns.

A Delta ``DELETE``, ``UPDATE`` or ``MERGE`` with deletion vectors (Databricks' default for new
tables) leaves a data file where it is and marks some of its rows deleted; Iceberg's
merge-on-read does the same with position delete files. rotsink follows the table's version in
its log (:mod:`commit_protocol.tables.sharing`), and its reader leaves those rows out, as of the
version the log followed (the one its listing is as of: the same snapshot), read by the table's
library (delta-rs, pyiceberg); ``pyspark_rotsink.read`` reads such a snapshot through rotsink's
reader; ``verify`` notes them. ``spark.read.parquet(path)`` cannot see them and returns those
rows: the table's own readers (Spark's, delta-rs, pyiceberg, Trino) read the table. Iceberg's
equality deletes are not applied (pyiceberg does not read them): rotsink's reader refuses an
output whose table has them.
"""

from __future__ import annotations

import importlib

from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.tables import TABLE_KEY, table_format_of
from commit_protocol.tables.recorded import table_config
from commit_protocol.tables.sharing import Followed
from commit_protocol.vocabulary.errors import TableError

# table format -> the module whose deleted_rows(storage, config, version) reads them
_READERS = {"delta": "commit_protocol.tables.delta.deletion_vectors",
            "iceberg": "commit_protocol.tables.iceberg.deletes"}
# what each format's deletes in place are called, and what rewrites them
_WORDS = {"delta": ("deletion vectors", "REORG TABLE ... APPLY (PURGE)"),
          "iceberg": ("delete files; equality deletes are refused",
                      "rewrite_data_files with delete-file-threshold=1")}


def row_deletes_line(name: str, files: int) -> str:
    """What ``files`` files of rows deleted in place mean to the output's readers."""
    kind, rewrite = _WORDS.get(name, ("deletes in place", "a rewrite of the files"))
    return (f"the {name} table holds rows deleted in place in {files} file(s) ({kind}): "
            "rotsink's reader and the table's readers leave them out; spark.read.parquet(path) "
            f"cannot see them and returns them (read the table, or rewrite them: {rewrite})")


def deleted_in_place(storage: Storage, state: SinkState,
                     fs_options: dict[str, str] | None) -> dict[str, list[int]]:
    """The rows other writers deleted in place as the log of ``state`` followed the table:
    path -> ascending row positions (none for an output no writer deleted from in place).
    ``TableError`` where rotsink's reader does not apply them."""
    followed = Followed.of(state.extra)
    if not followed.row_deletes:
        return {}
    name = str(state.extra.get(TABLE_KEY, "table"))
    config = table_config(storage, state, fs_options)
    if name not in _READERS or config is None or followed.version is None:
        raise TableError(f"{storage.root_uri}: the log records rows the {name} table deleted "
                         "in place, and names no table version rotsink's reader can read "
                         "them from: the query's next commit follows the table again")
    table_format_of(config).check_installed()
    reader = importlib.import_module(_READERS[name])
    return reader.deleted_rows(storage, config, followed.version)
