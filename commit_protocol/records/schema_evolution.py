"""Schemas that grow: the changes ``schema.evolution`` accepts, and their record.

A path's schema is fixed when its first batch commits. With ``schema.evolution=addColumns`` a
restarted query may add nullable columns, at the top level or inside structs (also structs in
arrays and map values), in any position: rows already written read back with nulls there.
With ``widenTypes`` (alone, or ``addColumns,widenTypes``) it may widen a column's type as
Delta's type widening and Iceberg's promotion do (:func:`widens`): the files written before
keep their type and every file in progress is finished at the change (a file holds one type
per column); readers read the old files as the wider type (rotsink's; Spark's Parquet and
ORC readers given the schema: they refuse to merge the two types themselves).
Everything else stays refused when the query starts, naming the column and the change,
because some reader would misread the rows already written:

==========================  =====================================================
change                      why refused
==========================  =====================================================
a column dropped (renamed)  its rows would vanish from every reader
a type changed, not widened the rows already written hold values of the old type
                            the new one cannot say (or says otherwise)
a nullable column NOT NULL  rows already written hold nulls there
a column added NOT NULL     rows already written have no value for it
==========================  =====================================================

A column made nullable is accepted (old rows simply hold no null). Schemas are Spark's JSON
form (``StructType.json()``): this module needs no Spark.

The state records each change as ``[batch, [added paths]]`` under ``extra.schema_changes``
(and its widened types under ``extra.schema_widenings``): readers accept files that lack
exactly those columns, and the change feed knows where a schema changed without reading every
state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from commit_protocol.vocabulary.errors import SchemaMismatchError

NONE, ADD_COLUMNS, WIDEN_TYPES = "none", "addColumns", "widenTypes"
MODES = (NONE, ADD_COLUMNS, WIDEN_TYPES, f"{ADD_COLUMNS},{WIDEN_TYPES}")
_CHANGES = "schema_changes"
_WIDENINGS = "schema_widenings"  # [[batch, [[path, from, to], ...]], ...]: beside _CHANGES,
# whose entries releases before type widening unpack as pairs
_INTEGERS = ("byte", "short", "integer", "long")


@dataclass(frozen=True)
class SchemaChange:
    """An accepted change: the dotted paths of the fields it adds (``col``, ``col.child``,
    ``col[].child`` inside an array, ``col{}.child`` inside a map's values), and the
    columns whose type it widens: ``(path, from, to)`` in Spark's type names."""

    added: tuple[str, ...]
    widened: tuple[tuple[str, str, str], ...] = ()


def adds_columns(mode: str) -> bool:
    return ADD_COLUMNS in mode.split(",")


def widens_types(mode: str) -> bool:
    return WIDEN_TYPES in mode.split(",")


def widens(old: Any, new: Any) -> bool:
    """Whether Spark type ``new`` widens ``old`` as Delta's type widening and Iceberg's
    promotion do: a wider integer, float to double, a decimal with more digits on both
    sides of the point, date to timestamp_ntz.

    >>> widens("integer", "long"), widens("decimal(10,2)", "decimal(12,4)")
    (True, True)
    >>> widens("long", "integer"), widens("decimal(10,2)", "decimal(10,4)")
    (False, False)
    """
    if not isinstance(old, str) or not isinstance(new, str) or old == new:
        return False
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) > _INTEGERS.index(old)
    if (old, new) in (("float", "double"), ("date", "timestamp_ntz")):
        return True
    before, after = decimal_digits(old), decimal_digits(new)
    if before is None or after is None:
        return False
    (precision, scale), (wider, new_scale) = before, after
    return new_scale >= scale and wider - new_scale >= precision - scale


def decimal_digits(t: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of Spark's ``decimal(p,s)``; None for another type."""
    if not t.startswith("decimal(") or not t.endswith(")"):
        return None
    precision, scale = t[len("decimal("):-1].split(",")
    return int(precision), int(scale)


def accepted(old_json: str, new_json: str, mode: str) -> SchemaChange:
    """The change from ``old_json`` to ``new_json`` that ``schema.evolution=mode`` allows;
    ``SchemaMismatchError`` naming the column and the mode otherwise."""
    change = compare(old_json, new_json, widen=widens_types(mode))
    if change.added and not adds_columns(mode):
        raise SchemaMismatchError(
            f"column {change.added[0]} is added, and schema.evolution={mode} adds no columns; "
            f"set schema.evolution={ADD_COLUMNS},{WIDEN_TYPES} to add columns too")
    return change


def into_committed(config: Any, committed_json: str, given_json: str
                   ) -> tuple[tuple[str, str], ...]:
    """With ``errors.mode=quarantine`` and no ``widenTypes``: the top-level integer and
    decimal columns a query gives wider than the path committed them, as ``(name, committed
    type)``, when that is the whole difference. The tasks write them as committed and keep
    the values that do not fit in the quarantine (reason ``committed_type``); the path's
    schema stays. ``()`` otherwise (the same columns, or another change)."""
    if config.quarantine is None or widens_types(config.schema_evolution) or \
            same_columns(committed_json, given_json):
        return ()
    try:
        change = compare(committed_json, given_json, widen=True)
    except SchemaMismatchError:
        return ()
    exact = all(old in _INTEGERS or old.startswith("decimal(") for _, old, _ in change.widened)
    top = all(not set(path) & set(".[{") for path, _, _ in change.widened)
    if change.added or not change.widened or not exact or not top:
        return ()
    return tuple((path, old) for path, old, _ in change.widened)


def compare(old_json: str, new_json: str, *, widen: bool = False) -> SchemaChange:
    """The fields ``new_json`` adds to ``old_json`` (and, ``widen``, the types it widens);
    ``SchemaMismatchError`` naming the first column changed otherwise (see the module
    docstring).

    >>> old = '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true}]}'
    >>> new = ('{"type":"struct","fields":[{"name":"b","type":"string","nullable":true},'
    ...        '{"name":"a","type":"long","nullable":true}]}')
    >>> compare(old, new)
    SchemaChange(added=('b',), widened=())
    >>> compare(new, old)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.SchemaMismatchError: column b was dropped (or renamed): ...
    """
    added: list[str] = []
    widened: list[tuple[str, str, str]] | None = [] if widen else None
    _compare_structs(json.loads(old_json), json.loads(new_json), "", added, widened)
    return SchemaChange(tuple(added), tuple(widened or ()))


def _compare_structs(old: dict, new: dict, prefix: str, added: list[str],
                     widened: list[tuple[str, str, str]] | None) -> None:
    old_fields = {f["name"]: f for f in old["fields"]}
    new_fields = {f["name"]: f for f in new["fields"]}
    for name, field in old_fields.items():
        path = prefix + name
        if name not in new_fields:
            raise SchemaMismatchError(
                f"column {path} was dropped (or renamed): the rows already written hold it, "
                "and rotsink adds columns only (schema.evolution=addColumns); write the new "
                "schema to a new path")
        later = new_fields[name]
        if field.get("nullable", True) and not later.get("nullable", True):
            raise SchemaMismatchError(
                f"column {path} became NOT NULL: the rows already written may hold nulls "
                "there; keep it nullable")
        _compare_types(field["type"], later["type"], path, added, widened)
    for name, field in new_fields.items():
        if name in old_fields:
            continue
        path = prefix + name
        if not field.get("nullable", True):
            raise SchemaMismatchError(
                f"column {path} is added NOT NULL: the rows already written have no value "
                "for it; add it nullable")
        added.append(path)


def _compare_types(old: Any, new: Any, path: str, added: list[str],
                   widened: list[tuple[str, str, str]] | None) -> None:
    kind = old.get("type") if isinstance(old, dict) else None
    if kind is not None and isinstance(new, dict) and new.get("type") == kind:
        if kind == "struct":
            _compare_structs(old, new, path + ".", added, widened)
            return
        if kind == "array":
            _compare_contained(old, new, "containsNull", path)
            _compare_types(old["elementType"], new["elementType"], path + "[]", added,
                           widened)
            return
        if kind == "map":
            if old["keyType"] != new["keyType"]:
                raise _type_changed(path + " (map keys)", old["keyType"], new["keyType"])
            _compare_contained(old, new, "valueContainsNull", path)
            _compare_types(old["valueType"], new["valueType"], path + "{}", added, widened)
            return
    if old != new and widened is not None and widens(old, new):
        widened.append((path, old, new))
    elif old != new:
        raise _type_changed(path, old, new, widening=widened is None and widens(old, new))


def _compare_contained(old: dict, new: dict, key: str, path: str) -> None:
    if old.get(key, True) and not new.get(key, True):
        raise SchemaMismatchError(f"column {path}: its elements became NOT NULL; the rows "
                                  "already written may hold nulls there")


def _type_changed(path: str, old: Any, new: Any, *, widening: bool = False
                  ) -> SchemaMismatchError:
    if widening:
        return SchemaMismatchError(
            f"column {path} widened from {_type_name(old)} to {_type_name(new)}: set "
            f"schema.evolution={WIDEN_TYPES} (or {ADD_COLUMNS},{WIDEN_TYPES}) to widen it; "
            "files written before keep their type and read as the wider one")
    return SchemaMismatchError(
        f"column {path} changed type from {_type_name(old)} to {_type_name(new)}: rotsink "
        "adds columns and widens types only (a wider integer, float to double, a wider "
        "decimal, date to timestamp_ntz); write the new type to a new column or path")


def _type_name(t: Any) -> str:
    return t if isinstance(t, str) else t.get("type", json.dumps(t))


def same_columns(a_json: str, b_json: str) -> bool:
    """Whether two schemas have the same columns, in the same order, of the same types (as
    Spark's ``simpleString`` compares them): nullability and metadata aside, which Spark's
    file sources relax anyway and a path never records a change for."""
    return _columns(json.loads(a_json)) == _columns(json.loads(b_json))


_NULLABILITY = ("nullable", "containsNull", "valueContainsNull", "metadata")


def _columns(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _columns(v) for k, v in node.items() if k not in _NULLABILITY}
    if isinstance(node, list):
        return [_columns(v) for v in node]
    return node


def schema_change(state: Any, schema_json: str, config: Any) -> SchemaChange | None:
    """The change a batch writing ``schema_json`` makes to the committed ``state`` (None: the
    same columns); refused with ``SchemaMismatchError`` unless ``config`` (a ``SinkConfig``)
    allows it. The query checks the same when it starts; this is the commit's own guard."""
    if same_columns(state.schema_json, schema_json) or \
            into_committed(config, state.schema_json, schema_json):
        return None
    if config.schema_evolution == NONE:
        raise SchemaMismatchError(f"{config.path}: this batch writes another schema than the "
                                  "one committed and schema.evolution is none")
    return accepted(state.schema_json, schema_json, config.schema_evolution)


def retires(config: Any) -> bool:
    """Whether a schema change finishes the files in progress: in every format that fixes its
    columns at the file's head (CSV's header, Parquet, ORC, staged rows); JSON lines files
    continue, each row naming its fields."""
    from commit_protocol.formats import FORMATS

    return not FORMATS[config.format].schema_in_rows


def retires_in_progress(state: Any, schema_json: str, config: Any) -> bool:
    """Whether a batch writing ``schema_json`` after ``state`` finishes ``state``'s files in
    progress (the tasks' plan and the commit decide it alike)."""
    if same_columns(state.schema_json, schema_json) or \
            into_committed(config, state.schema_json, schema_json):
        return False
    try:  # a widened type: a file holds one type per column, in every format
        widened = compare(state.schema_json, schema_json, widen=True).widened
    except SchemaMismatchError:
        widened = ()
    return bool(widened) or retires(config)


# -- the record in the state ------------------------------------------------------------------
def recorded(extra: dict[str, Any]) -> list[tuple[int, tuple[str, ...]]]:
    """The changes recorded in a state's ``extra``: ``(batch, added paths)``, oldest first."""
    return [(int(batch), tuple(str(p) for p in paths))
            for batch, paths in extra.get(_CHANGES, [])]


def with_change(extra: dict[str, Any], batch: int, change: SchemaChange) -> dict[str, Any]:
    """``extra`` with ``change`` recorded as made by ``batch``."""
    changes = [[b, list(paths)] for b, paths in recorded(extra)]
    extra = {**extra, _CHANGES: [*changes, [batch, list(change.added)]]}
    if change.widened:
        extra[_WIDENINGS] = [*extra.get(_WIDENINGS, []),
                             [batch, [list(w) for w in change.widened]]]
    return extra


def widenings(extra: dict[str, Any]) -> list[tuple[int, tuple[tuple[str, str, str], ...]]]:
    """The widened types recorded in a state's ``extra``: ``(batch, ((path, from, to)...))``,
    oldest first."""
    return [(int(batch), tuple((str(p), str(a), str(b)) for p, a, b in widened))
            for batch, widened in extra.get(_WIDENINGS, [])]


def added_paths(extra: dict[str, Any]) -> frozenset[str]:
    """Every path some recorded change added: a file may lack these."""
    return frozenset(path for _, paths in recorded(extra) for path in paths)


def evolved(state: Any, schema_json: str, batch: int, change: SchemaChange) -> Any:
    """``state`` (a ``SinkState``) carrying ``schema_json``, with ``change`` recorded."""
    return replace(state, schema_json=schema_json,
                   extra=with_change(state.extra, batch, change))


def with_columns_of(schema_json: str, other_json: str) -> str:
    """Spark schema ``schema_json`` with the columns of ``other_json`` it lacks, after its own.

    >>> with_columns_of('{"type":"struct","fields":[{"name":"a"}]}',
    ...                 '{"type":"struct","fields":[{"name":"a"},{"name":"b"}]}')
    '{"type": "struct", "fields": [{"name": "a"}, {"name": "b"}]}'
    """
    schema, other = json.loads(schema_json), json.loads(other_json)
    have = {f["name"] for f in schema["fields"]}
    added = [f for f in other["fields"] if f["name"] not in have]
    return json.dumps({**schema, "fields": [*schema["fields"], *added]})
