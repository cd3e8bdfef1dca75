"""Bulk formats read unit by unit: finished Parquet and ORC files by row group or stripe, and
the staged rows of their in-progress files stream by stream.

A finished file is opened through its committed bytes (a seekable stream: pyarrow reads the
footer, then only the units asked for), so a task holds one unit at a time. Which units:
those whose middle byte lies in the task's split, less those whose statistics rule out a
pushed filter (:func:`commit_protocol.reading.predicates.may_match`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import BinaryIO

import pyarrow as pa

from commit_protocol.formats import FORMATS, READ_BATCH_ROWS
from commit_protocol.formats.units import BulkFile, Unit, units_in
from commit_protocol.reading.conform import conform, held
from commit_protocol.reading.files import CommittedFile, Layout, unpacked
from commit_protocol.reading.inputs import open_input
from commit_protocol.reading.plaintext import open_plaintext, require_ring
from commit_protocol.reading.predicates import Predicate, may_match
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import IntegrityError, RotsinkError, TruncatedFileError

_ENCRYPTED_FOOTER = b"PARE"  # Parquet's magic for files whose footer is encrypted


def finished_batches(storage: Storage, f: CommittedFile, *, layout: Layout,
                     schema: pa.Schema | None, ring: Mapping[str, bytes] | None, start: int = 0,
                     end: int | None = None,
                     predicates: Sequence[Predicate] = ()) -> Iterator[pa.RecordBatch]:
    """The rows of finished bulk file ``f`` (as ``schema``, or as stored when None) in the
    units of split ``[start, end)`` that the ``predicates`` leave a chance (all units of the
    file by default), less the rows another writer deleted in place (``f.deleted``)."""
    with open_input(storage, f) as source:
        bulk = open_bulk(source, f, layout=layout, ring=ring)
        units = [u for u in units_in(bulk.units, start, end)
                 if all(may_match(p, u.stats.get(p.column), u.rows) for p in predicates)]
        readable = bulk.schema if schema is None else \
            held(schema, bulk.schema, added=layout.added_columns, what=f.path)
        batches = bulk.batches([u.index for u in units], readable) if not f.deleted else \
            _kept_rows(bulk, units, readable, unpacked(f.deleted))
        for batch in batches:
            yield batch if schema is None else conform(batch, schema)


def _kept_rows(bulk: BulkFile, units: Sequence[Unit], schema: pa.Schema,
               deleted: Sequence[int]) -> Iterator[pa.RecordBatch]:
    """The batches of ``units`` less the rows at positions ``deleted`` (ascending, counted
    from the file's first row: a unit's first row is the rows of the units before it)."""
    first, rows = {}, 0
    for unit in bulk.units:
        first[unit.index], rows = rows, rows + unit.rows
    for unit in units:
        offset = first[unit.index]
        for batch in bulk.batches([unit.index], schema):
            start, end = offset, offset + batch.num_rows
            offset = end
            gone = deleted[bisect_left(deleted, start):bisect_left(deleted, end)]
            if not gone:
                yield batch
                continue
            keep = [True] * batch.num_rows
            for position in gone:
                keep[position - start] = False
            yield batch.filter(pa.array(keep, pa.bool_()))


def open_bulk(source: BinaryIO, f: CommittedFile, *, layout: Layout,
              ring: Mapping[str, bytes] | None) -> BulkFile:
    """``f``'s units over its open committed bytes (decrypted on an encrypted path, where a
    plaintext file is refused)."""
    options = {}
    if layout.encrypted:
        options = {"decryption_properties": _decryption(source, f, ring)}
    return FORMATS[layout.format].implementation().open_units(pa.PythonFile(source, mode="r"),
                                                              **options)


def _decryption(source: BinaryIO, f: CommittedFile, ring: Mapping[str, bytes] | None):
    """Decryption properties for ``f``, after checking it is encrypted (Parquet Modular
    Encryption is the one encrypted bulk form: ORC paths are never encrypted)."""
    source.seek(max(0, f.length - len(_ENCRYPTED_FOOTER)))
    tail = source.read(len(_ENCRYPTED_FOOTER))
    source.seek(0)
    if tail != _ENCRYPTED_FOOTER:
        # pyarrow's decryption properties also read plaintext files: insist on PME
        raise IntegrityError(f"{f.path}: expected an encrypted Parquet footer "
                             f"({_ENCRYPTED_FOOTER!r}) on an encrypted path, found {tail!r}: "
                             "the file was replaced")
    from commit_protocol.crypto.parquet import decryption_properties

    return decryption_properties(require_ring(ring, f.path))


def rows_of_finished(storage: Storage, f: CommittedFile, *, layout: Layout, schema: pa.Schema,
                     ring: Mapping[str, bytes] | None, skip: int = 0,
                     take: int | None = None) -> Iterator[pa.RecordBatch]:
    """Rows ``[skip, skip + take)`` (``take`` None: to the end) of finished bulk file ``f``;
    whole units before ``skip`` are not decoded."""
    with open_input(storage, f) as source:
        bulk = open_bulk(source, f, layout=layout, ring=ring)
        chosen = []
        for unit in bulk.units:
            if skip >= unit.rows and unit.rows:
                skip -= unit.rows
            else:
                chosen.append(unit.index)
        readable = held(schema, bulk.schema, added=layout.added_columns, what=f.path)
        batches = (conform(batch, schema) for batch in bulk.batches(chosen, readable))
        yield from _window(batches, skip, take)


def _window(batches: Iterable[pa.RecordBatch], skip: int,
            take: int | None) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        batch, skip = batch.slice(skip), 0
        if take is not None:
            if take <= 0:
                return
            batch = batch.slice(0, take)
            take -= batch.num_rows
        yield batch


def staged_batches(storage: Storage, f: CommittedFile, *, layout: Layout, schema: pa.Schema,
                   ring: Mapping[str, bytes] | None, start: int = 0,
                   skip: int = 0) -> Iterator[pa.RecordBatch]:
    """The committed rows of staged file ``f`` from committed offset ``start`` (which is the
    ``skip``-th row of the file).

    Once a later commit rolled the file (its rows encoded, in order, into the finished file
    ``f.final``) and clean-up deleted the staged bytes, the same rows are read from the
    finished file: rows ``[skip, f.records)``, less those already returned.
    """
    returned = 0
    try:
        for batch in staged_stream(storage, f, layout=layout, schema=schema, ring=ring,
                                   start=start):
            returned += batch.num_rows
            yield batch
    except TruncatedFileError:
        if f.final is None or not storage.exists(f.final):
            raise
        finished = CommittedFile(f.final, storage.size(f.final), f.directory, False)
        yield from rows_of_finished(storage, finished, layout=layout, schema=schema, ring=ring,
                                    skip=skip + returned,
                                    take=f.records - skip - returned)


def staged_stream(storage: Storage, f: CommittedFile, *, layout: Layout,
                  schema: pa.Schema | None, ring: Mapping[str, bytes] | None,
                  start: int = 0, batch_rows: int | None = READ_BATCH_ROWS
                  ) -> Iterator[pa.RecordBatch]:
    """The batches of the IPC streams in ``f``'s committed bytes from ``start`` (as
    ``schema``, or as staged when None), cut to ``batch_rows`` rows at most (None: as
    staged, one task chunk each)."""
    with open_plaintext(storage, f, layout=layout, ring=ring, start=start) as stream:
        try:
            while stream.peek(1):  # one IPC stream per append, each with its end marker
                with pa.ipc.open_stream(stream) as reader:
                    readable = None if schema is None else held(
                        schema, reader.schema, added=layout.added_columns, what=f.path)
                    for batch in reader:
                        if schema is not None and readable is not None:
                            batch = conform(batch.select(readable.names).cast(readable),
                                            schema)
                        step = batch_rows or max(1, batch.num_rows)
                        for offset in range(0, batch.num_rows, step):
                            yield batch.slice(offset, step)
        except RotsinkError:
            raise
        except (ValueError, pa.ArrowException) as e:
            if not stream.peek(1):  # the bytes ran out inside a stream
                raise TruncatedFileError(f"{f.path}: the committed length {f.length} is not "
                                         "the end of a staged stream (one is cut short)") from e
            raise IntegrityError(f"{f.path}: cannot decode staged rows "
                                 f"({type(e).__name__}: {e})") from e
