"""Rows another writer deletes in place, and what each reader of the output returns.

A Delta ``DELETE``, ``UPDATE`` or ``MERGE`` with deletion vectors (Databricks' default for new
tables) leaves a data file where it is and marks some of its rows deleted; Iceberg's
merge-on-read does the same with delete files. rotsink follows the table's version in its log
(:mod:`commit_protocol.tables.sharing`), and its readers return:

* Delta: rotsink's reader leaves out the rows the deletion vectors delete, as of the version
  the log followed (the one its listing is as of: the same snapshot), read by delta-rs;
  ``pyspark_rotsink.read`` reads such a snapshot through rotsink's reader; ``verify`` notes
  them. ``spark.read.parquet(path)`` cannot see deletion vectors and returns those rows:
  Delta's readers (``spark.read.format("delta")``, delta-rs, DuckDB, Trino) read the table.
* Iceberg: delete files are not applied: rotsink's reader refuses the output until they are
  rewritten, ``verify`` names them a problem.
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
_READERS = {"delta": "commit_protocol.tables.delta.deletion_vectors"}


def applied(name: str) -> bool:
    """Whether rotsink's reader leaves out the rows table format ``name`` deletes in place."""
    return name in _READERS


def row_deletes_line(name: str, files: int) -> str:
    """What ``files`` data files with rows deleted in place mean to the output's readers."""
    if applied(name):
        return (f"the {name} table holds rows deleted in place in {files} file(s) (deletion "
                "vectors): rotsink's reader and the table's readers leave them out; "
                "spark.read.parquet(path) cannot see deletion vectors and returns them (read "
                "the table with Delta's reader, or rewrite the files: REORG TABLE ... APPLY "
                "(PURGE))")
    return (f"the {name} table holds rows deleted in place in {files} file(s) (delete files, "
            "written by another writer despite the table's copy-on-write settings): path "
            "readers (spark.read.parquet(path)) still return those rows, and rotsink's reader "
            "refuses the output until they are rewritten: run rewrite_data_files with "
            "delete-file-threshold=1, then rewrite_position_delete_files with rewrite-all=true")


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
    if not applied(name) or config is None or followed.version is None:
        raise TableError(f"{storage.root_uri}: {row_deletes_line(name, followed.row_deletes)}")
    table_format_of(config).check_installed()
    reader = importlib.import_module(_READERS[name])
    return reader.deleted_rows(storage, config, followed.version)
