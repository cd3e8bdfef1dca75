"""The terms of ``partitionBy``: a column (Hive-style, identity) or an Iceberg transform of
one, written as Iceberg's Spark DDL writes them (``PARTITIONED BY (days(ts), bucket(16, id),
region)``).

A term that transforms its column is *hidden* partitioning: the directory
(``ts_day=2026-12-01``) groups the rows, the column stays in the files, and the value of the
directory is computed by the transform (``commit_protocol.tables.iceberg.transforms``).
A plain column is what ``partitionBy`` always meant: its value names the directory and is
kept out of the files. Each term has the name Iceberg's Java ``PartitionSpec`` builder (and
so Spark's Iceberg writer) gives its partition field: the column for identity,
``<column>_day``, ``<column>_bucket``, ``<column>_trunc``...
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from commit_protocol.vocabulary.errors import OptionError

IDENTITY = "identity"
# Spark DDL's function names (and Iceberg's singular ones) -> Iceberg's transform names
_TIME = {"years": "year", "year": "year", "months": "month", "month": "month",
         "days": "day", "day": "day", "date": "day", "hours": "hour", "hour": "hour",
         "date_hour": "hour"}
_SUFFIX = {"year": "year", "month": "month", "day": "day", "hour": "hour",
           "bucket": "bucket", "truncate": "trunc", "void": "null"}
_CALL = re.compile(r"^(\w+)\s*\((.*)\)$", re.DOTALL)
_INT = re.compile(r"^\d+$")


@dataclass(frozen=True)
class PartitionTerm:
    """A partition field: its ``name`` (the directory's key), its ``source`` column and its
    ``transform`` in Iceberg's string form (``identity``, ``day``, ``bucket[16]``,
    ``truncate[4]``, ``void``...)."""

    name: str
    source: str
    transform: str = IDENTITY

    @property
    def hidden(self) -> bool:
        """Whether the directory's value is computed from the column (which the files keep)
        rather than the column's own value (which the files leave out)."""
        return self.transform != IDENTITY

    @property
    def ddl(self) -> str:
        """As ``partitionBy`` takes it: ``days(ts)``, ``bucket(16, id)``, ``region``."""
        if not self.hidden:
            return self.source
        kind, _, width = self.transform.partition("[")
        if width:
            return f"{kind}({width[:-1]}, {self.source})"
        return f"{kind}s({self.source})" if kind in _SUFFIX and kind != "void" else \
            f"{kind}({self.source})"


def split_terms(text: str) -> list[str]:
    """``partitionBy``'s terms: split on the commas outside parentheses.

    >>> split_terms("days(ts), bucket(16, id),region")
    ['days(ts)', 'bucket(16, id)', 'region']
    """
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(text[start:i].strip())
            start = i + 1
    terms.append(text[start:].strip())
    return [t for t in terms if t]


def parse_term(text: str, *, shown: str) -> PartitionTerm:
    """One term, ``shown`` naming the option in an error.

    >>> parse_term("bucket(16, id)", shown="")
    PartitionTerm(name='id_bucket', source='id', transform='bucket[16]')
    >>> parse_term("truncate(name, 4)", shown="").ddl
    'truncate(4, name)'
    >>> parse_term("days(ts)", shown="")
    PartitionTerm(name='ts_day', source='ts', transform='day')
    """
    call = _CALL.match(text.strip())
    if call is None:
        if "(" in text or ")" in text:
            raise OptionError(f"{shown}: {text!r} is not a column or a transform such as "
                              "days(ts) or bucket(16, id)")
        return PartitionTerm(text.strip(), text.strip())
    function, arguments = call.group(1).lower(), [a.strip() for a in call.group(2).split(",")]
    if function in _TIME and len(arguments) == 1 and arguments[0]:
        transform = _TIME[function]
    elif function in ("bucket", "truncate") and len(arguments) == 2:
        # Spark's DDL puts the width first, Iceberg's older docs last: either is clear
        widths = [i for i, a in enumerate(arguments) if _INT.match(a)]
        if len(widths) != 1 or int(arguments[widths[0]]) < 1 or not arguments[1 - widths[0]]:
            raise OptionError(f"{shown}: {text!r} takes a positive whole number and a column, "
                              f"as {function}(16, id)")
        transform = f"{function}[{int(arguments[widths[0]])}]"
        arguments = [arguments[1 - widths[0]]]
    elif function == IDENTITY and len(arguments) == 1 and arguments[0]:
        return PartitionTerm(arguments[0], arguments[0])
    else:
        raise OptionError(f"{shown}: {text!r} is not a transform Iceberg has; use years(c), "
                          "months(c), days(c), hours(c), bucket(N, c), truncate(W, c) or a "
                          "column")
    source = arguments[0]
    return PartitionTerm(f"{source}_{_SUFFIX[transform.partition('[')[0]]}", source, transform)


def identity_columns(terms: tuple[PartitionTerm, ...]) -> tuple[str, ...]:
    """The columns the directories hold instead of the files (identity terms)."""
    return tuple(t.source for t in terms if not t.hidden)


def refuse_transforms(terms: tuple[PartitionTerm, ...], *, table_format: str | None) -> None:
    """Iceberg's transforms partition Iceberg tables only: refused naming the option for an
    output without a table (``table_format`` None) or with a table of another format."""
    hidden = [t.ddl for t in terms if t.hidden]
    if not hidden:
        return
    with_table, other = ((f" with table.format={table_format}", f"a {table_format} table")
                         if table_format else ("", "an output without one"))
    raise OptionError(f"option partitionBy={', '.join(hidden)!r}{with_table}: Iceberg's "
                      f"transforms partition an Iceberg table (table.format=iceberg); {other} is "
                      "partitioned by columns (e.g. a column to_date(ts) of the stream)")
