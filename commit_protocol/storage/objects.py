"""The seam between :class:`~commit_protocol.storage.object_store.ObjectStorage` (segments,
publishing, the shared logic of every object store) and one store's client: the
:class:`Objects` a store's module implements, and the registry that names the module of each
URL scheme (as fsspec's ``known_implementations`` does), so that this module imports none.

A store's client makes each operation with that store's own primitive, never a check followed
by a write: an exclusive create and an exclusive compose fail with ``FileExistsError`` when
the object exists, unless this very call made it (a retried request), and a compose records
its sources so that :meth:`Objects.made_from` recognises it after a crash.
"""

from __future__ import annotations

import asyncio
import builtins
import importlib
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from commit_protocol.storage.segments import Blob, Piece
from commit_protocol.vocabulary.errors import OptionError

# URL scheme -> "module:class" of its client, taking the fsspec filesystem of the URL
CLIENTS = {
    "s3": "commit_protocol.storage.s3:S3Objects",
    "s3a": "commit_protocol.storage.s3:S3Objects",
    "memory": "commit_protocol.storage.memory:MemoryObjects",
    "gs": "commit_protocol.storage.gcs:GCSObjects",
    "gcs": "commit_protocol.storage.gcs:GCSObjects",
    "abfs": "commit_protocol.storage.azure:AzureObjects",
    "abfss": "commit_protocol.storage.azure:AzureObjects",
    "az": "commit_protocol.storage.azure:AzureObjects",
    "wasb": "commit_protocol.storage.azure:AzureObjects",
    "wasbs": "commit_protocol.storage.azure:AzureObjects",
}
# URL schemes fsspec does not know, as the scheme of the fsspec filesystem that serves them:
# Hadoop's wasb[s]://container@account.blob.core.windows.net/ is adlfs's abfs:// on that host
FSSPEC_SCHEMES = {"wasb": "abfs", "wasbs": "abfs"}
SMALL_BYTES = 1 << 20  # a compose of less is one GET per piece and one exclusive upload
_INT_OPTIONS = frozenset({"max_concurrency", "default_block_size", "retries"})
# seconds, as numbers (botocore refuses a string): s3fs's config_kwargs.read_timeout and
# .connect_timeout, adlfs's and gcsfs's own (a timeout at any depth of the keyword)
_SECONDS_OPTIONS = frozenset({"timeout", "read_timeout", "connect_timeout",
                              "connection_timeout", "socket_timeout", "requests_timeout"})


class Objects(Protocol):
    """One object store's operations, on ``bucket/key`` paths."""

    def list(self, prefix: str) -> builtins.list[Blob]:
        """Every object whose path starts with ``prefix``."""

    def head(self, path: str) -> tuple[Blob, dict[str, str]]:
        """The object and its user metadata; ``FileNotFoundError`` when there is none."""

    def get(self, path: str) -> bytes:
        """The whole object; ``FileNotFoundError`` when there is none."""

    def read(self, pieces: builtins.list[Piece]) -> bytes:
        """The bytes of ``pieces`` (ranges of objects), in order."""

    def put(self, path: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Create ``path`` holding ``data``, exclusively."""

    def compose(self, dst: str, pieces: builtins.list[Piece]) -> None:
        """Create ``dst`` from ``pieces``, exclusively, server-side where the store can."""

    def made_from(self, dst: str, pieces: builtins.list[Piece]) -> bool:
        """Whether ``dst`` was composed from exactly ``pieces``."""

    def delete(self, paths: builtins.list[str]) -> None:
        """Remove ``paths`` (those already gone are no error)."""

    def abort_uploads(self, prefix: str, before_ms: int,
                      owned: Callable[[str], bool]) -> builtins.list[str]:
        """Abort the unfinished composes under ``prefix`` begun before ``before_ms`` of the
        paths (below ``prefix``) that ``owned`` says are the caller's."""


def client_for(protocol: str, fs: Any) -> Objects | None:
    """The client of URL scheme ``protocol`` over ``fs``; None for a store without one."""
    named = CLIENTS.get(protocol)
    if named is None:
        return None
    module, _, name = named.partition(":")
    client: Objects = getattr(importlib.import_module(module), name)(fs)
    return client


def epoch_ms(moment: datetime) -> int:
    """A store's timestamp as the protocol's clock counts (epoch milliseconds)."""
    return int(moment.timestamp() * 1000)


async def bounded(coroutines: builtins.list[Any], limit: int) -> builtins.list[Any]:
    """Await ``coroutines``, at most ``limit`` at once, results in order; on a failure the
    others are cancelled (none keeps running behind an aborted upload) and it is raised."""
    semaphore = asyncio.Semaphore(limit)

    async def one(coroutine: Any) -> Any:
        try:
            async with semaphore:
                return await coroutine
        finally:
            coroutine.close()  # one cancelled before it started is closed, not leaked

    tasks = [asyncio.ensure_future(one(c)) for c in coroutines]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def split_path(path: str) -> tuple[str, str]:
    """``bucket/key`` as its bucket and key.

    >>> split_path("lake/events/part-0.parquet")
    ('lake', 'events/part-0.parquet')
    """
    bucket, _, key = path.partition("/")
    return bucket, key


class AsyncObjects:
    """A client whose requests are coroutines on the event loop of the fsspec filesystem
    ``fs`` it makes them through (s3fs's, gcsfs's): their credentials, session and retries."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def _run(self, coroutine_function: Any, *args: Any) -> Any:
        """Run ``coroutine_function(*args)`` on the filesystem's loop; its result."""
        from fsspec.asyn import sync

        return sync(self.fs.loop, coroutine_function, *args)


def parse_fs_options(options: dict[str, str]) -> dict[str, Any]:
    """Spark's string options as fsspec keywords.

    >>> parse_fs_options({"anon": "False", "retries": "3", "client_kwargs.region_name": "eu"})
    {'anon': False, 'retries': 3, 'client_kwargs': {'region_name': 'eu'}}
    >>> parse_fs_options({"config_kwargs.read_timeout": "2.5"})
    {'config_kwargs': {'read_timeout': 2.5}}
    """
    out: dict[str, Any] = {}
    for key, raw in options.items():
        value: Any = {"true": True, "false": False}.get(raw.strip().lower(), raw)
        if key in _INT_OPTIONS and isinstance(value, str):
            if not value.strip().isdigit():
                raise OptionError(f"fs.{key}: expected an integer, found {raw!r}")
            value = int(value)
        if key.rpartition(".")[2] in _SECONDS_OPTIONS and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise OptionError(f"fs.{key}: expected seconds (a number), found {raw!r}") \
                    from None
        head, dot, tail = key.partition(".")
        if dot:
            out.setdefault(head, {})[tail] = value
        else:
            out[key] = value
    return out
