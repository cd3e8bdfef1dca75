"""A shared table: what other writers change, the log follows (DESIGN 4.11).

Other writers commit to rotsink's table between its own commits: a DELETE, UPDATE or MERGE
rewrites files (copy-on-write), an OPTIMIZE or ``rewrite_data_files`` replaces many small
files by a few large ones, a backfill appends. The table is then right, and rotsink's log,
which every path reader lists (Spark's ``spark.read.parquet(path)``, rotsink's own reader),
is not: it still lists the files the table removed and lacks those it added.

So the log follows the table. Before the log file of each batch, the committer reads the
table's version (one request); if a writer other than this process made a version since the
one the log last followed, it compares the table's files with the log's listing and records
the difference in the batch's state (:class:`Followed`, under ``extra.table_followed``):
the finalized files the table removed and the files other writers added below the output's
root, as of that table version. Recording it in the log file makes it exactly once: a commit
replayed after a kill compares again, and the comparison of two absolute listings gives the
same answer whenever it is made.

Who sees it when:

- rotsink's reader (and ``verify``, ``cat``, the table's catch-up) applies the latest batch's
  :class:`Followed` to the listing: it sees the table's version as of the batch's commit;
- Spark's readers honour no ``delete`` action (SPARK-30462, Spark 3.1) and compute which log
  files to read from the compaction interval: a listed file leaves their view only when a
  compaction omits it. So the next compaction batch writes the listing with the removed files
  left out and the added ones in, one atomic step (a removal without the rewrite's new file
  would lose rows; the new file without the removal would return them twice), and its state
  starts an empty :class:`Followed`. Spark's readers lag the table by at most one compaction
  interval; no shorter lag is safe, because only a compaction file replaces what the log
  files before it list.

A file the table removed stays on storage until the table's own clean-up (VACUUM, orphan
removal) deletes it, which respects a retention: as long as that retention is longer than a
compaction interval of batches, no path reader ever lists a file that is gone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

FOLLOWED_KEY = "table_followed"
# How long a file the table removed is remembered while nobody deletes it (Delta's
# delta.deletedFileRetentionDuration default): after that its table's clean-up is overdue,
# and the log stops carrying it (``verify`` then names it among the visible files)
RETIRED_KEEP_MS = 7 * 86_400_000


@dataclass(frozen=True)
class Followed:
    """Other writers' changes to the table as the log follows them, since the last
    compaction: the table ``version`` they are taken as of, the finalized files the table
    removed, the files others added below the output's root (path -> size), and how many of
    the table's files have rows deleted that a path reader cannot see (Delta's deletion
    vectors, Iceberg's delete files)."""

    version: int | None = None
    removed: frozenset[str] = frozenset()
    added: Mapping[str, int] = field(default_factory=dict)
    row_deletes: int = 0
    # files the table removed that a compaction has left out of the listing, still on
    # storage until the table's own clean-up (VACUUM, orphan removal) deletes them: no
    # reader of the log lists them, and ``verify`` knows them for the table's. Path -> when
    # a compaction first found it retired (-1: not yet stamped); kept RETIRED_KEEP_MS
    retired: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, extra: Mapping[str, Any]) -> Followed:
        """As a state's ``extra`` recorded it (empty for an output no other writer changed)."""
        body = extra.get(FOLLOWED_KEY)
        if not body:
            return cls()
        return cls(body.get("version"), frozenset(body.get("removed", ())),
                   {str(p): int(s) for p, s in body.get("added", [])},
                   int(body.get("row_deletes", 0)), _retired(body.get("retired", ())))

    def recorded(self) -> dict[str, Any]:
        """What a state's ``extra`` records (sorted: the same changes, the same bytes)."""
        return {"version": self.version, "removed": sorted(self.removed),
                "added": sorted([p, s] for p, s in self.added.items()),
                "row_deletes": self.row_deletes,
                "retired": sorted([p, t] for p, t in self.retired.items())}

    @property
    def changes_listing(self) -> bool:
        return bool(self.removed or self.added)

    def applied(self, listed: Iterable[tuple[str, int]]) -> dict[str, int]:
        """The listing ``listed`` (path, size) as the followed table version has it."""
        files = {path: size for path, size in listed if path not in self.removed}
        files.update(self.added)
        return files

    def compacted(self, on_storage: Iterable[str], now_ms: int) -> Followed:
        """After a compaction wrote the changes into the listing: nothing left to apply; the
        removed and retired files still ``on_storage`` retired, each for
        :data:`RETIRED_KEEP_MS` from when a compaction first found it so (bounded by that
        retention however often other writers rewrite the table and nobody cleans up).

        >>> old = Followed(retired={"a": 0, "b": -1})
        >>> dict(old.compacted(["a", "b", "c"], now_ms=RETIRED_KEEP_MS + 1).retired)
        {'b': 604800001, 'c': 604800001}
        """
        stamped = {p: self.retired.get(p, -1) for p in on_storage}
        return Followed(self.version, row_deletes=self.row_deletes, retired={
            p: now_ms if t < 0 else t for p, t in stamped.items()
            if t < 0 or now_ms - t <= RETIRED_KEEP_MS})

    @property
    def retiring(self) -> frozenset[str]:
        """What a compaction retires: the removed files and those retired before."""
        return self.removed | frozenset(self.retired)

    def with_changes(self, version: int, removed: set[str], added: Mapping[str, int],
                     row_deletes: int) -> Followed:
        """These changes (against the listing as this object applies it) on top of these:
        a file others added and removed again leaves ``added`` for ``retired`` (no log
        file lists it; storage holds it until the table's clean-up), never ``removed``."""
        kept = {p: s for p, s in self.added.items() if p not in removed}
        again = {p for p in removed if p in self.added}
        return Followed(version, self.removed | (removed - again), {**kept, **added},
                        row_deletes, {**self.retired, **{p: -1 for p in again}})


def _retired(recorded: Iterable[Any]) -> dict[str, int]:
    """Retired files as a state recorded them: ``[path, ms]`` pairs, or paths alone (an
    earlier rotsink's: stamped at the next compaction).

    >>> sorted(_retired([["a", 5], "b"]).items())
    [('a', 5), ('b', -1)]
    """
    return {str(r): -1 for r in recorded if isinstance(r, str)} | \
        {str(r[0]): int(r[1]) for r in recorded if not isinstance(r, str)}


_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/")


def is_elsewhere(path: str) -> bool:
    """Whether a table lists ``path`` by a whole URI: a file outside the output's root (a
    file below it is listed by its relative path).

    >>> is_elsewhere("s3://b/other/x.parquet"), is_elsewhere("file:/x.parquet")
    (True, True)
    >>> is_elsewhere("day=1/x.parquet")
    False
    """
    return _URI.match(path) is not None


def in_layout(path: str, partition_by: tuple[str, ...]) -> bool:
    """Whether another writer's file lies where path readers can list it: in a partition
    directory of the output (``col=value/`` per partition column, in order), at the root of
    an unpartitioned one. A file elsewhere (Iceberg's default ``data/``, a random prefix)
    would break Spark's partition discovery of the whole output
    (``CONFLICTING_DIRECTORY_STRUCTURES``), so the log never lists it.

    >>> in_layout("day=1/x.parquet", ("day",)), in_layout("data/day=1/x.parquet", ("day",))
    (True, False)
    >>> in_layout("x.parquet", ()), in_layout("s3://elsewhere/x.parquet", ())
    (True, False)
    """
    if is_elsewhere(path):
        return False
    directories = path.split("/")[:-1]
    if len(directories) != len(partition_by):
        return False
    pairs = zip(directories, partition_by, strict=True)
    return all(part.partition("=")[0] == column for part, column in pairs)


def outside_layout_problem(name: str, path: str) -> str:
    return (f"{path}: another writer's file in the {name} table lies outside the output's "
            "partition directories: path readers (spark.read.parquet, rotsink's) cannot "
            "list it, and the log does not; write it below the output's root as "
            "<column>=<value>/ directories (Iceberg: the table's write.data.path, which "
            "rotsink sets to the output's root)")
