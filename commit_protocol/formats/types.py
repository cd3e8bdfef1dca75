"""Arrow type predicates and the encoding error, kept apart so that importing
:mod:`commit_protocol.formats` loads no ``pyarrow.compute``.
"""

from __future__ import annotations

import pyarrow as pa


def is_list(t: pa.DataType) -> bool:
    """True for variable-length list types (``list`` and ``large_list``)."""
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def is_nested(t: pa.DataType) -> bool:
    """True for the nested types Spark sends: list, struct, map."""
    return is_list(t) or pa.types.is_struct(t) or pa.types.is_map(t)


def is_stringlike(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_binarylike(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def require_columns(fmt: str, held: list[str], schema: pa.Schema | None) -> None:
    """Refuse a ``fmt`` file that lacks a column of ``schema`` (None: any file will do)."""
    from commit_protocol.vocabulary.errors import SchemaMismatchError

    missing = [name for name in schema.names if name not in held] if schema is not None else []
    if missing:
        raise SchemaMismatchError(f"{fmt} file has no column {missing}; it holds {held}")


def utc(t: pa.DataType) -> pa.DataType:
    """The same instant type in UTC: a metadata-only change that fixes the rendered offset."""
    return pa.timestamp(t.unit, "UTC") if pa.types.is_timestamp(t) and t.tz else t
