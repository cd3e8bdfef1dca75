"""Chunks appended across micro-batches decode to exactly the rows encoded, in every row format."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from commit_protocol.formats import decode_rows, encode_rows

FLAT = pa.schema([
    ("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("b", pa.bool_()),
    ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("dec", pa.decimal128(10, 2)),
    ("bin", pa.binary()),
])
NESTED = pa.schema([("l", pa.list_(pa.int32())), ("st", pa.struct([("x", pa.int64())])),
                    ("m", pa.map_(pa.string(), pa.int32()))])


def flat_batch(start: int, n: int) -> pa.RecordBatch:
    rows = range(start, start + n)
    return pa.RecordBatch.from_pydict({
        "i": [None if r % 5 == 0 else r for r in rows],
        "f": [[float("nan"), float("inf"), -float("inf"), 0.25][r % 4] for r in rows],
        "s": [None if r % 7 == 0 else ("" if r % 3 == 0 else f'q"{r},\\\n ü') for r in rows],
        "b": [r % 2 == 0 for r in rows],
        "d": [dt.date(2024, 1, 1) + dt.timedelta(days=r) for r in rows],
        "ts": [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=r)
               for r in rows],
        "dec": [decimal.Decimal(r) / 100 for r in rows],
        "bin": [bytes([r % 256, 0]) for r in rows],
    }, schema=FLAT)


def nested_batch(start: int, n: int) -> pa.RecordBatch:
    rows = range(start, start + n)
    return pa.RecordBatch.from_pydict({
        "l": [None if r % 4 == 0 else [r, None] for r in rows],
        "st": [{"x": r} for r in rows],
        "m": [[("k", r)] for r in rows],
    }, schema=NESTED)


def chunks(make, sizes):
    start = 0
    for n in sizes:
        yield make(start, n)
        start += n


@pytest.mark.parametrize("fmt, make", [
    ("jsonl", flat_batch), ("csv", flat_batch), ("jsonl", nested_batch),
], ids=["jsonl-flat", "csv-flat", "jsonl-nested"])
def test_concatenated_chunks_decode_to_the_rows(fmt, make):
    batches = list(chunks(make, [3, 0, 10, 1, 25, 7, 2]))
    data = b"".join(encode_rows(fmt, b, with_header=i == 0) for i, b in enumerate(batches))
    decoded = decode_rows(fmt, data, batches[0].schema)
    assert decoded.schema == batches[0].schema
    # repr compares NaN equal to NaN, which Table.equals does not.
    assert repr(decoded.to_pylist()) == repr(pa.Table.from_batches(batches).to_pylist())


def test_text_lines_with_null_as_empty_line():
    batch = pa.RecordBatch.from_pydict({"value": ["a", None, "ü"]})
    data = encode_rows("text", batch, with_header=False)
    assert data == b"a\n\n\xc3\xbc\n"
