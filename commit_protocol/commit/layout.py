"""The directories an output's files go to: ``partitionBy``'s terms, or those of the table it
joins, laid out once, at its first batch, and as committed from then on.

At the first batch the terms are ``partitionBy``'s, under the names a joined table gives its
partition fields (Iceberg: pyiceberg names ``bucket(16, id)`` ``id_bucket_16``, Spark
``id_bucket``), or, without ``partitionBy``, the joined table's own partitioning
(:meth:`TableFormat.joined_terms`); the log's first state records them. After it, an output
that follows a table keeps them without ``partitionBy``; with it, they must be the same
(``check_compatible``). The planning of each batch lays the tasks' config out so; the commit,
which Spark may run on a writer the planning never touched, lays its own out again from the
log.
"""

from __future__ import annotations

from dataclasses import replace

from commit_protocol.records.config import SinkConfig
from commit_protocol.records.state import SinkState, terms_extra
from commit_protocol.storage import Storage
from commit_protocol.tables import table_format_of
from commit_protocol.vocabulary.partition_terms import PartitionTerm


def joined_terms(storage: Storage, config: SinkConfig) -> tuple[PartitionTerm, ...]:
    """Every partition term of an output's first batch."""
    if config.table_format is None:
        return config.all_terms
    return table_format_of(config).joined_terms(storage, config)


def laid_out(storage: Storage, config: SinkConfig, state: SinkState | None) -> SinkConfig:
    """``config`` with the directories' terms, given the output's committed ``state``."""
    if state is None:
        return config.laid_out(joined_terms(storage, config))
    if not config.partition_by_given and config.table_format is not None:
        return config.laid_out(state.all_terms)
    return config


def as_committed(storage: Storage, config: SinkConfig, state: SinkState) -> SinkConfig:
    """The commit's config after ``state``: its directories as committed (the names of a
    joined table's partition fields included)."""
    return replace(laid_out(storage, config, state), partition_terms=state.partition_terms)


def first_state(config: SinkConfig, schema_json: str, query_id: str) -> SinkState:
    """The state before an output's first batch, of ``config`` as laid out."""
    return SinkState(batch_id=-1, query_id=query_id, schema_json=schema_json,
                     format=config.format, compression=config.compression,
                     partition_by=config.partition_by,
                     extra=terms_extra(config.partition_terms),
                     compact_interval=config.compact_interval, encrypted=config.encrypted,
                     query_name=config.query_name)
