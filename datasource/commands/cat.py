"""``rotsink cat FILE``: one part file's committed content, decrypted and decompressed.

The output root is found by walking up from the file to the directory holding
``_spark_metadata``; the log says how many bytes of the file are committed, and only those
are read (an in-progress file may hold more). Row formats print their bytes as written (an
Avro file's committed prefix is itself an Avro file); Parquet and ORC print one JSON object
per row.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.formats import FORMATS
from commit_protocol.reading import CommittedFile, committed_files, open_committed, open_plaintext
from commit_protocol.reading.bulk import finished_batches, staged_stream
from commit_protocol.storage import LocalStorage
from commit_protocol.vocabulary.errors import RotsinkError
from commit_protocol.vocabulary.naming import LOG_DIR

CHUNK_BYTES = 1 << 20


def cat(file_path: str, key_refs: list[str]) -> Iterator[bytes]:
    """The committed content of ``file_path``: chunks (row formats) or JSON lines (bulk),
    streamed (a block or a unit in memory at a time)."""
    root, relative = _split_root(os.path.abspath(file_path))
    storage = LocalStorage(root)
    committed = open_committed(storage)
    if committed is None:
        raise RotsinkError(f"{file_path}: {root} has no committed batch yet (its {LOG_DIR} "
                           "lists none), so no byte of any file there is committed output")
    log, latest, state = committed
    part = _committed_file(log, latest, state, relative, file_path)
    refs = KeyRefs(read_refs=tuple(key_refs)) if key_refs else None
    ring = refs.ring() if refs is not None else None
    options: dict[str, Any] = {"layout": state, "ring": ring, "schema": None}
    if part.staged:
        yield from _json_lines(staged_stream(storage, part, **options))
    elif FORMATS[state.format].bulk:
        yield from _json_lines(finished_batches(storage, part, **options))
    else:
        with open_plaintext(storage, part, layout=state, ring=ring) as stream:
            while chunk := stream.read(CHUNK_BYTES):
                yield chunk


def _split_root(path: str) -> tuple[str, str]:
    directory = os.path.dirname(path)
    while True:
        if os.path.isdir(os.path.join(directory, LOG_DIR)):
            return directory, os.path.relpath(path, directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            raise RotsinkError(f"{path}: no rotsink output around it (no {LOG_DIR} directory "
                               "in any parent)")
        directory = parent


def _committed_file(log, latest, state, relative: str, shown: str) -> CommittedFile:
    for f in state.in_progress:
        if relative in (f.temp, f.name):
            return CommittedFile(f.temp, f.size, f.directory, True, final=f.name,
                                 staged=FORMATS[state.format].bulk)
    for f in committed_files(log, latest, state, include_in_progress=False):  # as readers do
        if f.path == relative:  # less the rows another writer deleted in place
            return CommittedFile(relative, f.length, "", False, deleted=f.deleted)
    raise RotsinkError(f"{shown} is not committed output: the log lists it neither as a "
                       "finalized file nor as an in-progress file (an orphan or a foreign file)")


def _json_lines(batches: Iterable[pa.RecordBatch]) -> Iterator[bytes]:
    for batch in batches:
        yield "".join(json.dumps(row, default=str) + "\n" for row in batch.to_pylist()).encode()
