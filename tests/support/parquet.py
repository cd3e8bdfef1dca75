"""Bulk files (Parquet, ORC) written the way a roll writes them (``FinishedPartFile``), for
tests that check what the production writer produces, without a Spark query."""

from __future__ import annotations

import tempfile

import pyarrow as pa

from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import LocalStorage
from commit_protocol.task.conversion import FinishedPartFile


def bulk_bytes(fmt: str, batch: pa.RecordBatch | pa.Table, *, compression: str,
               level: int | None = None) -> bytes:
    """One finished ``fmt`` file holding ``batch`` (a table goes in batch by batch)."""
    batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
    with tempfile.TemporaryDirectory(prefix=f"rotsink-{fmt}-") as root:
        storage = LocalStorage(root)
        config = SinkConfig(path=root, format=fmt, compression=compression,
                            compression_level=level, file_suffix=f".{fmt}")
        f = FinishedPartFile(storage, config, partition=0, directory="", name=f"part.{fmt}",
                             temp=f"part.{fmt}", start=0, records=0)
        for part in batches:
            assert f.add(part) == part.num_rows
        f.roll()
        return storage.read(f"part.{fmt}")


def parquet_bytes(batch: pa.RecordBatch | pa.Table, *, compression: str = "snappy",
                  level: int | None = None) -> bytes:
    """One finished Parquet file holding ``batch``."""
    return bulk_bytes("parquet", batch, compression=compression, level=level)


def orc_bytes(batch: pa.RecordBatch | pa.Table, *, compression: str = "zstd") -> bytes:
    """One finished ORC file holding ``batch``."""
    return bulk_bytes("orc", batch, compression=compression)
