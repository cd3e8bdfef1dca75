"""Spark's schema and partition values in Iceberg's terms, for ``table.format=iceberg``.

Spark's types map to Iceberg's as Spark's own Iceberg writer maps them: byte and short are
``int``, ``timestamp`` (an instant) is ``timestamptz``, ``timestamp_ntz`` is ``timestamp``;
every field is optional (as Delta's and Spark's streaming sinks store a stream's schema), and
ids are assigned fresh by pyiceberg, and carried by the data files
(:mod:`~commit_protocol.tables.iceberg.ids`); files an earlier rotsink wrote carry none, and
the table's name mapping (``schema.name-mapping.default``) resolves their columns by name.

A partition value is spelled in its directory name as Spark casts it to a string; Iceberg
needs it typed (``partition_value``), never inferred from the file's statistics (which
cannot see a column the file does not hold: iceberg-python#531).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from typing import TYPE_CHECKING, Any

from commit_protocol.vocabulary.errors import TableError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import IcebergType

_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def iceberg_schema(schema_json: str) -> Schema:
    """The Iceberg schema of a Spark schema (its JSON), with fresh field ids.

    >>> print(iceberg_schema('{"type":"struct","fields":[{"name":"id","type":"long",'
    ...                      '"nullable":false,"metadata":{}}]}'))
    table {
      1: id: optional long
    }
    """
    from pyiceberg.schema import Schema, assign_fresh_schema_ids
    from pyiceberg.types import NestedField

    counter = iter(range(1, 1 << 30))
    fields = [NestedField(next(counter), f["name"], _type(f["type"], counter, f["name"]),
                          required=False)
              for f in json.loads(schema_json)["fields"]]
    return assign_fresh_schema_ids(Schema(*fields))


def _type(spark: Any, ids: Any, where: str) -> IcebergType:
    from pyiceberg import types as t

    primitives = {"boolean": t.BooleanType(), "byte": t.IntegerType(), "short": t.IntegerType(),
                  "integer": t.IntegerType(), "long": t.LongType(), "float": t.FloatType(),
                  "double": t.DoubleType(), "string": t.StringType(), "binary": t.BinaryType(),
                  "date": t.DateType(), "timestamp": t.TimestamptzType(),
                  "timestamp_ntz": t.TimestampType()}
    if isinstance(spark, str):
        if spark in primitives:
            return primitives[spark]
        if (match := _DECIMAL.fullmatch(spark)) is not None:
            return t.DecimalType(int(match[1]), int(match[2]))
        raise TableError(f"option table.format='iceberg': column {where!r} of type {spark} "
                         "has no Iceberg type")
    kind = spark["type"]
    if kind == "struct":
        return t.StructType(*[t.NestedField(next(ids), f["name"],
                                            _type(f["type"], ids, f"{where}.{f['name']}"),
                                            required=False) for f in spark["fields"]])
    if kind == "array":
        return t.ListType(next(ids), _type(spark["elementType"], ids, f"{where}[]"),
                          element_required=False)
    if kind == "map":
        return t.MapType(next(ids), _type(spark["keyType"], ids, f"{where}.key"), next(ids),
                         _type(spark["valueType"], ids, f"{where}.value"),
                         value_required=False)
    raise TableError(f"option table.format='iceberg': column {where!r} of type {kind} has no "
                     "Iceberg type")


def partition_value(text: str | None, kind: IcebergType, time_zone: str | None = None) -> Any:
    """A directory's partition value (unescaped; None for Spark's default partition) as the
    Python value of its Iceberg type; an instant (``timestamptz``) named in ``time_zone``,
    the session's zone as the batch's tasks found it.

    >>> from pyiceberg.types import DateType, DoubleType, IntegerType
    >>> partition_value("2024-02-29", DateType()), partition_value("1.0E10", DoubleType())
    (datetime.date(2024, 2, 29), 10000000000.0)
    >>> partition_value(None, IntegerType()) is None
    True
    """
    from pyiceberg import types as t

    if text is None:
        return None
    if isinstance(kind, (t.IntegerType, t.LongType)):
        return int(text)
    if isinstance(kind, (t.FloatType, t.DoubleType)):
        return float(text)  # Java's spelling: 1.0E10, NaN, Infinity
    if isinstance(kind, t.DecimalType):
        return decimal.Decimal(text)
    if isinstance(kind, t.BooleanType):
        return text == "true"
    if isinstance(kind, t.DateType):
        return dt.date.fromisoformat(text)
    if isinstance(kind, t.TimestampType):
        return dt.datetime.fromisoformat(text)
    if isinstance(kind, t.TimestamptzType):
        from commit_protocol.vocabulary.partition_values import utc_partition_value

        return dt.datetime.fromisoformat(utc_partition_value(text, time_zone, where=text))
    if isinstance(kind, t.BinaryType):
        return text.encode()
    return text
