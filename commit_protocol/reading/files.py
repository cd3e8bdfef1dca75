"""What a reader may read as of one committed batch: finalized files plus the committed
prefixes of in-progress files."""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from commit_protocol.formats import FORMATS
from commit_protocol.log import MetadataLog
from commit_protocol.records.state import SinkState
from commit_protocol.tables.row_deletes import deleted_in_place
from commit_protocol.tables.sharing import Followed
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.uris import from_uri


class Layout(Protocol):
    """How a path's files are written, all a read task needs of the committed state
    (:class:`SinkState` and :class:`ReadLayout` both fit)."""

    @property
    def format(self) -> str: ...
    @property
    def compression(self) -> str: ...
    @property
    def encrypted(self) -> bool: ...
    @property
    def partition_by(self) -> tuple[str, ...]: ...
    @property
    def added_columns(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class ReadLayout:
    """A :class:`Layout` without the state's per-file lists: what a reader pickles to its
    tasks, whatever the number of files in progress."""

    format: str
    compression: str
    encrypted: bool
    partition_by: tuple[str, ...]
    added_columns: frozenset[str] = frozenset()

    @classmethod
    def of(cls, state: SinkState) -> ReadLayout:
        return cls(state.format, state.compression, state.encrypted, state.partition_by,
                   state.added_columns)


@dataclass(frozen=True)
class CommittedFile:
    """``length`` committed bytes of ``path``, in partition directory ``directory``.

    An in-progress file also carries its ``final`` name: a later commit may publish it there
    while a read planned from this state still runs (see :mod:`commit_protocol.reading.inputs`).
    """

    path: str
    length: int
    directory: str
    in_progress: bool
    final: str | None = None
    staged: bool = False  # a bulk format's staged rows: encoded, never renamed, at a roll
    records: int = 0  # of an in-progress file: the committed rows
    # of a finalized file: the positions of the rows another writer deleted in place (a Delta
    # deletion vector's or Iceberg position deletes, as of the table version the log
    # followed), packed: ascending 64-bit integers, 8 bytes a row (:func:`packed`)
    deleted: bytes = b""


def committed_files(log: MetadataLog, batch: int, state: SinkState, *,
                    include_in_progress: bool = True, include_finalized: bool = True,
                    fs_options: dict[str, str] | None = None) -> list[CommittedFile]:
    """Every file (and committed prefix) visible as of ``batch``, whose ``state`` is given.

    A path listed twice (a log file edited by hand) is refused: Spark's readers would return
    its rows twice. Where a table follows the log, the listing is the table's as the log
    followed it (:mod:`commit_protocol.tables.sharing`): without the files other writers
    removed, with those they added, each with the rows deleted in place in it (read from the
    table with ``fs_options``; refused where rotsink's reader does not apply them:
    :mod:`commit_protocol.tables.row_deletes`).
    """
    files = []
    if include_finalized:
        followed = Followed.of(state.extra)
        deleted = deleted_in_place(log.storage, state, fs_options)
        listed_in: dict[str, str] = {}
        for log_file, entry in log.listed_entries(batch):
            try:
                path = from_uri(log.storage.root_uri, entry["path"])
            except ValueError as e:  # moved or copied output: the log names the old location
                raise CorruptLogError(f"metadata log file {log_file}: {e}") from e
            if path in listed_in:
                raise CorruptLogError(
                    f"metadata log file {log_file} lists {path} a second time (first in "
                    f"{listed_in[path]}): expected each file once; Spark's readers would "
                    "return its rows twice. Remove the duplicate line")
            listed_in[path] = log_file
            if path not in followed.removed:
                files.append(CommittedFile(path, int(entry["size"]), directory_of(path), False,
                                           deleted=packed(deleted.get(path, ()))))
        files += [CommittedFile(path, size, directory_of(path), False,
                                deleted=packed(deleted.get(path, ())))
                  for path, size in sorted(followed.added.items()) if path not in listed_in]
    if include_in_progress:
        files += in_progress_files(state)
    return files


def packed(positions: Iterable[int]) -> bytes:
    """Row positions (ascending) as :attr:`CommittedFile.deleted` holds them; :func:`unpacked`
    reads them back.

    >>> list(unpacked(packed([3, 70000000000])))
    [3, 70000000000]
    """
    return array("q", positions).tobytes()


def unpacked(deleted: bytes) -> array:
    positions = array("q")
    positions.frombytes(deleted)
    return positions


def in_progress_files(state: SinkState) -> list[CommittedFile]:
    """The committed prefixes of ``state``'s in-progress files (empty ones left out)."""
    staged = FORMATS[state.format].bulk
    return [CommittedFile(f.temp, f.size, f.directory, True, final=f.name, staged=staged,
                          records=f.records)
            for f in state.in_progress if f.size]


def directory_of(path: str) -> str:
    """The partition directory of a relative file path (``""`` at the root).

    >>> directory_of("day=1/part-0.jsonl"), directory_of("part-0.jsonl")
    ('day=1', '')
    """
    return path.rsplit("/", 1)[0] if "/" in path else ""
