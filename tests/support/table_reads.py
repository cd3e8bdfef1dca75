"""Reads of a table by readers no one here wrote, beside a query that commits to it: the
in-process ones (delta-rs, pyiceberg, polars) in threads, kept as ``(table version, ids)`` for
the tests to check."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.streams import write_numbered_source

Read = Callable[[Path], tuple[int, Counter]]  # out -> (table version, ids it returned)


class Reads:
    """Reads of the table, each ``(table version, ids)``, from one reader."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, Counter]] = []
        self.failed: list[str] = []


def read_in_a_loop(out: Path, reads: Reads, done: threading.Event, read: Read,
                   min_reads: int) -> None:
    """``read(out)`` until ``done`` and at least ``min_reads`` times; a table not found
    before the first read is waited for (the query's first finalizing commit creates it)."""
    while not done.is_set() or len(reads.seen) + len(reads.failed) < min_reads:
        try:
            reads.seen.append(read(out))
        except Exception as e:  # noqa: BLE001 -- every failure is asserted away by the test
            if type(e).__name__ in ("TableNotFoundError", "NoSuchTableError") \
                    and not reads.seen:
                time.sleep(0.05)
                continue
            reads.failed.append(f"{type(e).__name__}: {e}")
        time.sleep(0.1)  # about 5 reads a second: room on two cores for the query


@contextlib.contextmanager
def reading(out: Path, readers: dict[str, Read], *, min_reads: int
            ) -> Iterator[dict[str, Reads]]:
    """Each reader reading ``out`` in a thread of its own, from entering to leaving (and at
    least ``min_reads`` times)."""
    done = threading.Event()
    reads = {name: Reads() for name in readers}
    threads = [threading.Thread(target=read_in_a_loop,
                                args=(out, reads[name], done, read, min_reads))
               for name, read in readers.items()]
    for thread in threads:
        thread.start()
    try:
        yield reads
    finally:
        done.set()
        for thread in threads:
            thread.join()


def numbered_runs(start_query: Callable[..., Any], spark, source: Path, out: Path,
                  checkpoint: Path) -> Callable[[int, int], Any]:
    """``run(first_file, files)``: writes ``files`` numbered input files (40 rows each) from
    ``first_file`` on and runs ``start_query(spark, source, out, checkpoint)`` over them to
    its end; returns the query."""
    def run(first_file: int, files: int):
        write_numbered_source(source, files=files, rows_per_file=40, start_file=first_file)
        query = start_query(spark, source, out, checkpoint)
        query.awaitTermination()
        return query

    return run
