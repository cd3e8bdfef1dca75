"""The finalized files of an output as of a batch, read from ``_spark_metadata`` the way
Spark's ``FileStreamSinkLog`` reads it, by code of the tests' own (none of rotsink's): the
newest ``<c>.compact`` at or before the batch, then the batch files after it, ``add`` entries
that are files. Expected rows of a table read come from here and pyarrow, so that a wrong
log reader in rotsink cannot make a wrong table look right.

An output on an object store (a URL) is read through its fsspec filesystem, built from
``fs_options`` (the sink's ``fs.*`` options without the prefix)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


class _Output:
    """The output's log folder and files, on a local disk or through fsspec."""

    def __init__(self, out: Path | str, fs_options: dict[str, str] | None) -> None:
        text = str(out)
        self.fs: Any = None
        if "://" in text and not text.startswith("file://"):
            import fsspec.core

            self.fs, self.root = fsspec.core.url_to_fs(text, **(fs_options or {}))
        else:
            self.root = text.removeprefix("file://")

    def log_names(self) -> list[str]:
        log = f"{self.root}/_spark_metadata"
        if self.fs is None:
            return [p.name for p in Path(log).glob("*")] if Path(log).is_dir() else []
        self.fs.invalidate_cache()
        return [p.rsplit("/", 1)[-1] for p in self.fs.find(log)]

    def log_text(self, name: str) -> str:
        path = f"{self.root}/_spark_metadata/{name}"
        if self.fs is None:
            return Path(path).read_text()
        return str(self.fs.cat_file(path).decode())

    def data_path(self, entry: str) -> str:
        """Where the file a log entry names is, as pyarrow opens it with :meth:`filesystem`."""
        if self.fs is None:
            return unquote(urlparse(entry).path)
        return str(self.fs._strip_protocol(unquote(entry)))

    def filesystem(self) -> Any:
        return None if self.fs is None else self.fs


def latest_batch(out: Path | str, fs_options: dict[str, str] | None = None) -> int | None:
    """The newest batch ``_spark_metadata`` holds a log file of (None: none yet)."""
    ids = [int(n.removesuffix(".compact")) for n in _Output(out, fs_options).log_names()
           if n.removesuffix(".compact").isdigit()]
    return max(ids, default=None)


def finalized_paths(out: Path | str, batch: int,
                    fs_options: dict[str, str] | None = None) -> list[Path]:
    """The files the log lists as of ``batch`` (its log files must still exist): local paths,
    or an object store's paths as its fsspec filesystem names them."""
    output = _Output(out, fs_options)
    names = output.log_names()
    compacts = [int(n.removesuffix(".compact")) for n in names if n.endswith(".compact")
                and int(n.removesuffix(".compact")) <= batch]
    start = max(compacts, default=-1)
    read = ([f"{start}.compact"] if start >= 0 else []) + [str(b) for b in
                                                            range(start + 1, batch + 1)]
    paths = []
    for name in read:
        version, *lines = output.log_text(name).splitlines()
        assert version == "v1", f"{out}/_spark_metadata/{name}: {version!r}"
        for entry in map(json.loads, lines):
            if entry["action"] == "add" and not entry["isDir"]:
                paths.append(Path(output.data_path(entry["path"])))
    return paths


def finalized_ids(out: Path | str, batch: int,
                  fs_options: dict[str, str] | None = None) -> Counter:
    """Every ``id`` in the Parquet files the log lists as of ``batch``, counted (pyarrow)."""
    import pyarrow.parquet as pq

    filesystem = _Output(out, fs_options).filesystem()
    return Counter(i for path in finalized_paths(out, batch, fs_options)
                   for i in pq.read_table(str(path), columns=["id"], filesystem=filesystem)
                   .column("id").to_pylist())
