"""pyiceberg transactions whose table metadata is worked out once per staged state, without
a deep copy of the table's history.

pyiceberg's ``Transaction.table_metadata`` (0.10 to 0.12 at least) replays the staged updates
on the table's metadata and returns a deep copy, at every read. An append reads it about 20
times, and once more per data file; an expiry once per snapshot it expires. A deep copy costs
what the table's history holds (its snapshots and logs): rotsink's appends to a table
keeping ~180 snapshots took 0.40 s, 85% of it in those copies (a profile of
``benchmarks/long_run.py``), and Iceberg's default retention (5 days of snapshots, 7,200 at
one commit a minute) would take seconds. Upstream: apache/iceberg-python#2673 (the issue),
#3302 and #3784 (a cache of the same kind, not merged).

Here the metadata is worked out once per state, keyed on the identity of the two inputs, the
table's metadata and the tuple of staged updates: staging replaces the tuple, and a commit
replaces the table's metadata, so any change misses it. And it is not deep-copied: pyiceberg
applies each update by copying what it changes (``model_copy(update=...)`` with new lists and
dicts), so the result shares only what it left unchanged with the table's metadata, and no
caller changes what it gets (pyiceberg's models are frozen; its maintainers approved handing
one object to every caller in #3302). The table's own metadata is never touched (tested).
Where a later pyiceberg has no such property or no such replay, transactions are pyiceberg's
own.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable
    from pyiceberg.table import Transaction


def transaction(table: IcebergTable, *, autocommit: bool = False) -> Transaction:
    """A transaction on ``table`` that reads its metadata once per staged state."""
    return _cached_transaction_class()(table, autocommit=autocommit)


def expire_snapshots(table: IcebergTable) -> Any:
    """``table.maintenance.expire_snapshots()`` on such a transaction (committed by the
    builder's ``commit``, as pyiceberg's own)."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    return ExpireSnapshots(transaction=transaction(table, autocommit=True))


_CLASS: type | None = None


def _cached_transaction_class() -> type:
    global _CLASS
    if _CLASS is None:
        _CLASS = _make_class()
    return _CLASS


def _make_class() -> type:
    from pyiceberg.table import Transaction

    if not isinstance(Transaction.__dict__.get("table_metadata"), property) or not _can_replay():
        return Transaction  # a pyiceberg that keeps or replays the metadata another way

    class CachedTransaction(Transaction):
        _cached_for: tuple[Any, Any] | None = None
        _cached: Any = None

        @property
        def table_metadata(self) -> Any:
            inputs = (self._table.metadata, self._updates)
            cached_for = self._cached_for
            if cached_for is None or cached_for[0] is not inputs[0] \
                    or cached_for[1] is not inputs[1]:
                self._cached = _replayed(*inputs)
                self._cached_for = inputs
            return self._cached

    return CachedTransaction


def _can_replay() -> bool:
    try:
        from pyiceberg.table.update import (  # noqa: F401
            _apply_table_update,
            _TableMetadataUpdateContext,
        )
    except ImportError:
        return False
    return True


def _replayed(base: Any, updates: tuple[Any, ...]) -> Any:
    """pyiceberg's ``update_table_metadata(base, updates)`` without its closing deep copy."""
    from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext
    from pyiceberg.utils.datetime import datetime_to_millis

    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    if context.has_changes() and base.last_updated_ms == metadata.last_updated_ms:
        metadata = metadata.model_copy(update={
            "last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata
