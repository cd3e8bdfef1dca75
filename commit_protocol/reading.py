"""What a reader may read: finalized files plus committed prefixes, and decoding them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from commit_protocol.errors import (
    CorruptLogError,
    EncryptionKeyError,
    IntegrityError,
    SegmentError,
    TruncatedFileError,
)
from commit_protocol.formats import FORMATS
from commit_protocol.formats.codecs import RowCodec
from commit_protocol.log import MetadataLog, open_committed
from commit_protocol.naming import from_uri, parse_partition_dir
from commit_protocol.partition_values import parse_partition_value
from commit_protocol.state import SinkState
from commit_protocol.storage import Storage


@dataclass(frozen=True)
class CommittedFile:
    """``length`` committed bytes of ``path``, in partition directory ``directory``.

    An in-progress file also carries its ``final`` name: a later commit may publish it there
    while a read planned from this state still runs (see :func:`read_committed`).
    """

    path: str
    length: int
    directory: str
    in_progress: bool
    final: str | None = None
    staged: bool = False  # a bulk format's staged rows: encoded, never renamed, at a roll
    records: int = 0  # of an in-progress file: the committed rows


def committed_files(log: MetadataLog, latest: int, state: SinkState, *,
                    include_in_progress: bool) -> list[CommittedFile]:
    """Every file (and committed prefix) visible as of batch ``latest``.

    A path listed twice (a log file edited by hand) is refused: Spark's readers would return
    its rows twice.
    """
    files = []
    listed_in: dict[str, str] = {}
    for log_file, entry in log.listed_entries(latest):
        try:
            path = from_uri(log.storage.root_uri, entry["path"])
        except ValueError as e:  # moved or copied output: the log names the old location
            raise CorruptLogError(f"metadata log file {log_file}: {e}") from e
        if path in listed_in:
            raise CorruptLogError(
                f"metadata log file {log_file} lists {path} a second time (first in "
                f"{listed_in[path]}): expected each file once; Spark's readers would return "
                "its rows twice. Remove the duplicate line")
        listed_in[path] = log_file
        files.append(CommittedFile(path, int(entry["size"]), _directory(path), False))
    if include_in_progress:
        staged = FORMATS[state.format].bulk
        files += [CommittedFile(f.temp, f.size, f.directory, True, final=f.name, staged=staged,
                                records=f.records)
                  for f in state.in_progress if f.size]
    return files


def _directory(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def read_batches(storage: Storage, f: CommittedFile, *, state: SinkState, schema: pa.Schema,
                 ring: Mapping[str, bytes] | None = None,
                 time_zone: str = "UTC") -> Iterator[pa.RecordBatch]:
    """Decode exactly the committed bytes of ``f`` into batches of ``schema`` (partition
    columns added), decrypting (``ring``: the keys by id) and decompressing as the path was
    written, in batches of up to ``READ_BATCH_ROWS`` rows (a bulk file decodes batch by batch;
    a row file is decoded whole, then handed on in slices).
    Timestamp partition values are read in ``time_zone``, as Spark's readers read them in
    the session time zone."""
    from commit_protocol.formats import READ_BATCH_ROWS

    data_schema = pa.schema([field for field in schema if field.name not in state.partition_by])
    if f.staged:
        batches = _staged_rows(storage, f, state=state, schema=data_schema, ring=ring)
    elif FORMATS[state.format].bulk:
        data = read_committed(storage, f)
        batches = FORMATS[state.format].implementation().iter_file(
            data, data_schema, **bulk_read_options(data, f, state, ring))
    else:
        table = decode_row_file(read_committed(storage, f), f, state=state, schema=data_schema,
                                ring=ring)
        batches = table.to_batches(max_chunksize=READ_BATCH_ROWS)
    yield from with_partition_columns(batches, f.directory, schema=schema, state=state,
                                      time_zone=time_zone)


def with_partition_columns(batches: Iterable[pa.RecordBatch], directory: str, *,
                           schema: pa.Schema, state: SinkState,
                           time_zone: str) -> Iterator[pa.RecordBatch]:
    """``batches`` of a file in ``directory`` with its partition columns added, as
    ``schema``."""
    if not state.partition_by:
        yield from batches
        return
    values = _partition_values(directory, schema, state.partition_by, time_zone)
    for batch in batches:
        columns = [pa.repeat(values[field.name], batch.num_rows) if field.name in values
                   else batch.column(field.name) for field in schema]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


_ENCRYPTED_FOOTER = b"PARE"  # Parquet's magic for files whose footer is encrypted


def read_bulk_file(data: bytes, f: CommittedFile, *, state: SinkState,
                   ring: Mapping[str, bytes] | None,
                   schema: pa.Schema | None = None) -> pa.Table:
    """A finished bulk file's committed bytes as a table (``schema``'s columns, or all),
    decrypted on an encrypted path, where a plaintext file is refused."""
    reader = FORMATS[state.format].implementation()
    return reader.read_file(pa.BufferReader(data), schema,
                            **bulk_read_options(data, f, state, ring))


def bulk_read_options(data: bytes, f: CommittedFile, state: SinkState,
                       ring: Mapping[str, bytes] | None) -> dict:
    """Decryption properties on an encrypted path, after refusing a plaintext file there
    (Parquet Modular Encryption is the one encrypted bulk form: ORC paths are never
    encrypted)."""
    if not state.encrypted:
        return {}
    if not data.endswith(_ENCRYPTED_FOOTER):
        # pyarrow's decryption properties also read plaintext files: insist on PME
        raise IntegrityError(f"{f.path}: expected an encrypted Parquet footer "
                             f"({_ENCRYPTED_FOOTER!r}) on an encrypted path, found "
                             f"{data[-4:]!r}: the file was replaced")
    from commit_protocol.crypto.parquet import decryption_properties

    return {"decryption_properties": decryption_properties(require_ring(ring, f.path))}


def read_committed(storage: Storage, f: CommittedFile, start: int = 0) -> bytes:
    """The committed bytes of ``f`` (from byte ``start``); a loud error if storage holds
    fewer, or if a finalized (immutable) file holds more: then it was modified after its
    commit."""
    if f.in_progress:
        return _read_in_progress(storage, f, start)
    try:
        data = storage.read(f.path, start, f.length)
        size = storage.size(f.path)
    except FileNotFoundError as e:
        raise TruncatedFileError(f"finalized file {f.path} is missing: the log lists it with "
                                 f"{f.length} committed bytes; deleted by hand? Restore it "
                                 "from a backup") from e
    if len(data) < f.length - start:
        raise TruncatedFileError(f"{f.path} holds {start + len(data)} bytes; the log commits "
                                 f"{f.length}")
    if size != f.length:
        raise IntegrityError(f"{f.path} holds {size} bytes; the log commits exactly "
                             f"{f.length} to this finalized file: it was modified")
    return data


# A moved file reads as missing: gone from a local directory, or on an object store its
# segments (partly) deleted by the compose that published it.
_MOVED = (FileNotFoundError, SegmentError)


def _read_in_progress(storage: Storage, f: CommittedFile, start: int = 0) -> bytes:
    """The committed prefix of an in-progress file, wherever the protocol has moved it.

    A read plans from one committed state and may run while later commits move that state's
    in-progress files: a roll publishes one under its final name (on object stores: composes
    it and deletes its segments), a fence continues one from a copy at a fresh temp name and
    the old temp is deleted as an orphan after ``log.cleanupDelay``. Committed bytes never
    change, so the same prefix read where the file went is exactly the planned data. Only
    when no location holds it is the file lost (deleted by hand): a loud error.
    """
    short = None
    for path in _locations(storage, f):
        try:
            data = storage.read(path, start, f.length)
        except _MOVED:
            continue
        if len(data) == f.length - start:
            return data
        if path == f.path:
            short = start + len(data)
    if short is not None:
        raise TruncatedFileError(f"{f.path} holds {short} bytes; the log commits {f.length}")
    published = f" (and no later commit published it as {f.final})" if f.final else ""
    raise TruncatedFileError(f"in-progress file {f.path} is missing{published}: the log lists "
                             f"it with {f.length} committed bytes; deleted by hand? Restore it "
                             "from a backup")


def _locations(storage: Storage, f: CommittedFile) -> Iterator[str]:
    """Where ``f``'s committed prefix may be, most likely first: its planned temp, its final
    name (rolled since), its temp in the newest committed state (fenced since), and its final
    name once more (rolled while we looked). The log is read only when the first two miss."""
    yield f.path
    if f.final is None:
        return
    if not f.staged:  # a staged file is encoded at its roll, not renamed: never its final name
        yield f.final
    committed = open_committed(storage)
    if committed is not None:
        current = {g.name: g.temp for g in committed[2].in_progress}.get(f.final)
        if current is not None and current != f.path:
            yield current
    if not f.staged:
        yield f.final


def decode_row_file(data: bytes, f: CommittedFile, *, state: SinkState, schema: pa.Schema,
                    ring: Mapping[str, bytes] | None) -> pa.Table:
    """Authenticate, decompress and decode a row file's committed bytes."""
    from commit_protocol.formats import decode_rows

    plain = row_plaintext(data, f, state=state, ring=ring)
    try:
        return decode_rows(state.format, plain, schema)
    except (ValueError, pa.ArrowException) as e:
        raise IntegrityError(f"{f.path}: cannot decode {state.format} data "
                             f"({type(e).__name__}: {e})") from e


def _staged_rows(storage: Storage, f: CommittedFile, *, state: SinkState, schema: pa.Schema,
                 ring: Mapping[str, bytes] | None) -> Iterator[pa.RecordBatch]:
    """The committed rows of a staged file; once a later commit rolled it (and clean-up
    deleted the staged bytes), the first ``records`` rows of its finished file, which the
    encoding wrote in the same order."""
    try:
        data = read_committed(storage, f)
    except TruncatedFileError:
        if f.final is None or not storage.exists(f.final):
            raise
        yield from _first_rows(storage, f, state=state, schema=schema, ring=ring)
        return
    yield from staged_batches(data, f, state=state, schema=schema, ring=ring)


def _first_rows(storage: Storage, f: CommittedFile, *, state: SinkState, schema: pa.Schema,
                ring: Mapping[str, bytes] | None) -> Iterator[pa.RecordBatch]:
    assert f.final is not None
    finished = CommittedFile(f.final, storage.size(f.final), f.directory, False)
    data = read_committed(storage, finished)
    left = f.records
    reader = FORMATS[state.format].implementation()
    for batch in reader.iter_file(data, schema, **bulk_read_options(data, finished, state,
                                                                     ring)):
        if left <= 0:
            return
        yield batch.slice(0, left)
        left -= batch.num_rows


def staged_batches(data: bytes, f: CommittedFile, *, state: SinkState, schema: pa.Schema,
                   ring: Mapping[str, bytes] | None) -> Iterator[pa.RecordBatch]:
    """The rows of a bulk format's staged file (Arrow IPC streams, no codec, sealed when
    the path is encrypted)."""
    from commit_protocol.formats import READ_BATCH_ROWS
    from commit_protocol.formats.ipc import iter_batches

    plain = row_plaintext(data, f, state=state, ring=ring)
    try:
        for batch in iter_batches(plain, schema):  # staged in task chunks of ~100,000 rows
            for start in range(0, batch.num_rows, READ_BATCH_ROWS):
                yield batch.slice(start, READ_BATCH_ROWS)
    except (ValueError, pa.ArrowException) as e:
        raise IntegrityError(f"{f.path}: cannot decode staged rows "
                             f"({type(e).__name__}: {e})") from e


def row_plaintext(data: bytes, f: CommittedFile, *, state: SinkState,
                  ring: Mapping[str, bytes] | None) -> bytes:
    """A row file's committed bytes decrypted (authenticated) and decompressed (a staged
    file has no codec of its own: its format's applies at its roll)."""
    from commit_protocol.crypto.sealed import open_sealed

    if state.encrypted:
        data = open_sealed(data, require_ring(ring, f.path), path=f.path,
                           require_final=not f.in_progress)
    return decompressed(data, f, state=state)


def decompressed(data: bytes, f: CommittedFile, *, state: SinkState, start: int = 0) -> bytes:
    """Row bytes of ``f`` (from byte ``start``) decompressed; a staged file's as they are."""
    if f.staged:
        return data
    try:
        return RowCodec(state.compression).decompress(data)
    except (OSError, EOFError, ValueError) as e:
        # gzip, bz2 and zstd raise different types; each means these are not our bytes
        where = f" from byte {start}" if start else ""
        raise IntegrityError(f"{f.path}: cannot decompress {state.compression} data{where} "
                             f"({type(e).__name__}: {e})") from e


def require_ring(ring: Mapping[str, bytes] | None, path: str) -> Mapping[str, bytes]:
    if not ring:
        raise EncryptionKeyError(f"{path} is encrypted: set encryption.key (or encryption.keys "
                                 "for several keys) to read it")
    return ring


def _partition_values(directory: str, schema: pa.Schema, partition_by: tuple[str, ...],
                      time_zone: str) -> dict[str, pa.Scalar]:
    """The partition columns' values of the files in ``directory``, typed as ``schema``."""
    parsed = parse_partition_dir(directory)
    values = {}
    for name in partition_by:
        kind = schema.field(name).type
        try:
            values[name] = parse_partition_value(parsed.get(name), kind, time_zone=time_zone)
        except (ValueError, ArithmeticError, pa.ArrowException) as e:
            raise CorruptLogError(f"partition directory {directory!r}: cannot read {name}="
                                  f"{parsed.get(name)!r} as {kind} ({e}); renamed by hand?") from e
    return values
