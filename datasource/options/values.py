"""Option values as users give them: sizes, booleans, counts, the output's path and the
partition columns. Every error names the option and the bad value."""

from __future__ import annotations

import json
import os
import re

from commit_protocol.vocabulary.errors import OptionError
from commit_protocol.vocabulary.partition_terms import PartitionTerm, parse_term, split_terms
from datasource.options.names import WRITER_PARTITION_COLUMNS

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30}


def parse_size(key: str, text: str) -> int:
    """Bytes from ``"134217728"``, ``"64mb"``, ``"1g"``."""
    match = re.match(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$", text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise OptionError(f"option {key}={text!r}: expected a byte count such as 134217728, "
                          "'64mb' or '1g'")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def parse_bool(key: str, text: str) -> bool:
    """``true`` / ``false`` (any case), as Spark's own boolean options."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {key}={text!r}: expected true or false")
    return value == "true"


def parse_int(key: str, text: str, *, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {key}={text!r}: expected an integer >= {minimum}") from None
    if value < minimum:
        raise OptionError(f"option {key}={text!r}: expected an integer >= {minimum}")
    return value


def driver_path(path: str) -> str:
    """``path`` as tasks must take it: a relative local path made absolute where it was given,
    on the driver, as Spark makes its own file sink's path (a task would resolve it in its
    executor's working directory). URLs and absolute paths are returned as they are.

    >>> driver_path("/data/out"), driver_path("s3://bucket/out")
    ('/data/out', 's3://bucket/out')
    >>> driver_path("out") == os.path.join(os.getcwd(), "out")
    True
    """
    if "://" in path or os.path.isabs(path):
        return path
    return os.path.abspath(path)


def partition_terms(option: str | None, writer_call: str | None) -> tuple[PartitionTerm, ...]:
    """The partition terms, from the ``partitionBy`` option or the writer's
    ``.partitionBy(...)`` (``__partition_columns``, a JSON list); both at once must name the
    same terms in the same order. A term is a column or, for an Iceberg table, an Iceberg
    transform of one (``days(ts)``, ``bucket(16, id)``).

    >>> [t.ddl for t in partition_terms("day, hour", None)]
    ['day', 'hour']
    >>> [t.name for t in partition_terms("days(ts), bucket(16, id)", None)]
    ['ts_day', 'id_bucket']
    >>> partition_terms("hour", '["day"]')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.OptionError: option partitionBy='hour' and ...
    """
    from_option = _partition_by(option or "")
    if writer_call is None:
        return from_option
    from_call = _writer_columns(writer_call)
    if option is not None and from_option != from_call:
        call = ", ".join(repr(t.ddl) for t in from_call)
        raise OptionError(f"option partitionBy={option!r} and .partitionBy({call}) name "
                          "different columns: give the columns once, either way")
    return from_call


def _writer_columns(text: str) -> tuple[PartitionTerm, ...]:
    try:
        columns = json.loads(text)
    except ValueError:
        columns = None
    if not isinstance(columns, list) or not all(isinstance(c, str) and c for c in columns):
        raise OptionError(f"option {WRITER_PARTITION_COLUMNS}={text!r}: expected a JSON list "
                          "of column names (what .partitionBy(...) sets)")
    return _partition_by(",".join(columns), shown=f".partitionBy({text[1:-1]})")


def _partition_by(text: str, *, shown: str = "") -> tuple[PartitionTerm, ...]:
    shown = shown or f"option partitionBy={text!r}"
    terms = tuple(parse_term(term, shown=shown) for term in split_terms(text))
    names = [t.name for t in terms]
    if len(set(names)) != len(names):
        raise OptionError(f"{shown}: a column is listed twice")
    return terms


