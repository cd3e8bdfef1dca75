"""How a finished file says the table sort order it was written in (Iceberg's
``WRITE ORDERED BY``): a key of its Parquet footer, set by the roll that sorted it
(:mod:`commit_protocol.task.sorting`) and read by the table commit that lists it
(:mod:`commit_protocol.tables.iceberg.files`)."""

from __future__ import annotations

from collections.abc import Mapping

# the Parquet key-value metadata naming the sort order a finished file was written in
SORT_ORDER_KEY = b"rotsink.sort_order_id"


def claimed_order(metadata: Mapping[bytes, bytes] | None) -> int | None:
    """The sort order a finished file's footer metadata says it was written in.

    >>> claimed_order({SORT_ORDER_KEY: b"1"}), claimed_order(None)
    (1, None)
    """
    claimed = (metadata or {}).get(SORT_ORDER_KEY)
    return None if claimed is None else int(claimed)
