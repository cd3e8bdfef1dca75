"""The finalized files of an output as of a batch, read from ``_spark_metadata`` the way
Spark's ``FileStreamSinkLog`` reads it, by code of the tests' own (none of rotsink's): the
newest ``<c>.compact`` at or before the batch, then the batch files after it, ``add`` entries
that are files. Expected rows of a table read come from here and pyarrow, so that a wrong
log reader in rotsink cannot make a wrong table look right."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlparse


def latest_batch(out: Path) -> int | None:
    """The newest batch ``_spark_metadata`` holds a log file of (None: none yet)."""
    log = out / "_spark_metadata"
    ids = [int(p.name.removesuffix(".compact")) for p in log.glob("*")
           if p.name.removesuffix(".compact").isdigit()] if log.is_dir() else []
    return max(ids, default=None)


def finalized_paths(out: Path, batch: int) -> list[Path]:
    """The files the log lists as of ``batch`` (its log files must still exist)."""
    log = out / "_spark_metadata"
    compacts = [int(p.name.removesuffix(".compact")) for p in log.glob("*.compact")
                if int(p.name.removesuffix(".compact")) <= batch]
    start = max(compacts, default=-1)
    names = ([f"{start}.compact"] if start >= 0 else []) + [str(b) for b in
                                                            range(start + 1, batch + 1)]
    paths = []
    for name in names:
        version, *lines = (log / name).read_text().splitlines()
        assert version == "v1", f"{log / name}: {version!r}"
        for entry in map(json.loads, lines):
            if entry["action"] == "add" and not entry["isDir"]:
                paths.append(Path(unquote(urlparse(entry["path"]).path)))
    return paths


def finalized_ids(out: Path, batch: int) -> Counter:
    """Every ``id`` in the Parquet files the log lists as of ``batch``, counted (pyarrow)."""
    import pyarrow.parquet as pq

    return Counter(i for path in finalized_paths(out, batch)
                   for i in pq.read_table(path, columns=["id"]).column("id").to_pylist())
