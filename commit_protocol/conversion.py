"""Staged rows of a bulk format into its finished file: the encoding that happens at a roll.

A bulk slot's in-progress file holds Arrow IPC streams (:mod:`commit_protocol.formats.ipc`),
sealed when the path is encrypted. When the slot rolls (in a task for its size, record or
batch-count limit, on the driver for age or inactivity of a slot no task touched), its
committed bytes are decoded and written as one finished file at a fresh temp name, which the
commit then publishes like any finalized file. Bytes past the committed length (a zombie's)
are never read, and the staged file itself is left as it is (an orphan once published).

The decoded rows go to :class:`~commit_protocol.bulk_files.FinishedPartFile`, which writes
them through the format's writer: row groups of ``parquet.rowGroupBytes`` with the dictionary
choice and Parquet Modular Encryption of every Parquet file rotsink writes, or ORC stripes of
``orc.stripeBytes`` in the form Spark's ORC writer gives each type.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from commit_protocol.config import SinkConfig
from commit_protocol.naming import temp_name
from commit_protocol.storage import Storage


def staged_batches(storage: Storage, staged: str, length: int,
                   config: SinkConfig) -> Iterator[pa.RecordBatch]:
    """The rows of the first ``length`` bytes of ``staged``, batch by batch: one append's
    rows (one sealed record, when encrypted) in memory at a time, never the whole file."""
    from commit_protocol.reading.bulk import staged_stream
    from commit_protocol.reading.files import CommittedFile, ReadLayout

    ring = config.keys.ring() if config.encrypted and config.keys else None
    layout = ReadLayout(config.format, config.compression, config.encrypted,
                        config.partition_by)
    yield from staged_stream(storage, CommittedFile(staged, length, "", True, staged=True),
                             layout=layout, schema=None, ring=ring, batch_rows=None)


def convert_staged(storage: Storage, staged: str, length: int, config: SinkConfig, *,
                   name: str) -> tuple[str, int]:
    """Write the committed rows of ``staged`` as the finished file of final name ``name`` at
    a fresh temp name; return that temp and its size."""
    from commit_protocol.bulk_files import FinishedPartFile

    temp = temp_name(name)
    # The slot's partition and directory only label a task's report, which this file never
    # makes: the caller reports the staged file it rolled.
    finished = FinishedPartFile(storage, config, partition=0, directory="", name=name,
                                temp=temp, start=0, records=0)
    for batch in staged_batches(storage, staged, length, config):
        finished.add(batch)
    finished.roll()
    return temp, finished.end
