"""The table's schema brought to the stream's: the columns a batch adds
(``schema.evolution=addColumns``) and the types it widens (``widenTypes``), as Iceberg's
schema updates (pyiceberg's ``update_schema``).

Iceberg promotes a type only where every reader can read the old files as the new type
(the spec's "Schema Evolution"): ``int`` to ``long``, ``float`` to ``double``, a decimal to
more digits of the same scale. Spark's ``byte`` and ``short`` are Iceberg ``int`` already.
A widening rotsink's own readers take and Iceberg's do not (a decimal's scale, a date to a
timestamp: format version 3 only) is refused when its batch is planned, naming the column;
a table another writer made wider than the output (its type promoted already) is followed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from commit_protocol.vocabulary.errors import TableError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType, StructType


def promotes(old: IcebergType, new: IcebergType) -> bool:
    """Whether Iceberg promotes ``old`` to ``new`` (see the module docstring)."""
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    return (isinstance(old, DecimalType) and isinstance(new, DecimalType)
            and new.scale == old.scale and new.precision > old.precision)


def evolve(update: Any, have: Schema, wanted: Schema, *, identifier: str) -> bool:
    """Stage on ``update`` (pyiceberg's ``UpdateSchema``) what ``wanted`` adds to the table's
    ``have`` and the types it widens; whether there was anything."""
    changes = list(_changes(have.as_struct(), wanted.as_struct(), (), identifier))
    for kind, path, field_type in changes:
        if kind == "add":
            update.add_column(path[0], field_type, required=False)
        else:
            update.update_column(path, field_type=field_type)
    return bool(changes)


def differs(have: Schema, wanted: Schema, *, identifier: str) -> bool:
    """Whether :func:`evolve` would change the table's schema."""
    return any(True for _ in _changes(have.as_struct(), wanted.as_struct(), (), identifier))


def _changes(have: StructType, wanted: StructType, path: tuple[str, ...], identifier: str
             ) -> Iterator[tuple[str, tuple[str, ...], IcebergType]]:
    from pyiceberg.types import StructType

    fields = {f.name: f for f in have.fields}
    for field in wanted.fields:
        held = fields.get(field.name)
        where = (*path, field.name)
        if held is None:
            if not path:  # a top-level column the stream adds (nested ones: as before)
                yield "add", where, field.field_type
        elif isinstance(field.field_type, StructType) and isinstance(held.field_type,
                                                                     StructType):
            yield from _changes(held.field_type, field.field_type, where, identifier)
        elif field.field_type == held.field_type or promotes(field.field_type,
                                                            held.field_type):
            continue  # the same, or the table wider already (another writer promoted it)
        elif promotes(held.field_type, field.field_type):
            yield "promote", where, field.field_type
        elif _a_wider_kind(held.field_type, field.field_type):  # widenTypes, not Iceberg's
            raise TableError(
                f"Iceberg table {identifier}: column {'.'.join(where)} is {held.field_type} "
                f"in the table and {field.field_type} in the output; Iceberg promotes int to "
                "long, float to double and a decimal to more digits of the same scale only "
                "(schema.evolution=widenTypes widens further in a plain output)")


def _a_wider_kind(held: IcebergType, given: IcebergType) -> bool:
    """A widening ``schema.evolution=widenTypes`` takes and Iceberg does not promote: a date
    to a timestamp, a decimal's scale. (Another difference is refused where the table's
    columns are checked.)"""
    from pyiceberg.types import DateType, DecimalType, TimestampType

    return (isinstance(held, DateType) and isinstance(given, TimestampType)) or (
        isinstance(held, DecimalType) and isinstance(given, DecimalType))
