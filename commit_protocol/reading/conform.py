"""Rows of a file written before a schema change, read as the newest schema.

After ``schema.evolution=addColumns`` a path holds files of several schemas: the newer ones
hold more columns (also inside structs). A reader asks a file only for the columns it holds
(:func:`held`), then fills in the rest as nulls (:func:`conform`). A column missing from a
file that no recorded change added is not an old file's gap but damage: refused by name.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from commit_protocol.vocabulary.errors import SchemaMismatchError


def held(schema: pa.Schema, stored: pa.Schema, *, added: Iterable[str], what: str
         ) -> pa.Schema:
    """The fields of ``schema`` that a file of ``stored`` columns holds (nested ones too),
    with ``schema``'s types; ``SchemaMismatchError`` naming ``what`` when it lacks a column
    that is not among the ``added`` paths."""
    missing: list[str] = []
    stored_types = {f.name: f.type for f in stored}
    fields = _held_fields(list(schema), stored_types, "", missing)
    unexpected = [path for path in missing if path not in set(added)]
    if unexpected:
        raise SchemaMismatchError(f"{what} has no column {unexpected}; it holds "
                                  f"{stored.names}")
    return pa.schema(fields)


def _held_fields(fields: list[pa.Field], stored: dict[str, pa.DataType], prefix: str,
                 missing: list[str]) -> list[pa.Field]:
    kept = []
    for field in fields:
        path = prefix + field.name
        if field.name not in stored:
            missing.append(path)
            continue
        kept.append(field.with_type(_held_type(field.type, stored[field.name], path, missing)))
    return kept


def _held_type(t: pa.DataType, stored: pa.DataType, path: str,
               missing: list[str]) -> pa.DataType:
    if pa.types.is_struct(t) and pa.types.is_struct(stored):
        # children in the stored order: some readers (ORC's) rebuild structs by position
        inner = {stored.field(i).name: stored.field(i).type for i in range(stored.num_fields)}
        wanted = {f.name: f for f in t}
        missing += [path + "." + name for name in wanted if name not in inner]
        return pa.struct([wanted[name].with_type(_held_type(wanted[name].type, inner[name],
                                                            f"{path}.{name}", missing))
                          for name in inner if name in wanted])
    if _is_list(t) and _is_list(stored):
        value = _held_type(t.value_type, stored.value_type, path + "[]", missing)
        return pa.large_list(value) if pa.types.is_large_list(t) else pa.list_(value)
    if pa.types.is_map(t) and pa.types.is_map(stored):
        item = _held_type(t.item_type, stored.item_type, path + "{}", missing)
        return pa.map_(t.key_type, item)
    return t


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (of the fields :func:`held` kept) as ``schema``: the columns it lacks, at any
    depth, are nulls. A batch already of ``schema`` is returned as it is."""
    if batch.schema.equals(schema):
        return batch
    arrays = [_conform_array(batch.column(f.name), f.type) if f.name in batch.schema.names
              else pa.nulls(batch.num_rows, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _conform_array(values: pa.Array, t: pa.DataType) -> pa.Array:
    if values.type.equals(t):
        return values
    mask = values.is_null() if values.null_count else None
    if pa.types.is_struct(t):
        names = [values.type.field(i).name for i in range(values.type.num_fields)]
        flat = dict(zip(names, values.flatten(), strict=True))
        children = [_conform_array(flat[f.name], f.type) if f.name in flat
                    else pa.nulls(len(values), f.type) for f in t]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if _is_list(t):
        if values.offset:
            values = pa.concat_arrays([values])  # offsets from zero
        items = _conform_array(values.values, t.value_type)
        return type(values).from_arrays(values.offsets, items, type=t, mask=mask)
    if pa.types.is_map(t):
        if values.offset:
            values = pa.concat_arrays([values])
        items = _conform_array(values.items, t.item_type)
        return pa.MapArray.from_arrays(values.offsets, values.keys, items, type=t, mask=mask)
    return values.cast(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)
