"""``rotsink verify`` of a table that follows the log: does it list exactly the finalized files?

Every file the log lists as of its latest batch must be in the table's current version, with
the logged size, and the table must list nothing else. A table one batch behind is a table
commit in flight while the log file of the latest batch is younger than the commit timeout
(the driver is between its two commit points), and a problem after that: its driver died
there, and the next start of the query or ``rotsink verify --repair`` catches the table up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from commit_protocol.config import SinkConfig
from commit_protocol.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.tables import owner_of, recorded_table


def table_config(storage: Storage, state: SinkState, fs_options: dict[str, str] | None,
                 table_options: dict[str, str] | None = None) -> SinkConfig | None:
    """The config of the table an output's state says follows its log (with the table options
    the state recorded, ``table_options`` over them); None without one."""
    recorded = recorded_table(state.extra)
    if recorded is None:
        return None
    table_format, options = recorded
    return SinkConfig(path=storage.root_uri, format=state.format,
                      partition_by=tuple(state.partition_by), table_format=table_format,
                      fs_options=dict(fs_options or {}),
                      table_options={**options, **(table_options or {})},
                      compact_interval=state.compact_interval)


@dataclass(frozen=True)
class TableCheck:
    problems: list[str]
    in_flight: bool  # the latest batch's table commit may still be under way
    files: int


def check_table(storage: Storage, log_file: str, state: SinkState, config: SinkConfig,
                listed: dict[str, int], *, timeout_s: float) -> TableCheck:
    """Compare the table with ``listed`` (path -> size, the log's finalized files as of
    ``state.batch_id``, whose log file is ``log_file``)."""
    assert config.table_format is not None
    name = f"the {config.table_format.name} table"
    table = config.table_format.open(storage, config)
    files = table.files()
    problems = [f"{path}: listed by {name} but not by the log: table readers return rows "
                "Spark's readers do not" for path in sorted(set(files) - set(listed))]
    problems += [f"{path}: {name} lists {files[path]} bytes, the log {size}"
                 for path, size in sorted(listed.items()) if path in files and files[path] != size]
    missing = sorted(set(listed) - set(files))
    if not missing:
        return TableCheck(problems, False, len(files))
    mark = table.committed_batch(owner_of(state.query_id))
    age_s = time.time() - storage.mtime_ms(log_file) / 1000
    if (mark is None or mark < state.batch_id) and age_s < timeout_s:
        return TableCheck(problems, True, len(files))
    problems.append(
        f"{name} (holding batches up to {mark}) lacks {len(missing)} finalized file(s) the "
        f"log lists as of batch {state.batch_id}, first {missing[0]}: its driver died between "
        "the two commits; restart the query or run `rotsink verify --repair`")
    return TableCheck(problems, False, len(files))
