"""Iceberg's hidden partitioning on the executors: the value of a ``days(ts)`` or
``bucket(16, id)`` directory, computed as the Iceberg spec defines the transform, and read
back from the directory's name into the partition tuple of a data file.

The transforms are pyiceberg's (``Transform.pyarrow_transform``), vectorised in Rust by
``pyiceberg-core`` (iceberg-rust's): bucket is the spec's 32-bit Murmur3 hash of the value's
byte form, modulo N, the time transforms count years, months, days or hours from 1970-01-01
in UTC. A directory's value is Iceberg's own spelling of the result (``to_human_string``, as
Iceberg's Spark writer names its directories: ``ts_day=2026-12-01``,
``ts_hour=2026-12-01-10``, ``ts_month=2026-12``, ``id_bucket=3``), worked out once per
distinct value of a batch. A null is Spark's default partition, as for a column: Iceberg's
Spark writer spells it ``null``, which Spark's path reader would take for a string and so
type the whole directory column as strings (``null`` is read back too, from tables that
writer wrote). pyarrow is imported where a batch is split, not with the module: the planning
of a batch, in a fresh Python process, imports this module and would pay ~250 ms for it.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import TYPE_CHECKING, Any

from commit_protocol.vocabulary.errors import OptionError, TableError
from commit_protocol.vocabulary.partition_terms import PartitionTerm

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.transforms import Transform
    from pyiceberg.types import IcebergType

NULL = "null"  # Iceberg's Spark writer's spelling of a null partition value
_EPOCH = dt.date(1970, 1, 1)


def check_installed() -> None:
    """Transforms but identity and void run in pyiceberg-core (Rust): say how to get it."""
    try:
        import pyiceberg_core  # noqa: F401
    except ImportError as e:
        raise OptionError("partitionBy with an Iceberg transform (days, bucket, truncate...) "
                          "needs pyiceberg-core: pip install 'rotsink[iceberg]'") from e


def check_sources(terms: tuple[PartitionTerm, ...], schema: Any) -> None:
    """Refuse at start a term whose column the stream lacks, or whose transform Iceberg does
    not define on the column's type (``days`` of a string, ``hours`` of a date,
    ``truncate`` of a timestamp)."""
    shown = f"option partitionBy={', '.join(t.ddl for t in terms)!r}"
    for term in terms:
        field = schema.find_field(term.source, case_sensitive=True) \
            if term.source in schema.column_names else None
        if field is None:
            raise OptionError(f"{shown}: no column {term.source!r} in the stream "
                              f"({', '.join(schema.column_names)})")
        if not transform_of(term).can_transform(field.field_type):
            raise OptionError(f"{shown}: Iceberg's {term.transform} transform does not apply "
                              f"to column {term.source!r} of type {field.field_type}")


def transform_of(term: PartitionTerm) -> Transform[Any, Any]:
    from pyiceberg.transforms import parse_transform

    return parse_transform(term.transform)


def iceberg_type(arrow_type: pa.DataType) -> IcebergType | None:
    """The Iceberg type a transform sees for a column of Spark's Arrow batches (Spark's
    ``timestamp`` arrives zoned: Iceberg's ``timestamptz``); None for one no transform
    takes."""
    import pyarrow as pa
    from pyiceberg import types as t

    if pa.types.is_integer(arrow_type):
        return t.LongType() if arrow_type.bit_width == 64 else t.IntegerType()
    if pa.types.is_decimal(arrow_type):
        return t.DecimalType(arrow_type.precision, arrow_type.scale)
    if pa.types.is_timestamp(arrow_type):
        return t.TimestamptzType() if arrow_type.tz else t.TimestampType()
    simple = {pa.string(): t.StringType(), pa.large_string(): t.StringType(),
              pa.binary(): t.BinaryType(), pa.large_binary(): t.BinaryType(),
              pa.date32(): t.DateType()}
    return simple.get(arrow_type)


def directory_values(column: pa.Array | pa.ChunkedArray, term: PartitionTerm) -> pa.Array:
    """Each row's directory value under ``term`` (a hidden one), as Iceberg spells it; None
    for a null (Spark's default partition)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    source = iceberg_type(column.type)
    transform = transform_of(term)
    if term.transform == "void" or len(column) == 0:
        return pa.nulls(len(column), pa.string())
    if source is None:  # (a Spark type no transform takes was refused at start)
        raise TableError(f"partitionBy {term.ddl}: column {term.source!r} arrives as "
                         f"{column.type}, which Iceberg's {term.transform} transform does not "
                         "take")
    transformed = transformed_values(column, transform, source)
    encoded = pc.dictionary_encode(transformed)
    result_type = transform.result_type(source)
    spelled = pa.array([transform.to_human_string(result_type, value.as_py())
                        for value in encoded.dictionary], pa.string())
    return pc.take(spelled, encoded.indices)


def transformed_values(column: pa.Array, transform: Transform[Any, Any],
                       source: IcebergType) -> pa.Array:
    """Each row's value under ``transform`` as Iceberg computes it (a day's ordinal, a
    bucket's number), by pyiceberg-core; null for a null."""
    import pyarrow as pa

    transformed = transform.pyarrow_transform(source)(_as_transform_input(column))
    if isinstance(transformed, pa.ChunkedArray):
        transformed = transformed.combine_chunks()
    return transformed


def _as_transform_input(column: pa.Array) -> pa.Array:
    """pyiceberg-core takes the widths Iceberg has: int32 or int64, microseconds."""
    import pyarrow as pa

    kind = column.type
    if pa.types.is_integer(kind) and kind.bit_width < 32:
        return column.cast(pa.int32())
    if pa.types.is_timestamp(kind) and kind.unit != "us":
        return column.cast(pa.timestamp("us", kind.tz))
    if kind == pa.large_string():
        return column.cast(pa.string())
    if kind == pa.large_binary():
        return column.cast(pa.binary())
    return column


def record_value(transform: Transform[Any, Any], source: IcebergType, text: str | None,
                 *, where: str) -> Any:
    """A directory's value (unescaped) read back as the partition tuple's value: days since
    1970 for ``ts_day=2026-12-01``, the bucket's number, the truncated value; None for
    ``null``. ``where`` names the file in an error."""
    kind = str(transform).partition("[")[0]
    if text is None or text == NULL or kind == "void":
        return None
    try:
        if kind == "bucket":
            return int(text)
        if kind == "truncate":
            return _truncated(source, text)
        return _time_ordinal(kind, text)
    except ValueError as e:
        raise TableError(f"{where}: partition value {text!r} is not a {transform} value") from e


def _truncated(source: IcebergType, text: str) -> Any:
    from pyiceberg import types as t

    if isinstance(source, (t.IntegerType, t.LongType)):
        return int(text)
    if isinstance(source, t.DecimalType):
        return decimal.Decimal(text)
    if isinstance(source, t.BinaryType):
        return base64.b64decode(text, validate=True)
    return text


def _time_ordinal(kind: str, text: str) -> int:
    """Years, months, days or hours since 1970-01-01, from Iceberg's ``to_human_string``:
    ``2026``, ``2026-12``, ``2026-12-01``, ``2026-12-01-10``."""
    if kind == "year":
        return int(text) - 1970
    if kind == "month":
        year, month = text.split("-")
        return (int(year) - 1970) * 12 + int(month) - 1
    if kind == "day":
        return (dt.date.fromisoformat(text) - _EPOCH).days
    if kind == "hour":
        day, _, hour = text.rpartition("-")
        return (dt.date.fromisoformat(day) - _EPOCH).days * 24 + int(hour)
    raise ValueError(kind)


def spec_of(terms: tuple[PartitionTerm, ...], schema: Any) -> Any:
    """The partition spec of a table rotsink creates: ``terms`` in order, named as Iceberg's
    Spark DDL names them, field ids from 1000 as Iceberg assigns them."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec

    return PartitionSpec(*[PartitionField(source_id=schema.find_field(term.source).field_id,
                                          field_id=1000 + i, transform=transform_of(term),
                                          name=term.name)
                           for i, term in enumerate(terms)])


def terms_of(spec: Any, schema: Any) -> tuple[PartitionTerm, ...]:
    """A table's partition spec as ``partitionBy`` terms (to compare with the output's)."""
    return tuple(PartitionTerm(field.name, schema.find_field(field.source_id).name,
                               str(field.transform)) for field in spec.fields)


def same_spec(a: tuple[PartitionTerm, ...], b: tuple[PartitionTerm, ...]) -> bool:
    """The same transforms of the same columns, in the same order, whatever their names."""
    return [(t.source, t.transform) for t in a] == [(t.source, t.transform) for t in b]
