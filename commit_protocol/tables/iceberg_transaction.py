"""pyiceberg transactions whose table metadata is worked out once per staged state.

pyiceberg's ``Transaction.table_metadata`` (0.10 to 0.12 at least) replays the staged updates
on the table's metadata and returns a deep copy, at every read. An append reads it about 20
times, and once more per data file; an expiry once per snapshot it expires. A deep copy costs
what the table's history holds (its snapshots and logs): rotsink's appends to a table
keeping ~180 snapshots took 0.40 s, 85% of it in those copies (a profile of
``benchmarks/long_run.py``), and Iceberg's default retention (5 days of snapshots, 7,200 at
one commit a minute) would take seconds. Upstream: apache/iceberg-python#2673 (the issue),
#3302 and #3784 (this same cache, not merged).

The cache is keyed on the identity of the two inputs, the table's metadata and the tuple of
staged updates: staging replaces the tuple, and a commit replaces the table's metadata, so
any change misses it. Callers get one object per state, where pyiceberg gave each a copy of
its own: nothing in pyiceberg's snapshot producers or expiry changes what it gets (its
models are frozen and its updates make new ones), which pyiceberg's own maintainers approved
in #3302. Where a later pyiceberg has no such property, transactions are pyiceberg's own.
"""

from __future__ import annotations

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
    from pyiceberg.table.update import update_table_metadata

    if not isinstance(Transaction.__dict__.get("table_metadata"), property):
        return Transaction  # a pyiceberg that keeps the metadata another way

    class CachedTransaction(Transaction):
        _cached_for: tuple[Any, Any] | None = None
        _cached: Any = None

        @property
        def table_metadata(self) -> Any:
            inputs = (self._table.metadata, self._updates)
            cached_for = self._cached_for
            if cached_for is None or cached_for[0] is not inputs[0] \
                    or cached_for[1] is not inputs[1]:
                self._cached = update_table_metadata(*inputs)
                self._cached_for = inputs
            return self._cached

    return CachedTransaction
