"""What a task does while Spark is still sending it rows: encode and write the chunks it has,
and make their bytes durable early.

A Python task spends much of its time waiting for the JVM to fill the next Arrow batch
(measured on a 16-core executor without Spark's size check: 0.4 s of a 1M-row task's 1.3 s
in PySpark's reading of the batch stream). Encoding a chunk (polars' JSON writer, pyarrow's
CSV writer, a codec) and writing it release the GIL, as does waiting for the socket, so a
second thread can encode and write one chunk while the task's own thread receives the next:

- :class:`ChunkPipeline` hands chunks to one worker thread through a queue of one: at most
  two chunks are in memory beyond the one being received, and the worker writes them in
  the order received, alone (every part file is written by that one thread, as before by
  the task's): the protocol's steps, failpoints and their order are those of a task writing
  without it. An error in the worker stops the task at its next chunk, or at the end.
- :class:`EarlySync` keeps an ``fsync`` of the file's bytes running in the background
  while the task writes, so that the ``fsync`` a task owes before it reports (the
  protocol's durability, ``commit.fsync``) finds little left to write (measured on the same
  executor: 0.27 s of a JSON lines task's wall time went in that last ``fsync``).

Both end with the task: no thread outlives it (Spark reuses the Python worker).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from commit_protocol.storage import Storage

EARLY_SYNC_BYTES = 4 << 20
_DONE = object()


class ChunkPipeline:
    """Runs ``write(chunk)`` for every chunk of :meth:`feed` on one worker thread, in order.

    Use as a context manager: leaving it waits for the worker (and raises what it raised);
    leaving it with an exception of the caller's stops the worker first.
    """

    def __init__(self, write: Callable[[Any], None]) -> None:
        self._write = write
        self._chunks: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rotsink-task-writer",
                                        daemon=True)

    def __enter__(self) -> ChunkPipeline:
        self._thread.start()
        return self

    def feed(self, chunks: Iterable[Any]) -> None:
        """Hand every chunk over (blocking while the worker is a chunk behind)."""
        for chunk in chunks:
            self._raise_if_failed()
            self._chunks.put(chunk)

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if error is not None and self._error is None:
            self._error = error  # the worker takes no more chunks
        self._chunks.put(_DONE)
        self._thread.join()
        if error is None:
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            chunk = self._chunks.get()
            if chunk is _DONE:
                return
            if self._error is not None:
                continue  # drain: the feeder sees the error at its next chunk
            try:
                self._write(chunk)
            except BaseException as e:  # noqa: BLE001  raised again in the task's thread
                self._error = e


class EarlySync:
    """Keeps one ``fsync`` of the task's growing files running in the background, on
    storages whose bytes need it (``enabled``: ``commit.fsync`` on a local disk): whenever
    none is running and a file holds :data:`EARLY_SYNC_BYTES` not yet synced, its sync
    starts. The task's own ``fsync`` before it reports still covers every byte, and finds
    only what was written during the last background one.

    One at a time, not one per threshold: the disk writes back behind the task at its own
    pace and no queue of syncs builds up behind a slow one. A threshold of 32 MB left the
    whole file to the last ``fsync`` in tasks that write less (JSON lines on a 16-core
    executor: 21 MB a task, 67 ms of each task's wall time at its end).
    """

    def __init__(self, storage: Storage, *, enabled: bool) -> None:
        self.storage = storage
        self.enabled = enabled
        self._synced: dict[str, int] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._running: Future[None] | None = None

    def note(self, path: str, written: int) -> None:
        """``path`` now holds ``written`` bytes (the writing thread's call)."""
        if not self.enabled or written - self._synced.get(path, 0) < EARLY_SYNC_BYTES:
            return
        if self._running is not None:
            if not self._running.done():
                return
            last, self._running = self._running, None
            last.result()  # an error of the last sync stops the task here
        self._synced[path] = written
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rotsink-sync")
        self._running = self._pool.submit(self.storage.sync, [path])

    def finish(self) -> None:
        """Wait for the sync running (raising its error), and stop the thread."""
        try:
            if self._running is not None:
                self._running.result()
        finally:
            self._running = None
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
