"""Splitting an Arrow batch into per-directory pieces (Hive-style ``col=value`` dirs, and
Iceberg's hidden partitions: ``ts_day=2026-12-01``, whose column the rows keep)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commit_protocol.vocabulary.naming import partition_dir
from commit_protocol.vocabulary.partition_terms import PartitionTerm
from commit_protocol.vocabulary.partition_values import spark_strings


def split_by_partition(batch: pa.RecordBatch, columns: tuple[str, ...],
                       terms: tuple[PartitionTerm, ...] = ()
                       ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Yield ``(directory, rows without the partition columns)`` for each distinct value:
    the values of ``columns``, or with ``terms`` (hidden partitioning) of every term, the
    rows keeping the columns of the transformed ones.

    Vectorised: one dictionary encoding and one sort per batch, whatever the row count.
    """
    if not columns and not terms:
        yield "", batch
        return
    data = batch.drop_columns(list(columns))
    if terms:
        keys = tuple(t.name for t in terms)
        values = [_directory_values(batch, t) for t in terms]
    else:
        keys, values = columns, [spark_strings(batch.column(c)) for c in columns]
    key = values[0] if len(values) == 1 else pc.binary_join_element_wise(
        *[pc.fill_null(v, "") for v in values], "\x00")
    # Null and "" share Spark's default partition directory, so one key for both is right.
    codes = pc.dictionary_encode(pc.fill_null(key, "")).indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(codes)]))
    taken = data.take(pa.array(order))
    for start, end in zip(starts, ends, strict=True):
        row = int(order[start])
        dir_values = tuple(v[row].as_py() for v in values)
        yield partition_dir(keys, dir_values), taken.slice(start, end - start)


def _directory_values(batch: pa.RecordBatch, term: PartitionTerm) -> pa.Array:
    if not term.hidden:
        return spark_strings(batch.column(term.source))
    from commit_protocol.tables.iceberg.transforms import directory_values

    return directory_values(batch.column(term.source), term)
