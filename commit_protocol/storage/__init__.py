"""Where the protocol's files live: the ``Storage`` contract and its backends.

* :mod:`~commit_protocol.storage.base`: the contract (``Storage``) and ``FileInfo``;
* :mod:`~commit_protocol.storage.local`: a POSIX directory (append, ``link(2)``);
* :mod:`~commit_protocol.storage.object_store`: object stores (segments, conditional
  creates), the logic they share, over the segment layout of
  :mod:`~commit_protocol.storage.segments` and one client per store behind
  :class:`~commit_protocol.storage.objects.Objects`: :mod:`~commit_protocol.storage.s3`,
  :mod:`~commit_protocol.storage.memory`.

:func:`open_storage` picks the backend for a URL (an object store's through
:mod:`~commit_protocol.storage.urls`, which checks its shape first); the object-store modules
are imported only for object-store URLs.
"""

from __future__ import annotations

from commit_protocol.storage.base import FileInfo, Storage
from commit_protocol.storage.local import LocalStorage

__all__ = ["FileInfo", "LocalStorage", "Storage", "open_storage"]


def open_storage(url: str, fs_options: dict[str, str] | None = None) -> Storage:
    """The backend for an output URL.

    Local paths and ``file://`` URLs get :class:`LocalStorage` (POSIX append and
    ``link(2)``); every other URL (``s3://``, ``s3a://``, ``memory://``) gets the object-store
    backend, which emulates appends with immutable segments and publishes with conditional
    creates. ``fs_options`` (the ``fs.*`` options without the prefix) go to fsspec.
    """
    if url.startswith("file://"):
        url = url[len("file://"):]
    if "://" not in url:
        return LocalStorage(url)
    from commit_protocol.storage.urls import open_object_storage

    return open_object_storage(url, dict(fs_options or {}))
