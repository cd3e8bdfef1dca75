"""``format=avro``: blocks appended across micro-batches form one Avro file at every committed
offset; outside readers (fastavro, polars) read the files rotsink writes."""

from __future__ import annotations

import base64
import io
import os
from typing import cast

import fastavro
import polars as pl
import pyarrow as pa
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.formats import decode_rows, encode_rows
from commit_protocol.formats.avro import header_end, last_row_end, sync_marker
from commit_protocol.log import open_committed
from commit_protocol.storage import LocalStorage
from datasource.commands.cat import cat
from tests.unit.test_formats_roundtrip import chunks, flat_batch, nested_batch
from tests.unit.test_task_writer import commit, committed_ids, config, rows, run_task

CODECS = ["snappy", "deflate", "zstd", "none"]


def column(data: bytes | io.BufferedReader, name: str) -> list:
    """Column ``name`` of an Avro file as fastavro (an outside reader) reads it."""
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    return [cast(dict, record)[name] for record in fastavro.reader(source)]


def avro_file(batches: list[pa.RecordBatch], compression: str, name: str = "f.avro") -> bytes:
    return b"".join(encode_rows("avro", b, with_header=i == 0, file_name=name,
                                compression=compression) for i, b in enumerate(batches))


@pytest.mark.parametrize("make", [flat_batch, nested_batch], ids=["flat", "nested"])
@pytest.mark.parametrize("compression", CODECS)
def test_concatenated_chunks_decode_to_the_rows(compression, make):
    batches = list(chunks(make, [3, 0, 10, 1, 25, 7, 2]))
    data = avro_file(batches, compression)
    decoded = decode_rows("avro", data, batches[0].schema)
    assert repr(decoded.to_pylist()) == repr(pa.Table.from_batches(batches).to_pylist())


@pytest.mark.parametrize("compression", ["snappy", "deflate", "none"])
def test_every_committed_prefix_is_an_avro_file_outside_readers_read(compression):
    """A prefix that ends where an append ended is a whole file for fastavro and polars."""
    batches = list(chunks(flat_batch, [4, 6, 5]))
    cuts, data = [], b""
    for i, batch in enumerate(batches):
        data += encode_rows("avro", batch, with_header=i == 0, file_name="g/part-0.avro",
                            compression=compression)
        cuts.append(len(data))
    for count, cut in zip((4, 10, 15), cuts, strict=True):
        assert column(data[:cut], "i") == \
            pa.Table.from_batches(batches).column("i").to_pylist()[:count]
        assert pl.read_avro(io.BytesIO(data[:cut])).height == count


def test_block_boundaries_are_found_without_the_sync_marker():
    data = avro_file(list(chunks(flat_batch, [4, 6])), "snappy")
    head = header_end(data)
    assert head and header_end(data[:head - 1]) == 0  # a cut header is not a header
    first_block_end = len(avro_file(list(chunks(flat_batch, [4])), "snappy"))
    assert last_row_end(data) == len(data)
    assert last_row_end(data[:-1]) == first_block_end  # the second block is cut
    assert last_row_end(data[head:]) == len(data) - head  # later blocks alone
    assert last_row_end(data[:head + 3]) == head


def test_each_file_marks_its_blocks_with_its_own_sync_marker():
    one, other = sync_marker("a/part-00000-000001-000.avro"), sync_marker("a/part-00001")
    assert len(one) == 16 and one != other
    data = avro_file(list(chunks(flat_batch, [2, 3])), "none", name="a/part-00000-000001-000.avro")
    assert data.count(one) == 3  # the header's, and one per block


@pytest.mark.parametrize("compression", CODECS)
def test_files_span_micro_batches_and_roll(tmp_path, compression):
    cfg = config(tmp_path, format="avro", file_suffix=".avro", compression=compression,
                 rotation={"max_records": 12})
    for batch in range(3):
        commit(tmp_path, cfg, batch, run_task(tmp_path, cfg, batch, [rows(batch * 5, 5)]))
    assert committed_ids(tmp_path, cfg) == list(range(15))
    _, latest, state = open_committed(LocalStorage(str(tmp_path)))  # type: ignore[misc]
    (open_file,) = state.in_progress
    prefix = (tmp_path / open_file.temp).read_bytes()[:open_file.size]
    assert column(prefix, "id") == [12, 13, 14]
    (finished,) = tmp_path.glob("part-*.avro")
    with finished.open("rb") as f:
        assert column(f, "id") == list(range(12))
    if compression != "zstd":  # polars reads no zstandard Avro
        assert pl.read_avro(finished)["id"].to_list() == list(range(12))
    checked = verify_output(LocalStorage(str(tmp_path)), deep=True)  # decodes every byte
    assert checked.ok and checked.finalized_files == 1, checked.problems


def test_encrypted_avro_reads_back_and_cat_prints_the_avro_file(tmp_path, monkeypatch):
    from commit_protocol.crypto.keys import KeyRefs

    monkeypatch.setenv("AVRO_KEY", base64.b64encode(os.urandom(32)).decode())
    cfg = config(tmp_path, format="avro", file_suffix=".avro.enc", compression="deflate",
                 keys=KeyRefs("env:AVRO_KEY"), rotation={"max_records": 4})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 6)]))
    assert committed_ids(tmp_path, cfg) == list(range(6))
    (finished,) = tmp_path.glob("part-*.avro.enc")
    assert b"Obj\x01" not in finished.read_bytes()  # sealed
    plain = b"".join(cat(str(finished), ["env:AVRO_KEY"]))
    assert column(plain, "id") == list(range(4))
