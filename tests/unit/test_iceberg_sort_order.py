"""An Iceberg table's sort order (``WRITE ORDERED BY``): the files a stream finalizes after
the table has one are sorted in it, across the micro-batches a file spans, and their manifest
entries name it; files written before it name none. The expected order is computed here from
the rows (the spec's bucket by ``mmh3``, an hour as whole hours since 1970), not by rotsink.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.task.sorting import sorted_rows
from commit_protocol.vocabulary.sort_orders import SORT_ORDER_KEY
from tests.unit.test_iceberg_transforms import (
    EPOCH,
    commit_batch,
    config,
    fresh_process_memory,  # noqa: F401 (a fixture of every test here)
    loaded,
    spec_bucket,
)

ROWS = 60


def spanning(cfg: SinkConfig) -> SinkConfig:
    """Files that span two micro-batches."""
    return dataclasses.replace(cfg, rotation=RotationPolicy(max_batches=2, interval_ms=0,
                                                            inactivity_ms=0))


def shuffled_rows(batch_id: int) -> pa.RecordBatch:
    """Rows in no order: a few hours, ids shuffled, some null times."""
    ids = list(range(batch_id * ROWS, (batch_id + 1) * ROWS))
    random.Random(batch_id).shuffle(ids)
    ts = [None if i % 7 == 0 else EPOCH + dt.timedelta(days=20_000, minutes=37 * (i % 11))
          for i in ids]
    return pa.record_batch({"id": pa.array(ids, pa.int64()),
                            "ts": pa.array(ts, pa.timestamp("us", "UTC")),
                            "grp": pa.array(["a" if i % 2 else "b" for i in ids])})


def expected_order(row: dict) -> tuple:
    """hours(ts) ASC NULLS FIRST, bucket(8, id) DESC NULLS LAST, id ASC, as the spec says."""
    ts = row["ts"]
    hour = None if ts is None else int((ts - EPOCH).total_seconds() // 3600)
    return (hour is not None, hour or 0, -spec_bucket(row["id"], 8), row["id"])


def test_files_are_written_in_the_table_s_sort_order_across_batches(tmp_path):
    from pyiceberg.table.sorting import NullOrder
    from pyiceberg.transforms import BucketTransform, HourTransform, IdentityTransform

    cfg = spanning(config(str(tmp_path), "grp"))
    commit_batch(cfg, 0, rows=shuffled_rows(0))
    commit_batch(cfg, 1, rows=shuffled_rows(1))  # rolls: unsorted files, the table has no order
    with loaded(cfg).update_sort_order() as order:
        order.asc("ts", HourTransform(), NullOrder.NULLS_FIRST)
        order.desc("id", BucketTransform(8), NullOrder.NULLS_LAST)
        order.asc("id", IdentityTransform())
    order_id = loaded(cfg).sort_order().order_id
    for batch_id in (2, 3):  # one file per group, spanning both batches
        commit_batch(cfg, batch_id, rows=shuffled_rows(batch_id))
    table = loaded(cfg)
    files = table.inspect.files().to_pylist()
    sorted_files = [f for f in files if f["sort_order_id"] == order_id]
    assert len(sorted_files) == 2 and len(files) == 4, files
    for f in files:
        rows = pq.read_table(f["file_path"].removeprefix("file://")).to_pylist()
        in_order = rows == sorted(rows, key=expected_order)
        if f in sorted_files:
            assert in_order, [expected_order(r) for r in rows]
            assert {r["id"] // ROWS for r in rows} == {2, 3}  # the file spans both batches
        else:
            assert f["sort_order_id"] is None and not in_order
    written = Counter(r["id"] for b in range(4) for r in shuffled_rows(b).to_pylist())
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == written


def test_a_key_that_cannot_be_computed_leaves_the_file_unsorted_and_unclaimed():
    rows = pa.table({"id": [3, 1, 2], "nested": [{"x": 1}, {"x": 2}, {"x": 3}]})
    kept = sorted_rows(rows, [("nested.x", "identity", True, False)], 1)
    assert kept.column("id").to_pylist() == [3, 1, 2]
    assert SORT_ORDER_KEY not in (kept.schema.metadata or {})
    ordered = sorted_rows(rows, [("grp", "identity", True, False), ("id", "identity", False,
                                                                    False)],
                          1, partition_columns=("grp",))
    assert ordered.column("id").to_pylist() == [3, 2, 1]
    assert ordered.schema.metadata[SORT_ORDER_KEY] == b"1"


@pytest.mark.parametrize("nulls_first, expected", [(True, [None, 1, 2]), (False, [1, 2, None])])
def test_each_key_places_its_own_nulls(nulls_first, expected):
    rows = pa.table({"v": [2, None, 1]})
    assert sorted_rows(rows, [("v", "identity", True, nulls_first)], 1) \
        .column("v").to_pylist() == expected
