"""rotsink's marks in an Iceberg table: the newest batch of each query writing it (a table
property per query, so that several queries share one table), the snapshots they made, and
the table object rotsink's commits start from (no retries: the commit is conditional on the
mark read; rotsink reads the mark again and retries itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

# a snapshot summary's batch and writer; as table properties, the one high-water mark an
# earlier rotsink kept (now one per query: mark_key)
MARK, OWNER = "rotsink.batch", "rotsink.owner"
NUM_RETRIES = "commit.retry.num-retries"  # pyiceberg's (and Iceberg's) table property


def mark_key(owner: str) -> str:
    """The table property holding ``owner``'s high-water mark: one per rotsink query, so that
    several queries (each its own output and checkpoint) share one table.

    >>> mark_key("rotsink-5f0c")
    'rotsink.batch.rotsink-5f0c'
    """
    return f"{MARK}.{owner}"


def mark(table: IcebergTable | None, owner: str) -> int | None:
    """``owner``'s mark: its own property, or the one mark an earlier rotsink kept."""
    if table is None:
        return None
    properties = table.properties
    if mark_key(owner) in properties:
        return int(properties[mark_key(owner)])
    if properties.get(OWNER) == owner and MARK in properties:
        return int(properties[MARK])
    return None


def writers(table: IcebergTable) -> list[str]:
    """The rotsink queries holding a mark in the table."""
    prefix = MARK + "."
    found = [key[len(prefix):] for key in table.properties if key.startswith(prefix)]
    legacy = table.properties.get(OWNER)
    return sorted(found + ([legacy] if legacy and legacy not in found else []))


def rotsink_appends(table: IcebergTable, after: int) -> set[int]:
    """Sequence numbers after ``after`` of the snapshots any rotsink query appended (the
    summary names a rotsink writer; an append only adds files, below that query's output):
    for another output following the table, no change to look at."""
    return {s.sequence_number for s in table.snapshots()
            if s.sequence_number is not None and s.sequence_number > after
            and s.summary is not None and s.summary.operation.value == "append"
            and OWNER in s.summary.additional_properties}


def without_retries(table: IcebergTable) -> IcebergTable:
    """``table`` whose transactions pyiceberg does not retry: it retries a commit that lost a
    race on top of the winner, re-based (the same batch twice), as many times as the
    ``commit.retry.num-retries`` of the table object the transaction starts from says (4 by
    default). Said 0 here, on this object alone: its catalog commit applies only the
    transaction's updates to the table as the catalog holds it, so nothing is written to the
    table and its other writers keep their own retries."""
    metadata = table.metadata
    table.metadata = metadata.model_copy(
        update={"properties": {**metadata.properties, NUM_RETRIES: "0"}})
    return table
