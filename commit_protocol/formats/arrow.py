"""Arrow helpers shared by the row formats (nested rebuilds, base64, string bytes, wire types)
and by the task writer and the readers (:func:`coalesce`).

A row format cannot hold every Arrow type as is (JSON has no binary, CSV no timestamp zone),
so each format maps a column to a *wire* array before writing and maps the parsed wire array
back with :func:`from_wire`. Everything here is column-at-a-time (Arrow compute or polars):
no Python loop runs per row. Runs on executors (encoding) and wherever files are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.formats.types import is_binarylike, is_list, is_stringlike

ArrayFn = Callable[[pa.Array], pa.Array]


def base64_encode(arr: pa.Array) -> pa.Array:
    """Binary -> base64 ``large_string`` (what Spark's JSON writer writes for binary)."""
    import polars as pl  # lazy: polars costs ~100 ms to import

    return pl.Series(arr).bin.encode("base64").to_arrow()


def base64_decode(arr: pa.Array) -> pa.Array:
    """Base64 strings -> ``large_binary``; nulls stay null."""
    import polars as pl

    return pl.Series(arr.cast(pa.large_string())).str.decode("base64").to_arrow()


def contiguous(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array: its only chunk as it is, several chunks concatenated.

    ``ChunkedArray.combine_chunks`` copies even a single chunk (2.7 ms per 1.4 million
    strings measured), and a row format's chunk arrives as one chunk per column: the task
    writer concatenated Spark's batches already.
    """
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def concat_bytes(lines: pa.Array) -> bytes:
    """The UTF-8 bytes of all values of a null-free string array, back to back.

    Reads the data buffer between the first and last offset instead of joining in Python.
    """
    if len(lines) == 0:
        return b""
    _, offsets, data = lines.buffers()
    view = memoryview(offsets).cast("B")
    view = view.cast("q") if pa.types.is_large_string(lines.type) else view.cast("i")
    start, end = view[lines.offset], view[lines.offset + len(lines)]
    return data[start:end].to_pybytes() if data is not None else b""


def join(*parts: pa.Array | str, sep: str = "") -> pa.Array:
    """Element-wise concatenation of ``large_string`` arrays and literals; null -> ``""``."""
    return pc.binary_join_element_wise(*_large(parts), pa.scalar(sep, pa.large_string()),
                                       null_handling="replace", null_replacement="")


def wrap(text: pa.Array, prefix: str, suffix: str) -> pa.Array:
    """``prefix + value + suffix`` for each ``large_string`` value; null stays null."""
    return pc.binary_join_element_wise(*_large((prefix, text, suffix)),
                                       pa.scalar("", pa.large_string()))


def _large(parts: tuple) -> list:
    return [pa.scalar(p, pa.large_string()) if isinstance(p, str) else p for p in parts]


# pyarrow's readers take int32 block sizes; a row "straddling" two blocks is an error that
# can also leave pyarrow's thread pool hung at exit, so callers size blocks to avoid it.
MAX_BLOCK = (1 << 31) - 1
_MIN_BLOCK = 16 << 20


def line_block_size(data: bytes) -> int:
    """A reader block size that no ``\\n``-terminated line of ``data`` can straddle.

    Twice the longest line leaves room for the partial line a block carries over.
    """
    import numpy as np  # a pyarrow dependency; only needed here

    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    starts = np.concatenate(([0], ends + 1))
    stops = np.concatenate((ends, [len(data)]))
    longest = int((stops - starts).max())
    return min(MAX_BLOCK, max(_MIN_BLOCK, 2 * longest + 2))


def has_non_finite(arr: pa.Array) -> bool:
    """True if a float array holds NaN or +-inf (nulls do not count)."""
    return bool(pc.any(pc.invert(pc.is_finite(arr))).as_py())


def float_text(arr: pa.Array, *, nan: str, inf: str) -> pa.Array:
    """Floats as the shortest round-trip decimal text, non-finite values spelled as asked.

    Arrow renders float32 with float32's own shortest form (``1.1``, not
    ``1.100000023841858``) and non-finite values as ``nan``/``inf``/``-inf``; a finite
    rendering never contains those letters, so substring replacement is exact.
    """
    text = arr.cast(pa.large_string())
    text = pc.replace_substring(text, "nan", nan)
    return pc.replace_substring(text, "inf", inf)


def _list_parts(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Zero-based offsets and the values a (possibly sliced) list array shows.

    Values hidden under null slots are dropped, so that a rebuilt child holds exactly what
    a writer emits (Arrow also refuses a validity mask together with sliced offsets).
    """
    lengths = pc.fill_null(pc.list_value_length(arr), 0)
    start = pa.array([0], lengths.type)
    return pa.concat_arrays([start, pc.cumulative_sum(lengths)]), arr.flatten()


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def rebuild_list(arr: pa.Array, values_fn: ArrayFn) -> pa.Array:
    """``arr`` with ``values_fn`` applied to its child values; nulls and lengths kept."""
    offsets, values = _list_parts(arr)
    cls = pa.LargeListArray if pa.types.is_large_list(arr.type) else pa.ListArray
    return cls.from_arrays(offsets, values_fn(values), mask=_mask(arr))


def rebuild_map(arr: pa.Array, keys_fn: ArrayFn, items_fn: ArrayFn) -> pa.Array:
    """``arr`` with ``keys_fn`` / ``items_fn`` applied to its keys and items."""
    entries = pa.struct([arr.type.key_field, arr.type.item_field])
    as_list = arr.view(pa.list_(pa.field("entries", entries, nullable=False)))
    offsets, pairs = _list_parts(as_list)
    keys, items = keys_fn(pairs.field(0)), items_fn(pairs.field(1))
    return pa.MapArray.from_arrays(offsets, keys, items, mask=_mask(arr))


def rebuild_struct(arr: pa.Array, child_fn: Callable[[int, pa.Array], pa.Array],
                   names: list[str]) -> pa.Array:
    """``arr`` with ``child_fn(index, child)`` applied to each field.

    ``flatten()`` honours slicing and marks children null where the struct is null.
    """
    children = [child_fn(i, child) for i, child in enumerate(arr.flatten())]
    fields = [pa.field(name, child.type) for name, child in zip(names, children, strict=True)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(arr))


def from_wire(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Map a parsed wire array back to ``target``: the inverse of every format's wire mapping.

    Wire leaves are the target itself or a type that casts to it exactly: strings for
    dates, timestamps (ISO 8601 with offset), decimals and map keys; base64 strings for
    binary; UTC for zoned timestamps.
    """
    if arr.type == target:
        return arr
    if pa.types.is_struct(target):
        names = [target.field(i).name for i in range(target.num_fields)]
        arr = rebuild_struct(arr, lambda i, c: from_wire(c, target.field(i).type), names)
    elif is_list(target):
        arr = rebuild_list(arr, lambda v: from_wire(v, target.value_type))
    elif pa.types.is_map(target):
        arr = rebuild_map(arr, lambda k: from_wire(k, target.key_type),
                          lambda v: from_wire(v, target.item_type))
    elif is_binarylike(target) and is_stringlike(arr.type):
        arr = base64_decode(arr)
    return arr.cast(target)


def from_wire_chunked(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """:func:`from_wire` applied chunk by chunk."""
    return pa.chunked_array([from_wire(chunk, target) for chunk in column.chunks], type=target)


def coalesce(batches: Iterable[pa.RecordBatch], chunk_bytes: int) -> Iterator[pa.RecordBatch]:
    """``batches`` concatenated into batches of at least ``chunk_bytes`` (the last may be
    smaller), in order; a batch already that large passes through uncopied."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        pending.append(batch)
        size += batch.nbytes
        if size >= chunk_bytes:
            yield _concat(pending)
            pending, size = [], 0
    if pending:
        yield _concat(pending)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
