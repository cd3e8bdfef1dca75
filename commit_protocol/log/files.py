"""The files of the metadata log: names and batch-id arithmetic, listing, and reading.

Names follow Spark's ``CompactibleFileStreamLog``: a file per batch named by the bare batch
id, ``<id>.compact`` for the compaction batches (``(id + 1) % interval == 0``), first line
``v1``. Readers derive the interval from the names on disk; the functions here need no
:class:`~commit_protocol.log.MetadataLog`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, TypeVar

from commit_protocol.log.lines import CHUNK, parse_line
from commit_protocol.records.state import SinkState, StateHead
from commit_protocol.storage import FileInfo, Storage
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.naming import LOG_DIR

T = TypeVar("T")

VERSION_LINE = "v1"
COMPACT_SUFFIX = ".compact"
_MAX_VERSION_LINE = 4096  # a garbage file without newlines is not read whole to say so


def is_compaction_batch(batch_id: int, interval: int) -> bool:
    """Whether ``batch_id`` is written as ``<id>.compact``.

    >>> [b for b in range(25) if is_compaction_batch(b, 10)]
    [9, 19]
    """
    return (batch_id + 1) % interval == 0


def log_file_name(batch_id: int, interval: int) -> str:
    """``"9.compact"`` for a compaction batch, ``"12"`` otherwise (interval 10)."""
    compaction = is_compaction_batch(batch_id, interval)
    return f"{batch_id}{COMPACT_SUFFIX}" if compaction else str(batch_id)


def last_compaction_at_or_before(batch_id: int, interval: int) -> int | None:
    """The newest compaction batch id ``<= batch_id``, or None before the first one.

    >>> last_compaction_at_or_before(25, 10), last_compaction_at_or_before(19, 10)
    (19, 19)
    >>> last_compaction_at_or_before(8, 10) is None
    True
    """
    candidate = (batch_id + 1) // interval * interval - 1
    return candidate if candidate >= 0 else None


def batch_id_of(name: str) -> int | None:
    """Batch id of a log file name, None for anything else (temp files, stray files).

    >>> batch_id_of("19.compact"), batch_id_of("7"), batch_id_of(".7.tmp")
    (19, 7, None)
    """
    stem = name[: -len(COMPACT_SUFFIX)] if name.endswith(COMPACT_SUFFIX) else name
    return int(stem) if stem.isdigit() else None


def batch_files(storage: Storage, directory: str) -> dict[int, list[FileInfo]]:
    """The files of ``directory`` (the log, or the intents) named by a batch id, by id; other
    names (temp files, strays) are left out. Two files for one id is damage the caller names.
    """
    return _by_batch_id(storage.list(directory), lambda info: info.path)


def batch_names(storage: Storage, directory: str) -> dict[int, list[str]]:
    """:func:`batch_files` by name only (paths relative to the root), listed without a size
    per file: what the many per-batch listings of the log and intents need."""
    return _by_batch_id(storage.names(directory), lambda path: path)


def _by_batch_id(items: Iterable[T], path_of: Callable[[T], str]) -> dict[int, list[T]]:
    found: dict[int, list[T]] = {}
    for item in items:
        if (batch_id := batch_id_of(path_of(item).rsplit("/", 1)[-1])) is not None:
            found.setdefault(batch_id, []).append(item)
    return found


def log_file_names(storage: Storage) -> dict[int, str]:
    """The name of every log file on storage by batch id.

    Raises ``CorruptLogError`` when two files hold one batch id (``3`` and ``3.compact``):
    Spark's readers would take either, so neither may be trusted.
    """
    names: dict[int, str] = {}
    for batch_id, paths in batch_names(storage, LOG_DIR).items():
        if len(paths) > 1:
            both = " and ".join(sorted(paths))
            raise CorruptLogError(
                f"metadata log files {both} both hold batch {batch_id}: expected one file per "
                "batch; one was copied or renamed by hand? Remove the one that does not "
                "belong (readers may take either)")
        names[batch_id] = paths[0].rsplit("/", 1)[-1]
    return names


def entries(storage: Storage, path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parsed entries of one log file with their line numbers, version line checked."""
    for number, raw in raw_lines(storage, path):
        yield number, parse_line(path, number, raw)

def open_checked(storage: Storage, path: str, opened: BinaryIO | None = None) -> BinaryIO:
    """``path`` opened for reading (or ``opened``, its handle opened ahead) after its version
    line, which is checked."""
    try:
        handle = storage.open_read(path) if opened is None else opened
    except FileNotFoundError as e:
        raise CorruptLogError(f"metadata log file {path} is missing (deleted while it was "
                              "read, or by hand)") from e
    try:
        first = handle.readline(_MAX_VERSION_LINE).decode("utf-8", "replace").rstrip("\n")
    except BaseException:
        handle.close()
        raise
    if first != VERSION_LINE:
        handle.close()
        binary = "\ufffd" in first or any(c < " " and c not in "\r\t" for c in first)
        found = "binary data" if binary else repr(first[:40])
        raise CorruptLogError(
            f"metadata log file {path}: expected version line {VERSION_LINE!r}, "
            f"found {found}; it was written by an unknown or newer writer, or is corrupt")
    return handle

def raw_lines(storage: Storage, path: str) -> Iterator[tuple[int, bytes]]:
    """Entry lines of one log file with their line numbers, version line checked."""
    with open_checked(storage, path) as handle:
        yield from enumerate(handle, start=2)

def raw_blocks(storage: Storage, path: str,
               opened: BinaryIO | None = None) -> Iterator[tuple[int, bytes]]:
    """``(offset, block)``: the entry lines of one log file (``opened`` ahead, or opened now)
    in blocks of whole lines of about ``CHUNK`` bytes (lines 2 and 3, the state entry and a
    compaction's snapshot, alone: see :func:`is_state_line`), version line checked."""
    with open_checked(storage, path, opened) as handle:
        offset = handle.tell()
        for _ in range(2):
            if line := handle.readline():
                yield offset, line
                offset += len(line)
        rest = b""
        while chunk := handle.read(CHUNK):
            end = chunk.rfind(b"\n") + 1
            if end:
                yield offset, rest + chunk[:end]
                offset += len(rest) + end
                rest = chunk[end:]
            else:
                rest += chunk
        if rest:
            yield offset, rest

def is_state_line(block: bytes) -> bool:
    """Whether a block of :func:`raw_blocks` is one of rotsink's own ``isDir`` lines (a
    state entry or a snapshot), which no listing includes: told without parsing a snapshot
    of megabytes (the seven fields Spark needs come first, so ``isDir`` is near the start)."""
    return block.count(b"\n") <= 1 and b',"isDir":true,' in block[:_MAX_VERSION_LINE]


def read_head(storage: Storage, path: str, batch_id: int) -> StateHead:
    """The state entry (line 2) of ``path``, which must be ``batch_id``'s: a log file copied
    or renamed to another batch id would otherwise pass off an old state as the latest."""
    found = "the end of the file"
    for number, entry in entries(storage, path):
        body = entry.get("rotsink") if entry.get("isDir") else None
        if body is None:
            found = f"{json.dumps(entry)[:80]!r}"
            break
        head = _parsed(path, number, body, StateHead.from_json)
        if head.state.batch_id != batch_id:
            raise CorruptLogError(
                f"metadata log file {path} holds the state of batch {head.state.batch_id}: "
                f"expected batch {batch_id}; copied or renamed by hand?")
        return head
    raise CorruptLogError(f"metadata log file {path}: expected rotsink's state entry on "
                          f"line 2, found {found}; truncated, or written by another sink?")


def read_snapshot(storage: Storage, path: str, head: StateHead) -> SinkState:
    """The whole state of a compaction file: its head with the snapshot on line 3."""
    lines = entries(storage, path)
    try:
        next(lines)  # the head, read already
        number, entry = next(lines)
    except StopIteration:
        raise CorruptLogError(f"metadata log file {path}: expected rotsink's state snapshot "
                              "on line 3, found the end of the file; truncated?") from None
    body = entry.get("rotsink_snapshot") if entry.get("isDir") else None
    if body is None:
        raise CorruptLogError(f"metadata log file {path} line {number}: expected rotsink's "
                              f"state snapshot, found {json.dumps(entry)[:80]!r}")
    return _parsed(path, number, body, head.with_snapshot)


def _parsed(path: str, number: int, body: object, parse: Callable[[Any], T]) -> T:
    try:
        if not isinstance(body, dict):
            raise TypeError(f"expected an object, found {type(body).__name__}")
        return parse(body)
    except (KeyError, TypeError, ValueError) as e:
        detail = f"no field {e}" if isinstance(e, KeyError) else str(e)
        raise CorruptLogError(f"metadata log file {path} line {number}: "
                              f"bad rotsink state ({detail})") from e
