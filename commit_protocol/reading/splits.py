"""A read plan: committed files cut into splits and spread over tasks, balanced by bytes.

Spark's file sources cut a file larger than ``maxSplitBytes = min(maxPartitionBytes,
max(openCostInBytes, totalBytes / parallelism))`` into byte ranges, so one big file uses
every core; so does rotsink, where a file's bytes allow it: a finished Parquet file (each task
reads the row groups whose middle byte falls in its range), and an uncompressed, unencrypted
JSON lines or text file (each task reads the lines that start in its range). ORC files (see
:class:`commit_protocol.formats.orc.OrcUnits`), compressed and encrypted row files, CSV (a
quoted value may hold a line break) and staged rows are read whole by one task, streamed, as
Spark reads a gzip file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from commit_protocol.formats import FORMATS
from commit_protocol.reading.files import CommittedFile, Layout
from commit_protocol.reading.rows import splittable

# Spark's defaults: spark.sql.files.maxPartitionBytes and openCostInBytes.
MAX_PARTITION_BYTES = 128 << 20
OPEN_COST_BYTES = 4 << 20
# Without a cluster's parallelism at planning, a read aims at this many tasks at least
# (small outputs still use every core).
MIN_PARTITIONS = 8


@dataclass(frozen=True)
class FileSplit:
    """Bytes ``[start, end)`` of ``file`` that one task reads; ``end`` None: the whole file."""

    file: CommittedFile
    start: int = 0
    end: int | None = None

    @property
    def size(self) -> int:
        return (self.file.length if self.end is None else self.end) - self.start


def split_bytes(total: int, *, max_partition_bytes: int = MAX_PARTITION_BYTES,
                parallelism: int = MIN_PARTITIONS) -> int:
    """Spark's ``maxSplitBytes`` for ``total`` bytes to read.

    >>> split_bytes(1 << 30) == 128 << 20, split_bytes(10 << 20) == 4 << 20
    (True, True)
    """
    return min(max_partition_bytes, max(OPEN_COST_BYTES, math.ceil(total / parallelism)))


def split_files(files: Iterable[CommittedFile], layout: Layout, *,
                max_bytes: int) -> list[FileSplit]:
    """Each file whole, or in ranges of ``max_bytes`` where its bytes allow (module
    docstring)."""
    splits = []
    for f in files:
        if f.length <= max_bytes or not can_split(f, layout):
            splits.append(FileSplit(f))
            continue
        starts = range(0, f.length, max_bytes)
        splits += [FileSplit(f, start, min(start + max_bytes, f.length)) for start in starts]
    return splits


def can_split(f: CommittedFile, layout: Layout) -> bool:
    """Whether tasks may read byte ranges of ``f`` (see the module docstring)."""
    if FORMATS[layout.format].bulk:
        return FORMATS[layout.format].splittable and not f.in_progress
    return splittable(f, layout)


def spread(splits: list[FileSplit], partitions: int) -> list[list[FileSplit]]:
    """``splits`` in up to ``partitions`` groups of about equal bytes: largest first, each
    to the group with the fewest bytes so far.

    >>> f = CommittedFile("a", 10, "", False)
    >>> [len(g) for g in spread([FileSplit(f, 0, 4), FileSplit(f, 4, 8), FileSplit(f, 8, 10)], 2)]
    [2, 1]
    """
    groups: list[list[FileSplit]] = [[] for _ in range(max(1, min(partitions, len(splits))))]
    sizes = [0] * len(groups)
    for split in sorted(splits, key=lambda s: -s.size):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(split)
        sizes[smallest] += split.size
    return [g for g in groups if g]
