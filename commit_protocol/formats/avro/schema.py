"""The Avro schema ``spark-avro`` writes for a Spark schema (its
``SchemaConverters.toAvroType``), from the schema's Arrow form."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

TOP_LEVEL = "topLevelRecord"


def avro_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Avro schema ``spark-avro`` writes for a Spark schema of this Arrow form."""
    return _record(list(schema), TOP_LEVEL, "")


def _record(fields: list[pa.Field], name: str, namespace: str) -> dict[str, Any]:
    """Spark's ``toAvroType`` of a struct: a record named ``name`` in ``namespace``; its
    fields' records and fixeds are named in the namespace ``namespace.name``."""
    inner = f"{namespace}.{name}" if namespace else name
    record: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        record["namespace"] = namespace
    record["fields"] = [{"name": f.name, "type": _typed(f.type, f.nullable, f.name, inner)}
                        for f in fields]
    return record


def _typed(t: pa.DataType, nullable: bool, name: str, namespace: str) -> Any:
    base = _avro_type(t, name, namespace)
    if base == "null":
        return "null"
    return [base, "null"] if nullable else base


def _avro_type(t: pa.DataType, name: str, namespace: str) -> Any:
    if pa.types.is_struct(t):
        return _record([t.field(i) for i in range(t.num_fields)], name, namespace)
    if pa.types.is_map(t):
        return {"type": "map", "values": _typed(t.item_type, t.item_field.nullable, name,
                                                 namespace)}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": _typed(t.value_type, t.value_field.nullable, name,
                                                  namespace)}
    if pa.types.is_decimal(t):
        fixed = f"{namespace}.{name}.fixed" if namespace else f"{name}.fixed"
        return {"type": "fixed", "name": fixed, "size": fixed_size(t.precision),
                "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    return _leaf_type(name, t)


def _leaf_type(name: str, t: pa.DataType) -> Any:
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "bytes"
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t):
        logical = "timestamp-micros" if t.tz is not None else "local-timestamp-micros"
        return {"type": "long", "logicalType": logical}
    if pa.types.is_null(t):
        return "null"
    raise TypeError(f"format avro cannot hold column {name!r} of type {t}")


def fixed_size(precision: int) -> int:
    """Spark's ``minBytesForPrecision``: the fewest bytes whose two's complement holds every
    unscaled value of ``precision`` digits.

    >>> [fixed_size(p) for p in (1, 2, 3, 9, 10, 18, 38)]
    [1, 1, 2, 4, 5, 8, 16]
    """
    size = 1
    while 2 ** (8 * size - 1) < 10 ** precision:
        size += 1
    return size
