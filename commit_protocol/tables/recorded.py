"""The table an output's committed state says follows its log, as a config to open it by
(``rotsink verify``, ``inspect``, the metrics, and readers that apply the table's deletes)."""

from __future__ import annotations

from commit_protocol.records.config import SinkConfig
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.tables import recorded_table


def table_config(storage: Storage, state: SinkState, fs_options: dict[str, str] | None,
                 table_options: dict[str, str] | None = None) -> SinkConfig | None:
    """The config of the table an output's state says follows its log (with the table options
    the state recorded, ``table_options`` over them); None without one."""
    recorded = recorded_table(state.extra)
    if recorded is None:
        return None
    table_format, options = recorded
    return SinkConfig(path=storage.root_uri, format=state.format,
                      partition_by=tuple(state.partition_by),
                      partition_terms=state.partition_terms, table_format=table_format.name,
                      fs_options=dict(fs_options or {}),
                      table_options={**options, **(table_options or {})},
                      compact_interval=state.compact_interval)
