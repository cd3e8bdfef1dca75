"""CSV: a header line per file, then one line per row: values rendered column-at-a-time with
Arrow compute where the table below needs it, lines joined by polars' CSV writer.

Why not ``pyarrow.csv.write_csv``: it escapes a quote by doubling it (``"a""b"``), and
Spark's CSV reader, whose default escape character is ``\\``, then returns ``"a""b"``
with the quotes, and a value ending in ``\\`` swallows the rest of its row. This writer
emits what Spark's reader takes back exactly with its default options:

===============  ===========================================  ==============================
value            written as                                   why
===============  ===========================================  ==============================
string           quoted when its column needs it (below);      Spark's default escape
                 ``\\`` -> ``\\\\``, ``"`` -> ``\\"``
null             empty, unquoted                              Spark's default ``nullValue``
empty string     ``""``                                       distinct from null for us;
                                                              Spark reads it as null
line break       kept inside quotes                           Spark needs ``multiLine=true``
float NaN/inf    ``NaN``, ``Inf``, ``-Inf``                   Spark's ``nanValue`` etc.
binary           base64, quoted                               Spark's CSV has no binary type
timestamp (tz)   ``2020-01-01 01:02:03.456789Z`` (UTC)         exact instant, zone-free
timestamp_ntz    ``2020-01-01 01:02:03.456789``
===============  ===========================================  ==============================

A string column is quoted, every value of it, when any value of the chunk is empty or holds
a quote, a backslash, a comma or a line break; other string columns are written bare, as
Spark's writer writes them (quoting all of them made files 11% larger than Spark's). One
search of the column's data buffer decides for most columns. Finite floats are written in
their shortest round-trip form by polars (``2.0``, ``1e-9``); a chunk's float column that
holds a non-finite value is written by Arrow (``2``, ``1e-09``, ``NaN``): the same values.

Runs on executors (encode) and wherever committed files are read (decode).
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.formats.arrow import (
    MAX_BLOCK,
    base64_encode,
    concat_bytes,
    contiguous,
    float_text,
    from_wire_chunked,
    has_non_finite,
    wrap,
)
from commit_protocol.formats.types import is_binarylike, is_stringlike, utc
from commit_protocol.vocabulary.errors import SchemaMismatchError


def csv_header(names: list[str]) -> bytes:
    """The header line: every name quoted and escaped like a string value."""
    return (",".join(_quote_text(name) for name in names) + "\n").encode()


def encode(table: pa.Table, *, with_header: bool) -> bytes:
    """CSV lines for ``table``, after the header when ``with_header`` (even with no rows).

    polars' CSV writer joins the columns into lines (about half the CPU of one Arrow
    element-wise join with every number cast to text first: 44 against 90 ms per 500,000
    rows of long, string, double, string); each column arrives as polars should write it
    (:func:`_polars_input`), with ``quote_style="never"``, so polars adds no quotes of its own.
    """
    header = csv_header(table.column_names) if with_header else b""
    if table.num_rows == 0:
        return header
    return header + _polars_lines([_polars_input(contiguous(c)) for c in table.columns])


def _polars_input(arr: pa.Array) -> pa.Array:
    """``arr`` as polars should write it.

    Integers, booleans, floats without a non-finite value and string columns that need no
    quotes go as they are: polars writes integers and booleans as Arrow does and finite
    floats in their shortest round-trip form (``2.0`` where Arrow writes ``2``; the same
    value for every reader). Anything else goes as its CSV text (:func:`_cells`: quoted and
    escaped strings, ``NaN``/``Inf``, UTC timestamps, base64). Strings travel as
    ``string_view``, polars' own layout, which it takes without rebuilding the values.
    """
    t = arr.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return arr
    if pa.types.is_floating(t) and not has_non_finite(arr):
        return arr
    if is_stringlike(t) and not _needs_quotes(arr):
        return arr.cast(pa.string_view())  # nulls: empty, unquoted
    return _cells(arr).cast(pa.string_view())


def _polars_lines(columns: list[pa.Array]) -> bytes:
    """One line per row of ``columns`` (values separated by commas; null as nothing).

    The frame's columns get positional names: Spark allows a name twice, polars does not.
    """
    import polars as pl  # lazy: polars costs ~100 ms to import

    names = [f"c{i}" for i in range(len(columns))]
    frame = pl.from_arrow(pa.Table.from_arrays(columns, names=names))
    assert isinstance(frame, pl.DataFrame)  # a table converts to a frame, never a series
    buffer = io.BytesIO()
    frame.write_csv(buffer, include_header=False, quote_style="never", null_value="",
                    line_terminator="\n")
    return buffer.getvalue()


def _cells(arr: pa.Array) -> pa.Array:
    """Each value's CSV text as ``large_string``; null stays null (written as nothing)."""
    t = arr.type
    if is_stringlike(t):
        return wrap(_escape(arr), '"', '"')
    if is_binarylike(t):
        return wrap(base64_encode(arr), '"', '"')  # base64 has no quote or backslash
    if pa.types.is_floating(t) and has_non_finite(arr):
        return float_text(arr, nan="NaN", inf="Inf")
    if pa.types.is_timestamp(t) and t.tz:
        # Arrow renders zoned timestamps 20x slower than naive ones: render the UTC wall
        # clock (a metadata-only cast) and append the zone.
        return wrap(arr.cast(pa.timestamp(t.unit)).cast(pa.large_string()), "", "Z")
    return arr.cast(pa.large_string())


_SPECIAL = (b'"', b"\\", b",", b"\n", b"\r")


def _needs_quotes(arr: pa.Array) -> bool:
    """Whether ``arr``'s values must be quoted: an empty one (else it reads back as null)
    or one holding a character special to CSV. One search of the values' bytes each."""
    values = concat_bytes(arr)
    if any(char in values for char in _SPECIAL):
        return True
    return pc.any(pc.equal(pc.binary_length(arr), 0)).as_py() is True


def _escape(arr: pa.Array) -> pa.Array:
    """``\\`` and ``"`` escaped with ``\\``; a scan finds most columns need neither."""
    text = arr.cast(pa.large_string())
    for char in ("\\", '"'):
        if pc.any(pc.match_substring(text, char)).as_py():
            text = pc.replace_substring(text, char, "\\" + char)
    return text


def _quote_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def decode(data: bytes, schema: pa.Schema) -> pa.Table:
    """Parse :func:`encode` output (one header, then chunks): the columns of ``schema`` that
    the header names, typed as ``schema`` says, in the header's order. Others the header
    names are left out (a reader may ask for some columns only); a file written before a
    schema change (``schema.evolution``) names fewer columns than ``schema``: the reader
    fills them in.

    Raises
    ------
    SchemaMismatchError
        If the header names a column twice, or none of ``schema``'s.
    """
    if not data:
        return schema.empty_table()
    names = _read(data[:header_end(data) or len(data)], {}).column_names
    wanted = [name for name in names if name in schema.names]
    if len(set(names)) != len(names) or not wanted:  # not a file of this path
        raise SchemaMismatchError(f"csv header names columns {names}; expected {schema.names}")
    table = _read(data, {name: _wire_type(schema.field(name).type) for name in wanted},
                  include=wanted)
    fields = [schema.field(name) for name in wanted]
    arrays = [from_wire_chunked(table.column(f.name), f.type) for f in fields]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def header_end(data: bytes) -> int:
    r"""Where the header line of a file starting with ``data`` ends (0: not in ``data``):
    the first line break outside a quoted name.

    >>> header_end(b'"a","b\nc"\n1,2\n')
    10
    """
    # A header is short: look at the block's start first, not a copy of the whole block
    # (every block a reader decodes starts with the file's header).
    for size in (_HEADER_PROBE, len(data)):
        blanked = bytes(data[:size]).replace(b"\\\\", b"\0\0").replace(b'\\"', b"\0\0")
        quoted = False
        for i, byte in enumerate(blanked):
            if byte == 0x22:
                quoted = not quoted
            elif byte == 0x0A and not quoted:
                return i + 1
        if size >= len(data):
            break
    return 0


_HEADER_PROBE = 64 << 10


def _wire_type(t: pa.DataType) -> pa.DataType:
    if is_binarylike(t):
        return pa.large_string()
    return utc(t)


def _read(data: bytes, column_types: dict[str, pa.DataType],
          include: list[str] | None = None) -> pa.Table:
    import pyarrow.csv as pcsv

    # An empty line is a row: the null of a one-column table (pyarrow skips it by default)
    parse = pcsv.ParseOptions(quote_char='"', double_quote=False, escape_char="\\",
                              newlines_in_values=True, ignore_empty_lines=False)
    # only an unquoted empty field is null; pyarrow's default list would also turn
    # the text NaN into null
    convert = pcsv.ConvertOptions(column_types=column_types, null_values=[""],
                                  include_columns=include or [],
                                  strings_can_be_null=True, quoted_strings_can_be_null=False,
                                  true_values=["true"], false_values=["false"])
    # Quoted values may hold line breaks, so row lengths are unknown without parsing: one
    # block for the whole file (conversion still runs per column in parallel).
    read = pcsv.ReadOptions(block_size=min(MAX_BLOCK, len(data) + 1))
    return pcsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse,
                         convert_options=convert)


def last_row_end(data: bytes) -> int:
    r"""Where the last whole row of ``data`` ends (0: none ends in it), ``data`` starting at a
    row's start: after the last line break outside a quoted value.

    A quote delimits a value unless escaped: this writer escapes ``\`` and ``"`` with a
    backslash inside quoted values and writes no backslash outside them, so with the escape
    pairs blanked out, every remaining ``"`` opens or closes a value, and a line break ends
    a row when an even number of quotes precede it.

    >>> last_row_end(b'1,"a\nb"\n2,"c\\\\"\n3,"d\n')
    16
    """
    import numpy as np

    blanked = bytes(data).replace(b"\\\\", b"\0\0").replace(b'\\"', b"\0\0")
    codes = np.frombuffer(blanked, np.uint8)
    quotes = np.flatnonzero(codes == ord('"'))
    breaks = np.flatnonzero(codes == ord("\n"))
    outside = breaks[np.searchsorted(quotes, breaks) % 2 == 0]
    return int(outside[-1]) + 1 if len(outside) else 0
