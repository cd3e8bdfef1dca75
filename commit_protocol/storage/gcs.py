"""Google Cloud Storage under :class:`~commit_protocol.storage.object_store.ObjectStorage`
(``gs://``, ``gcs://``), through the JSON API and the HTTP session gcsfs holds (its
credentials, retries and error translation: a 404 is ``FileNotFoundError``, a 412
``FileExistsError``). Every request is made here, not through gcsfs's file operations, so that
each carries the precondition it needs and nothing else (gcsfs's uploads first ask which kind
of bucket they write to).

* exclusive create: a multipart upload with ``ifGenerationMatch=0`` ("only if no live object
  has this name"); a 412 means the object exists, unless it carries this create's token (a
  retry whose first attempt succeeded);
* exclusive compose: ``objects.compose`` with ``ifGenerationMatch=0`` on the destination,
  whole objects only (32 a call): a piece that is part of an object is first copied to a
  hidden object of its own; more than 32 sources are composed into hidden intermediates, and
  the last compose, the only one onto the visible name, is the exclusive one. The object
  records the digest of its sources (object generations, ranges), so a retry recognises it;
* stale composes: hidden intermediates of a compose whose process died, deleted by age.

Paths are ``bucket/name``; generations play S3's ETags in the digests.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from commit_protocol.storage.objects import bounded, split_path
from commit_protocol.storage.preconditions import PreconditionObjects
from commit_protocol.storage.segments import Blob, Piece

MAX_COMPOSE = 32  # GCS: source objects per compose request
_HIDDEN = ".compose-"  # the intermediates of a compose: a hidden name beside the target


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _blob(bucket: str, item: dict[str, Any]) -> Blob:
    return Blob(f"{bucket}/{item['name']}", int(item["size"]), _ms(item["updated"]),
                str(item.get("generation", "")))


class GCSObjects(PreconditionObjects):
    """GCS through the HTTP session of a gcsfs ``GCSFileSystem`` (``fs._call``)."""

    async def _list(self, prefix: str) -> builtins.list[Blob]:
        bucket, key = split_path(prefix)
        blobs: builtins.list[Blob] = []
        page: dict[str, str] = {}
        while True:
            out = await self.fs._call("GET", "b/{}/o", bucket, prefix=key, json_out=True,
                                      fields="items(name,size,updated,generation),"
                                             "nextPageToken", **page)
            blobs += [_blob(bucket, item) for item in out.get("items", [])]
            if not out.get("nextPageToken"):
                return blobs
            page = {"pageToken": out["nextPageToken"]}

    def list(self, prefix: str) -> builtins.list[Blob]:
        return self._run(self._list, prefix)

    async def _head(self, path: str) -> tuple[Blob, dict[str, str]]:
        bucket, key = split_path(path)
        out = await self.fs._call("GET", "b/{}/o/{}", bucket, key, json_out=True)
        return _blob(bucket, out), dict(out.get("metadata") or {})

    def head(self, path: str) -> tuple[Blob, dict[str, str]]:
        return self._run(self._head, path)

    async def _download(self, path: str, start: int | None = None,
                        length: int | None = None) -> bytes:
        bucket, key = split_path(path)
        headers = ({} if start is None or length is None
                   else {"Range": f"bytes={start}-{start + length - 1}"})
        _, data = await self.fs._call("GET", "b/{}/o/{}", bucket, key, alt="media",
                                      headers=headers)
        return bytes(data)

    # -- exclusive creates -----------------------------------------------------------------
    async def _upload(self, path: str, data: bytes, metadata: dict[str, str]) -> None:
        """One object, only if none lives at ``path`` (``ifGenerationMatch=0``)."""
        bucket, key = split_path(path)
        head = json.dumps({"name": key, "metadata": metadata})
        body = (f"--==0==\nContent-Type: application/json; charset=UTF-8\n\n{head}\n"
                "--==0==\nContent-Type: application/octet-stream\n\n").encode() \
            + data + b"\n--==0==--"
        await self.fs._call("POST", f"{self.fs._location}/upload/storage/v1/b/"
                            f"{quote(bucket)}/o", uploadType="multipart", ifGenerationMatch="0",
                            headers={"Content-Type": 'multipart/related; boundary="==0=="'},
                            data=body)

    async def _compose_large(self, dst: str, pieces: builtins.list[Piece],
                           metadata: dict[str, str], token: str) -> None:
        made: builtins.list[str] = []  # the hidden objects this compose made, deleted after
        try:
            sources = await bounded([self._whole(p, dst, token, n, made)
                                     for n, p in enumerate(pieces) if p.length],
                                    self._concurrency())
            level = 0
            while len(sources) > MAX_COMPOSE:  # into intermediates of 32 sources each
                groups = [sources[i:i + MAX_COMPOSE]
                          for i in range(0, len(sources), MAX_COMPOSE)]
                names = [self._hidden(dst, token, f"l{level}-{i}") for i in range(len(groups))]
                made += names
                await bounded([self._compose(name, group, {}, exclusive=False)
                               for name, group in zip(names, groups, strict=True)],
                              self._concurrency())
                sources, level = names, level + 1
            await self._compose(dst, sources, metadata, exclusive=True)
        finally:
            await self._delete_all(made)

    async def _whole(self, piece: Piece, dst: str, token: str, n: int,
                     made: builtins.list[str]) -> str:
        """``piece`` as a whole object: the object itself, or a hidden copy of its range."""
        if piece.start == 0 and piece.length == piece.blob.size:
            return piece.blob.path
        name = self._hidden(dst, token, f"p{n}")
        made.append(name)
        await self._upload(name, await self._get(piece), {})
        return name

    async def _compose(self, dst: str, sources: builtins.list[str],
                       metadata: dict[str, str], *, exclusive: bool) -> None:
        bucket, key = split_path(dst)
        objects = []
        for source in sources:
            source_bucket, name = split_path(source)
            if source_bucket != bucket:
                raise OSError(errno.EXDEV, f"GCS composes within one bucket: {source}", dst)
            objects.append({"name": name})
        condition = {"ifGenerationMatch": "0"} if exclusive else {}
        await self.fs._call("POST", "b/{}/o/{}/compose", bucket, key,
                            headers={"Content-Type": "application/json"},
                            json={"sourceObjects": objects, "kind": "storage#composeRequest",
                                  "destination": {"name": key, "bucket": bucket,
                                                  "metadata": metadata}},
                            **condition)

    @staticmethod
    def _hidden(dst: str, token: str, part: str) -> str:
        directory, _, name = dst.rpartition("/")
        return f"{directory}/{_HIDDEN}{name}-{token}-{part}"

    # -- deletes -------------------------------------------------------------------------
    async def _delete(self, path: str) -> None:
        bucket, key = split_path(path)
        with contextlib.suppress(FileNotFoundError):
            await self.fs._call("DELETE", "b/{}/o/{}", bucket, key)

    async def _delete_all(self, paths: builtins.list[str]) -> None:
        await bounded([self._delete(p) for p in paths], self._concurrency())

    def delete(self, paths: builtins.list[str]) -> None:
        self._run(self._delete_all, paths)

    def abort_uploads(self, prefix: str, before_ms: int,
                      owned: Callable[[str], bool]) -> builtins.list[str]:
        """Delete the hidden intermediates of composes begun before ``before_ms`` (a process
        that died mid-compose leaves them: GCS has no upload to abort); every one is a
        compose's of this module, whoever ``owned`` says the target is."""
        stale = [b.path for b in self.list(prefix)
                 if b.path.rpartition("/")[2].startswith(_HIDDEN) and b.mtime_ms < before_ms]
        self.delete(stale)
        return stale
