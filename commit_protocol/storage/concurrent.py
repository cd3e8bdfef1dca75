"""Independent storage operations at once, where the storage gains from it.

An object store answers each request in 10-30 ms whatever its size, and a micro-batch's
commit waits for every request it sends in a row: its checks of many files, their publishes,
claims and deletes are independent of each other, so they go out together, up to
``Storage.concurrency`` at a time. A local disk answers in microseconds (a thread hand-off
costs more than the system call): ``concurrency`` 1 runs them one after another, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from commit_protocol.storage.base import Storage

T = TypeVar("T")
R = TypeVar("R")


def each(storage: Storage, function: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``function`` of every item, at most ``storage.concurrency`` at once; results in the
    order of ``items``.

    Every call ends before this returns, the failed ones too (none keeps running behind a
    commit that stops); then the first failure in the order of ``items`` is raised.

    >>> from commit_protocol.storage import LocalStorage
    >>> each(LocalStorage("/tmp"), lambda x: x * 2, [1, 2, 3])
    [2, 4, 6]
    """
    workers = min(storage.concurrency, len(items))
    if workers <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(workers, thread_name_prefix="rotsink-storage") as pool:
        futures = [pool.submit(function, item) for item in items]
    return [future.result() for future in futures]


# Files asked about in one directory from which listing it answers for them all: a LIST page
# holds 1,000 names, so the listing sends more requests than a HEAD each only for a
# directory of over 50,000 files
LIST_AT = 50


def existing(storage: Storage, paths: Sequence[str]) -> list[str]:
    """Those of ``paths`` that storage holds, in their order: a directory asked about
    :data:`LIST_AT` of its files or more is listed, the others' files are asked one by one
    (measured on SeaweedFS: 500 files of a partition a retention job emptied took 0.46 s of
    HEADs, at every compaction batch while the log carried them)."""
    by_directory: dict[str, list[str]] = {}
    for path in paths:
        by_directory.setdefault(path.rpartition("/")[0], []).append(path)
    listed = [d for d, inside in by_directory.items() if len(inside) >= LIST_AT]
    asked = [p for inside in by_directory.values() if len(inside) < LIST_AT for p in inside]
    present = {p for names in each(storage, storage.names, listed) for p in names}
    present.update(p for p, found in zip(asked, each(storage, storage.exists, asked),
                                         strict=True) if found)
    return [p for p in paths if p in present]
