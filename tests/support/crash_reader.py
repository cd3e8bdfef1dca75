"""A reader beside the crash loop's lives: it plans and reads the output again and again,
exactly as ``spark.read.format("rotsink")`` does (one committed state, then each file's
committed bytes), or through the fast path (``pyspark_rotsink.read`` on the test's Spark
session: Spark's reader for the finalized files), while drivers commit, die at failpoints
and are repaired.

A read may fail while a driver is being killed, but a read that returns must hold the right
rows: each id once, only ids of input written so far, every column as the input had it,
and every row an earlier read returned (a committed row never disappears).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from commit_protocol.reading import committed_files, open_committed, read_batches
from commit_protocol.storage import Storage
from tests.support.streams import group_of

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("grp", pa.string()),
                    ("score", pa.float64())])
# Between reads at least as long as the last read took: a steady reader that uses at most
# half a core, not a busy loop competing with the driver for the machine's two cores.
PACE_S = 0.2


@dataclass
class ReaderTally:
    way: str = "rotsink's reading path"
    reads: int = 0
    failed: Counter = field(default_factory=Counter)  # by error type
    wrong: list[str] = field(default_factory=list)
    most_rows: int = 0

    def line(self) -> str:
        failures = ", ".join(f"{n} {kind}" for kind, n in self.failed.most_common()) or "none"
        return (f"reader beside the lives ({self.way}): {self.reads} reads, up to "
                f"{self.most_rows} rows; failed: {failures}; wrong rows: {len(self.wrong)}")


class BesideReader:
    """Reads in a thread between :meth:`start` and :meth:`stop` (one life, its repair)."""

    def __init__(self, storage: Callable[[], Storage], ring: Mapping[str, bytes] | None,
                 tally: ReaderTally, *, rows_per_group: int = 0,
                 schema: pa.Schema = SCHEMA,
                 fast_path: Callable[[], list[dict]] | None = None) -> None:
        self.storage = storage
        self.fast_path = fast_path  # the rows of one read through pyspark_rotsink.read
        self.schema = schema  # the output's columns: SCHEMA and any the query added
        self.ring = ring
        self.tally = tally
        self.rows_per_group = rows_per_group  # see tests.support.streams.group_of
        self.seen: set[int] = set()
        self.rows_in = 0
        # ids the input holds more than once (an at-least-once producer's retry): how often
        self.input_counts: Mapping[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, rows_in: int, input_counts: Mapping[int, int] | None = None) -> None:
        self.rows_in = rows_in
        self.input_counts = input_counts or {}
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        took = 0.0
        while not self._stop.wait(PACE_S + took):
            started = time.monotonic()
            try:
                ids = self.read_once()
            except Exception as e:  # noqa: BLE001 - a failed read is counted, never hidden
                self.tally.failed[type(e).__name__] += 1
                ids = None
            if ids is not None:
                self._check(ids)
            took = time.monotonic() - started

    def read_once(self) -> list[int] | None:
        """The ids of one read (None before the first commit); wrong values are recorded."""
        storage = self.storage()
        committed = open_committed(storage)
        if committed is None:
            return None
        if self.fast_path is not None:
            ids = [self._checked(row, "fast path") for row in self.fast_path()]
            self.tally.reads += 1
            return ids
        log, latest, state = committed
        ids = []
        for f in committed_files(log, latest, state, include_in_progress=True):
            for batch in read_batches(storage, f, state=state, schema=self.schema, ring=self.ring):
                ids += [self._checked(row, f"batch {latest}: {f.path}")
                        for row in batch.to_pylist()]
        self.tally.reads += 1
        return ids

    def _checked(self, row: dict, where: str) -> int:
        """``row``'s id, after recording it as wrong unless it holds what the input had."""
        expected = (f'row "{row["id"]}", ü\\',
                    group_of(row["id"], rows_per_file=self.rows_per_group), row["id"] / 4)
        if (row["name"], row["grp"], row["score"]) != expected:
            self.tally.wrong.append(f"{where}: {row}")
        return row["id"]

    def _check(self, ids: list[int]) -> None:
        found = set(ids)
        if len(found) != len(ids):
            twice = sorted(i for i, n in Counter(ids).items()
                           if n > self.input_counts.get(i, 1))
            if twice:
                self.tally.wrong.append(f"ids read twice: {twice[:10]}")
        if foreign := sorted(i for i in found if not 0 <= i < self.rows_in):
            self.tally.wrong.append(f"ids never written: {foreign[:10]}")
        if lost := sorted(self.seen - found):
            self.tally.wrong.append(f"ids an earlier read returned are gone: {lost[:10]}")
        self.seen |= found
        self.tally.most_rows = max(self.tally.most_rows, len(found))
