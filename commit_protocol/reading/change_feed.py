"""The change feed: the rows a range of the sink's batches committed, each exactly once.

A feed position (a streaming reader's offset) is a sink batch id plus, for every file in
progress at that batch, the bytes and rows committed to it then: exactly what the feed has
delivered of it. The rows of batches ``(start, end]`` are then:

* of every file a batch in the range finalized (its state's ``publish`` list): the part after
  the start position's bytes (row formats: the same bytes, now under the final name) or rows
  (bulk formats: the finished file is encoded from the staged rows in order, so the first
  ``records`` rows are the ones delivered from the staged file); all of it for a file the
  start position does not list (opened after it);
* of every file in progress at ``end``: its committed bytes after the start position's.

So a row first delivered from an in-progress file is never delivered again from its
finalized file, and only the states of the batches in the range are read: log compaction and
retention change nothing here. A state whose log file was cleaned up is a loud error naming
the setting to raise (``feed.retention``), never silently skipped rows; with it set, the
states of batches whose log files are gone come from the clean-up's change-feed segments
(``commit_protocol/log/feed_states.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from commit_protocol.formats import FORMATS
from commit_protocol.log import MetadataLog
from commit_protocol.log.feed_states import kept_state
from commit_protocol.reading import CommittedFile, with_partition_columns
from commit_protocol.reading.bulk import rows_of_finished, staged_batches
from commit_protocol.reading.rows import row_batches
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import CorruptLogError, RotsinkError


class FeedBehindError(RotsinkError):
    """The feed needs the state of a sink batch whose log file was cleaned up."""


class FeedSchemaChangedError(RotsinkError):
    """The sink added columns after the feed started: the feed stops before them."""


@dataclass(frozen=True)
class FeedPosition:
    """Delivered up to sink batch ``batch`` (-1: nothing), with ``files`` the in-progress
    files of that batch as ``(name, committed bytes, records)``."""

    batch: int
    files: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def of(cls, state: SinkState) -> FeedPosition:
        return cls(state.batch_id, tuple(sorted((f.name, f.size, f.records)
                                                for f in state.in_progress)))

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "files": {n: [size, rows] for n, size, rows in self.files}}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> FeedPosition:
        try:
            files = tuple(sorted((str(n), int(v[0]), int(v[1]))
                                 for n, v in dict(body.get("files", {})).items()))
            return cls(int(body["batch"]), files)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise CorruptLogError(f"bad change-feed offset {dict(body)!r}: {e}") from e


@dataclass(frozen=True)
class Piece:
    """Rows of one file that a feed micro-batch returns.

    ``path`` holds them: the file's temp in the end state (``in_progress``) or its final name.
    Row and staged files: bytes ``[start, end)`` (whole appends), which are the ``records``
    rows after the first ``skip`` (staged files: known, for when the file was encoded since).
    A finished bulk file: all its rows after the first ``skip``.
    """

    name: str
    directory: str
    path: str
    start: int
    end: int
    in_progress: bool
    skip: int = 0
    records: int = 0  # rows in the piece when known (in-progress files), else 0


def plan(log: MetadataLog, start: FeedPosition, end_batch: int, *,
         bulk: bool) -> tuple[list[Piece], FeedPosition]:
    """The pieces of sink batches ``(start.batch, end_batch]`` and the position after them."""
    delivered = {name: (size, rows) for name, size, rows in start.files}
    pieces: list[Piece] = []
    end_state = None
    for batch in range(start.batch + 1, end_batch + 1):
        state = feed_state(log, batch)
        for p in state.publish:
            size, rows = delivered.pop(p.name, (0, 0))
            if bulk:
                pieces.append(Piece(p.name, _directory(p.name), p.name, 0, p.size, False,
                                    skip=rows))
            elif p.size > size:  # row formats: the rest of the same bytes
                pieces.append(Piece(p.name, _directory(p.name), p.name, size, p.size, False))
        end_state = state
    if end_state is None:
        return [], start
    for f in end_state.in_progress:
        size, rows = delivered.pop(f.name, (0, 0))
        if f.size > size:
            pieces.append(Piece(f.name, f.directory, f.temp, size, f.size, True,
                                skip=rows, records=f.records - rows))
    if delivered:
        lost = ", ".join(sorted(delivered))
        raise CorruptLogError(f"change feed: {lost} was in progress at sink batch "
                              f"{start.batch} but neither finalized by a batch up to "
                              f"{end_batch} nor in progress at it: the log is damaged")
    return pieces, FeedPosition.of(end_state)


def feed_state(log: MetadataLog, batch: int) -> SinkState:
    """The state of sink batch ``batch``: from its log file, or, once the clean-up deleted
    that, from the change-feed segment that keeps it (``feed.retention``)."""
    try:
        return log.read_state(batch)
    except CorruptLogError:
        kept = kept_state(log.storage, batch)  # a feed catching up: the next few are there
        if kept is not None:
            return kept
        log.batch_ids()  # list again: the name may have changed (a compaction)
        if log.storage.exists(log.path_of(batch)):
            return log.read_state(batch)
        raise FeedBehindError(
            f"the change feed needs sink batch {batch}, whose metadata log file "
            f"{log.path_of(batch)} was deleted by the sink's log clean-up, and no change-feed "
            f"segment keeps its state: the feed fell behind by more than the sink's "
            "log.cleanupDelay and feed.retention (set feed.retention on the sink to the "
            "feed's longest pause), or restart the feed from a new checkpoint with "
            "startingBatch=latest (rows committed meanwhile are then not read)") from None


def _directory(name: str) -> str:
    return name.rsplit("/", 1)[0] if "/" in name else ""


def batches_within(log: MetadataLog, start: FeedPosition, latest: int, *, max_batches: int,
                   max_files: int, max_bytes: int) -> int:
    """The last sink batch a feed micro-batch from ``start`` includes under the limits (0: no
    limit); always at least one batch, so a feed never stalls on one large batch."""
    end = latest if not max_batches else min(latest, start.batch + max_batches)
    if not (max_files or max_bytes) or end <= start.batch + 1:
        return end
    files = size = 0
    for batch in range(start.batch + 1, end + 1):
        state = feed_state(log, batch)
        files += len(state.publish) + len(state.in_progress)
        size += sum(p.size for p in state.publish) + sum(f.size for f in state.in_progress)
        if batch > start.batch + 1 and ((max_files and files > max_files)
                                       or (max_bytes and size > max_bytes)):
            return batch - 1
    return end


def spread(pieces: list[Piece], partitions: int) -> Iterator[list[Piece]]:
    """``pieces`` in up to ``partitions`` groups of about equal bytes (largest first)."""
    groups: list[list[Piece]] = [[] for _ in range(max(1, min(partitions, len(pieces))))]
    sizes = [0] * len(groups)
    for piece in sorted(pieces, key=lambda p: p.end - p.start, reverse=True):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(piece)
        sizes[smallest] += piece.end - piece.start
    yield from (g for g in groups if g)


def piece_batches(storage: Storage, piece: Piece, *, state: SinkState, schema: pa.Schema,
                  ring: Mapping[str, bytes] | None = None,
                  time_zone: str = "UTC") -> Iterator[pa.RecordBatch]:
    """The rows of ``piece`` as ``schema`` (partition columns added), decrypted and
    decompressed as the path was written."""
    data_schema = pa.schema([f for f in schema if f.name not in state.partition_by])
    batches = _rows(storage, piece, state=state, schema=data_schema, ring=ring)
    yield from with_partition_columns(batches, piece.directory, schema=schema, state=state,
                                      time_zone=time_zone)


def _rows(storage: Storage, piece: Piece, *, state: SinkState, schema: pa.Schema,
          ring: Mapping[str, bytes] | None) -> Iterator[pa.RecordBatch]:
    bulk = FORMATS[state.format].bulk
    f = CommittedFile(piece.path, piece.end, piece.directory, piece.in_progress,
                      final=piece.name if piece.in_progress else None,
                      staged=bulk and piece.in_progress, records=piece.skip + piece.records)
    options: dict[str, Any] = {"layout": state, "schema": schema, "ring": ring}
    if bulk and not piece.in_progress:
        yield from rows_of_finished(storage, f, skip=piece.skip, **options)
    elif bulk:
        # a staged file rolled (encoded) and cleaned up after the planned state has the same
        # rows, in order, in the finished file: staged_batches reads them there
        yield from staged_batches(storage, f, start=piece.start, skip=piece.skip, **options)
    else:
        yield from row_batches(storage, f, start=piece.start, **options)
