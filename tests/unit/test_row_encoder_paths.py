"""The row encoders' polars paths: CSV lines written by polars' CSV writer, JSON strings
handed to polars as ``string_view``; each pinned against a reference and the decoder."""

from __future__ import annotations

import io
import math
import random
import struct

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from commit_protocol.formats import decode_rows, encode_rows
from commit_protocol.formats.arrow import coalesce

STRINGS = ["plain", 'q"uo""te', "com,ma", "new\nline", "cr\rlf", "back\\slash", "tail\\", "",
           None, "ü€😀\u2028", " pad ", "\x00\x01\x1f", "NaN", "null", '{"a":1}', "/slash"]


def random_floats(n: int, seed: int) -> list[float]:
    """Doubles from random bit patterns (every magnitude, subnormals) plus the usual edges."""
    rng = random.Random(seed)
    values = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
              for _ in range(n)]
    edges = [0.0, -0.0, 1.0, 0.1, 1 / 3, 1e16, 1e-7, 123456789012345680.0, 5e-324,
             1.7976931348623157e308, 2.0**53, -2.5]
    return [v for v in values if math.isfinite(v)] + edges


def test_csv_finite_floats_are_short_text_that_reads_back_exactly():
    values = random_floats(5000, seed=1)
    table = pa.table({"f64": pa.array(values, pa.float64()),
                      "f32": pa.array(values, pa.float64()).cast(pa.float32(),
                                                                  safe=False)})
    data = encode_rows("csv", table, with_header=False)
    lines = data.decode().splitlines()
    assert len(lines) == len(values)
    for line, f64, f32 in zip(lines, table["f64"].to_pylist(), table["f32"].to_pylist(),
                              strict=True):
        text64, text32 = line.split(",")
        assert float(text64) == f64
        assert len(text64) <= len(repr(f64)) + 2  # shortest digits: "1e-9" for 1e-09
        if math.isfinite(f32):
            assert struct.unpack("<f", struct.pack("<f", float(text32)))[0] == f32
    back = decode_rows("csv", encode_rows("csv", table, with_header=True), table.schema)
    assert back.equals(table)


def test_csv_columns_with_one_name_twice():
    # Spark allows duplicate column names; polars does not, so its frame gets positional ones
    table = pa.Table.from_arrays([pa.array([1, 2]), pa.array(["x", "y,z"])], names=["a", "a"])
    assert encode_rows("csv", table, with_header=True) == b'"a","a"\n1,"x"\n2,"y,z"\n'


def test_csv_every_value_kind_in_one_chunk_reads_back():
    n = 3 * len(STRINGS)
    ids = pa.array(range(n), pa.int64())
    table = pa.table({
        "i8": pc.cast(pc.bit_wise_and(ids, 127), pa.int8()),
        "b": pa.array([None if i % 5 == 0 else i % 2 == 0 for i in range(n)]),
        "f": pa.array([[float("nan"), None, 2.0, -float("inf")][i % 4] for i in range(n)]),
        "finite": pa.array([None if i % 3 == 0 else i / 7 for i in range(n)]),
        "s": pa.array([STRINGS[i % len(STRINGS)] for i in range(n)]),
        "bare": pa.array([None if i % 4 == 0 else f"v{i}" for i in range(n)],
                         pa.large_string()),
        "ts": pa.array(range(n), pa.timestamp("us", tz="UTC")),
    })
    data = encode_rows("csv", table, with_header=True)
    assert decode_rows("csv", data, table.schema).to_pylist() == table.to_pylist() or \
        _same_with_nan(decode_rows("csv", data, table.schema), table)


def _same_with_nan(actual: pa.Table, expected: pa.Table) -> bool:
    def norm(v):
        return "NaN" if isinstance(v, float) and math.isnan(v) else v
    return [{k: norm(v) for k, v in r.items()} for r in actual.to_pylist()] == \
        [{k: norm(v) for k, v in r.items()} for r in expected.to_pylist()]


def test_csv_bare_columns_keep_their_bytes():
    table = pa.table({"i": [1, None, -3], "s": ["a b", None, "c"], "b": [True, False, None]})
    assert encode_rows("csv", table, with_header=False) == b"1,a b,true\n,,false\n-3,c,\n"


def test_csv_one_chunk_of_many_batches_equals_their_chunks_when_no_column_needs_quotes():
    ids = pa.array(range(30_000), pa.int64())
    table = pa.table({"id": ids, "s": pc.cast(ids, pa.string()),
                      "f": pc.divide(pc.cast(ids, pa.float64()), 7.0)})
    batches = table.to_batches(max_chunksize=10_000)
    (chunk,) = coalesce(batches, 1 << 40)
    whole = encode_rows("csv", chunk, with_header=True)
    parts = b"".join(encode_rows("csv", b, with_header=i == 0) for i, b in enumerate(batches))
    assert whole == parts


def _polars_reference(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    frame.write_ndjson(buffer)
    return buffer.getvalue()


def test_jsonl_string_views_write_the_bytes_polars_writes_for_arrow_strings():
    n = 4 * len(STRINGS)
    table = pa.table({"id": pa.array(range(n), pa.int64()),
                      "s": pa.array([STRINGS[i % len(STRINGS)] for i in range(n)]),
                      "ls": pa.array([STRINGS[-1 - i % len(STRINGS)] for i in range(n)],
                                     pa.large_string()),
                      "f": pa.array([i / 3 for i in range(n)])})
    sliced = table.slice(5, n - 9)  # non-zero offsets, as Spark's batches may have
    assert encode_rows("jsonl", sliced, with_header=False) == _polars_reference(sliced)
    assert decode_rows("jsonl", encode_rows("jsonl", sliced, with_header=False),
                       table.schema).equals(sliced.combine_chunks())


def test_jsonl_one_chunk_of_many_batches_equals_their_chunks():
    ids = pa.array(range(30_000), pa.int64())
    table = pa.table({"id": ids, "s": pc.cast(ids, pa.string()),
                      "f": pc.divide(pc.cast(ids, pa.float64()), 7.0),
                      "ts": pc.cast(ids, pa.timestamp("us", tz="UTC"))})
    batches = table.to_batches(max_chunksize=10_000)
    (chunk,) = coalesce(batches, 1 << 40)
    whole = encode_rows("jsonl", chunk, with_header=False)
    assert whole == b"".join(encode_rows("jsonl", b, with_header=False) for b in batches)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_chunk_with_non_finite_floats_reads_back_as_its_batches_do(fmt):
    # A chunk holding NaN renders all its floats through Arrow (``2`` where polars writes
    # ``2.0``): the bytes of one chunk and of its batches differ, the values do not.
    values = [float("nan") if i == 15_000 else i / 4 for i in range(20_000)]
    table = pa.table({"f": pa.array(values), "i": pa.array(range(20_000), pa.int64())})
    batches = table.to_batches(max_chunksize=10_000)
    (chunk,) = coalesce(batches, 1 << 40)
    whole = encode_rows(fmt, chunk, with_header=True)
    parts = b"".join(encode_rows(fmt, b, with_header=i == 0) for i, b in enumerate(batches))
    assert _same_with_nan(decode_rows(fmt, whole, table.schema),
                          decode_rows(fmt, parts, table.schema))
    assert _same_with_nan(decode_rows(fmt, whole, table.schema), table)


def test_contiguous_takes_a_single_chunk_as_it_is():
    from commit_protocol.formats.arrow import contiguous

    values = pa.array(["a", "bc", None])
    one = contiguous(pa.chunked_array([values]))
    assert one.buffers()[2].address == values.buffers()[2].address  # no copy
    assert contiguous(pa.chunked_array([values, values])).to_pylist() == values.to_pylist() * 2
    assert len(contiguous(pa.chunked_array([], pa.string()))) == 0


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "text"])
def test_a_table_of_several_chunks_encodes_as_one_chunk_does(fmt):
    values = pa.array([f"v{i}" for i in range(100)])
    several = pa.Table.from_batches([pa.record_batch({"value": values.slice(i, 10)})
                                     for i in range(0, 100, 10)])
    one = pa.table({"value": values})
    assert encode_rows(fmt, several, with_header=True) == encode_rows(fmt, one, with_header=True)
