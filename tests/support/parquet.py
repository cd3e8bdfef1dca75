"""Parquet bytes written the way a task writes them (``ParquetPartFile``), for tests that
check what the production writer produces, without a Spark query."""

from __future__ import annotations

import tempfile

import pyarrow as pa

from commit_protocol.bulk_files import ParquetPartFile
from commit_protocol.config import SinkConfig
from commit_protocol.storage import LocalStorage


def parquet_bytes(batch: pa.RecordBatch | pa.Table, *, compression: str = "snappy",
                  level: int | None = None) -> bytes:
    """One finished Parquet file holding ``batch`` (a table goes in batch by batch)."""
    batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
    with tempfile.TemporaryDirectory(prefix="rotsink-parquet-") as root:
        storage = LocalStorage(root)
        config = SinkConfig(path=root, format="parquet", compression=compression,
                            compression_level=level, file_suffix=".parquet")
        f = ParquetPartFile(storage, config, partition=0, directory="", name="part.parquet",
                            temp="part.parquet", start=0, records=0)
        for part in batches:
            assert f.add(part) == part.num_rows
        f.roll()
        return storage.read("part.parquet")
