"""Storage on object stores without append or rename: S3 (s3fs) and fsspec's ``memory://``.

Same guarantees as :class:`~commit_protocol.storage.LocalStorage`, by other means:

* appends become immutable segments ``<path>/<offset>`` (see :mod:`commit_protocol.segments`);
* every create is exclusive: on S3 a conditional write (``If-None-Match: *`` on PutObject and
  CompleteMultipartUpload), on ``memory://`` a check and create under a process-wide lock;
* "rename" composes the source into one new object with an exclusive create, then deletes
  the source; a composed object records which object versions it was made from, so a retry
  after a crash between the two steps is recognised.

Request counts below are S3 requests; a LIST returns up to 1,000 objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import threading
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, BinaryIO, cast

from commit_protocol.errors import OptionError, RotsinkError
from commit_protocol.segments import (MAX_PARTS, MIN_PART_BYTES, SEGMENT_BYTES, Blob, Part,
                                      Piece, SegmentError, SegmentWriter, group_files,
                                      plan_parts, segment_path, segment_pieces, segments_of,
                                      slice_pieces, source_digest)
from commit_protocol.storage import FileInfo

SUPPORTED_PROTOCOLS = ("s3", "s3a", "memory")
_TOKEN = "rotsink-token"  # S3 user metadata: which create made the object
_SOURCE = "rotsink-source"  # S3 user metadata: source_digest() of a composed object's bytes
_INT_OPTIONS = frozenset({"max_concurrency", "default_block_size", "retries"})
_MEMORY_LOCK = threading.RLock()


class UnsafeStorageError(RotsinkError):
    """The URL's filesystem offers no exclusive create rotsink can use, so a commit could
    replace another writer's file; the message names the URL."""


def open_object_storage(url: str, fs_options: dict[str, str]) -> ObjectStorage:
    """Storage for an ``s3://``, ``s3a://`` or ``memory://`` URL (runs on driver and executors).

    ``fs_options`` are Spark's ``fs.*`` options without the prefix, passed to
    ``fsspec.core.url_to_fs``: ``"true"``/``"false"`` become booleans, a few integer options
    integers, and ``client_kwargs.region_name=...`` a nested dict. For s3fs,
    ``endpoint_url`` is a keyword of ``S3FileSystem`` itself.
    """
    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    if protocol not in SUPPORTED_PROTOCOLS:
        raise UnsafeStorageError(
            f"cannot write to {url}: rotsink commits exactly once only where it can create an "
            f"object exclusively (fail if it exists); it does so on s3://, s3a:// (S3 "
            f"conditional writes) and memory://, not yet on {protocol}://, where a publish "
            "or a log write could silently replace another writer's file")
    import fsspec.core

    fs, root = fsspec.core.url_to_fs(url, **parse_fs_options(fs_options))
    return ObjectStorage(fs, root, url)


def parse_fs_options(options: dict[str, str]) -> dict[str, Any]:
    """Spark's string options as fsspec keywords.

    >>> parse_fs_options({"anon": "False", "retries": "3", "client_kwargs.region_name": "eu"})
    {'anon': False, 'retries': 3, 'client_kwargs': {'region_name': 'eu'}}
    """
    out: dict[str, Any] = {}
    for key, raw in options.items():
        value: Any = {"true": True, "false": False}.get(raw.strip().lower(), raw)
        if key in _INT_OPTIONS and isinstance(value, str):
            if not value.strip().isdigit():
                raise OptionError(f"fs.{key}: expected an integer, found {raw!r}")
            value = int(value)
        head, dot, tail = key.partition(".")
        if dot:
            out.setdefault(head, {})[tail] = value
        else:
            out[key] = value
    return out


class ObjectStorage:
    """A directory tree on an object store (see the module docstring for the mechanisms).

    ``fs`` is an fsspec filesystem (``S3FileSystem`` or ``MemoryFileSystem``), ``root`` the
    output path in its terms (``bucket/prefix``), ``root_uri`` the URL readers and the log
    use. ``segment_bytes`` is where a writer cuts a segment (tests make it small).
    """

    def __init__(self, fs: Any, root: str, root_uri: str, *,
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        if "s3" in protocols:
            self._objects: _S3Objects | _MemoryObjects = _S3Objects(fs)
        elif "memory" in protocols:
            self._objects = _MemoryObjects(fs)
        else:
            raise UnsafeStorageError(f"cannot write to {root_uri}: {type(fs).__name__} has no "
                                     "exclusive create that rotsink uses (s3 and memory only)")
        self.fs = fs
        self.root = root.rstrip("/")
        self.root_uri = root_uri.rstrip("/")
        self.segment_bytes = segment_bytes

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def _segments(self, path: str) -> list[tuple[int, Blob]]:
        abs_path = self._abs(path)
        return segments_of(abs_path, self._objects.list(abs_path + "/"))

    def _pieces(self, path: str) -> list[Piece]:
        """The file's bytes as object ranges: 1 LIST, plus 1 HEAD when it is a plain object."""
        pieces = segment_pieces(path, self._segments(path))
        if pieces:
            return pieces
        blob, _ = self._objects.head(self._abs(path))
        return [Piece(blob, 0, blob.size)]

    def size(self, path: str) -> int:
        """Length in bytes (1 LIST; +1 HEAD for a plain object); ``SegmentError`` when the
        segments are not contiguous."""
        return sum(p.length for p in self._pieces(path))

    def mtime_ms(self, path: str) -> int:
        """Last modification: the plain object's, or the newest segment's."""
        return max(p.blob.mtime_ms for p in self._pieces(path))

    def exists(self, path: str) -> bool:
        """Whether ``path`` is a plain object or a segmented file (1 LIST, +1 HEAD)."""
        try:
            self._pieces(path)
        except FileNotFoundError:
            return False
        return True

    def read(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)``: ranged GETs of the segments (or object) that hold them."""
        pieces = self._pieces(path)
        stop = sum(p.length for p in pieces) if end is None else end
        return self._objects.read(slice_pieces(pieces, start, stop))

    def open_read(self, path: str) -> BinaryIO:
        """The whole file in memory (log and intent files are small)."""
        return io.BytesIO(self.read(path))

    def open_append(self, path: str) -> BinaryIO:
        """A :class:`SegmentWriter` at the current end (1 LIST, +1 HEAD for a new file).

        Atomic per segment: each is one exclusive create, so of two writers that start at the
        same offset the second fails with ``FileExistsError`` and adds nothing. Nothing is
        written until ``segment_bytes`` are buffered or the writer closes; an empty writer
        writes nothing (so, unlike on a local disk, no empty file appears).
        """
        segments = self._segments(path)
        pieces = segment_pieces(path, segments)
        if segments and not pieces:
            raise SegmentError(f"{path} holds segments from offset {segments[0][0]} but none "
                               "at offset 0: the remains of a delete, not appendable")
        if not segments and self._plain_exists(path):
            raise FileExistsError(errno.EEXIST, "a finished (plain) object cannot be "
                                  "appended to", path)
        abs_path = self._abs(path)

        def put(offset: int, data: bytes) -> None:
            self._objects.put(segment_path(abs_path, offset), data)

        start = sum(p.length for p in pieces)
        return cast(BinaryIO, SegmentWriter(put, start=start, threshold=self.segment_bytes))

    def write_exclusive(self, path: str, chunks: Iterable[bytes]) -> None:
        """Create plain object ``path`` with this content, never replacing (1 PUT).

        Atomic: a single conditional PUT, so readers see nothing or everything, and an
        existing object makes it fail with ``FileExistsError``. The content is joined in memory.
        """
        self._objects.put(self._abs(path), b"".join(chunks))

    def create_marker(self, path: str) -> bool:
        """Create an empty object; True if this call created it (1 conditional PUT).

        Atomic: of several concurrent callers exactly one gets True.
        """
        try:
            self._objects.put(self._abs(path), b"")
        except FileExistsError:
            return False
        return True

    def link(self, src: str, dst: str) -> None:
        """Give new plain object ``dst`` the content of ``src`` (which stays), never replacing.

        Atomic: ``dst`` appears whole in its final step, a conditional PUT (small files) or a
        conditional CompleteMultipartUpload whose parts are server-side copies of large
        segments and joined downloads of small ones; ``FileExistsError`` if ``dst`` exists.
        Requests: listing ``src`` plus 1 PUT, or 2 + one per part.
        """
        self._objects.compose(self._abs(dst), self._pieces(src))

    def publish(self, src: str, dst: str) -> None:
        """"Rename" ``src`` to ``dst`` without ever replacing ``dst``: :meth:`link`, then
        :meth:`delete` of ``src``.

        Atomic with respect to ``dst`` as :meth:`link`. Retry-safe: when ``dst`` exists and
        records that it was composed from exactly ``src``'s current objects (an earlier
        attempt stopped before deleting ``src``), the delete is finished and
        ``FileExistsError`` raised; the committer then finds ``dst`` complete and ``src``
        gone. A foreign ``dst`` leaves ``src`` untouched.
        """
        pieces = self._pieces(src)
        try:
            self._objects.compose(self._abs(dst), pieces)
        except FileExistsError:
            if self._objects.made_from(self._abs(dst), pieces):
                self.delete(src)
            raise
        self.delete(src)

    def copy_prefix(self, src: str, dst: str, length: int) -> None:
        """Create appendable ``dst`` (must not exist) holding the first ``length`` bytes of
        ``src``; ``EOFError`` when ``src`` is shorter.

        Atomic: the prefix is composed (as in :meth:`link`) into the single segment at
        offset 0 of ``dst``, so a crash leaves either no ``dst`` or all of it, and appends
        continue after it. With ``length`` 0 nothing is created (an empty appendable file
        has no objects).
        """
        pieces = self._pieces(src)
        have = sum(p.length for p in pieces)
        if have < length:
            raise EOFError(f"{src} has fewer than {length} bytes ({have})")
        if self._segments(dst) or self._plain_exists(dst):
            raise FileExistsError(errno.EEXIST, "copy target exists", dst)
        if length:
            self._objects.compose(segment_path(self._abs(dst), 0),
                                  slice_pieces(pieces, 0, length))

    def list(self, directory: str) -> list[FileInfo]:
        """Files directly in ``directory``, a segmented file as one entry (one LIST per
        1,000 objects below ``directory``, subdirectories included)."""
        return list(self._files(directory, recursive=False))

    def walk(self, directory: str = "") -> Iterator[FileInfo]:
        """Every file below ``directory``, recursively."""
        return self._files(directory, recursive=True)

    def _files(self, directory: str, *, recursive: bool) -> Iterator[FileInfo]:
        prefix = self._abs(directory) + "/"
        base = f"{directory.rstrip('/')}/" if directory else ""
        files = group_files(prefix, self._objects.list(prefix), recursive=recursive)
        return (FileInfo(base + rel, size, mtime) for rel, (size, mtime) in files.items())

    def delete(self, path: str) -> None:
        """Remove a plain object or a segmented file; a missing file is not an error.

        1 LIST and 1 DeleteObjects, +1 for a segmented file: its first segment goes first,
        so a delete cut short leaves no file (only remains that cleanup lists and removes).
        """
        segments = [blob.path for _, blob in self._segments(path)]
        if len(segments) > 1:
            self._objects.delete(segments[:1])
            segments = segments[1:]
        self._objects.delete(segments + [self._abs(path)])

    def delete_tree(self, path: str) -> None:
        """Remove every object below ``path``."""
        prefix = self._abs(path) + "/"
        self._objects.delete([b.path for b in self._objects.list(prefix)])

    def abort_stale_uploads(self, older_than_ms: int) -> list[str]:
        """Abort multipart uploads under the root initiated before ``older_than_ms`` (epoch
        ms): the remains of a compose whose process died. Returns their paths."""
        aborted = self._objects.abort_uploads(self.root + "/", older_than_ms)
        return [p[len(self.root) + 1:] for p in aborted]

    def _plain_exists(self, path: str) -> bool:
        try:
            self._objects.head(self._abs(path))
        except FileNotFoundError:
            return False
        return True


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key


def _already_exists(error: BaseException) -> bool:
    """Whether an error of a conditional create means the object exists (or is being created
    concurrently): 412 PreconditionFailed, 409 ConditionalRequestConflict, or the EINVAL that
    s3fs makes of a 412 without a Condition. Other EINVALs (EntityTooSmall, InvalidPart) are
    real errors, not "exists"."""
    if isinstance(error, FileExistsError):
        return True
    response = getattr(error.__cause__, "response", None) or {}
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
        return True
    return getattr(error, "errno", None) == errno.EINVAL and "pre-condition" in str(error)


async def _bounded(coroutines: list[Any], limit: int) -> list[Any]:
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


class _S3Objects:
    """S3 through the botocore client s3fs holds (``_call_s3``: s3fs's retries and error
    translation; no listing cache)."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def _run(self, coroutine_function: Any, *args: Any) -> Any:
        from fsspec.asyn import sync

        return sync(self.fs.loop, coroutine_function, *args)

    async def _list(self, prefix: str) -> list[Blob]:
        bucket, key = _split(prefix)
        blobs: list[Blob] = []
        page: dict[str, str] = {}
        while True:
            out = await self.fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=key, **page)
            blobs += [Blob(f"{bucket}/{o['Key']}", o["Size"], _ms(o["LastModified"]),
                           o.get("ETag", "")) for o in out.get("Contents", [])]
            if not out.get("IsTruncated"):
                return blobs
            page = {"ContinuationToken": out["NextContinuationToken"]}

    def list(self, prefix: str) -> list[Blob]:
        return self._run(self._list, prefix)

    def head(self, path: str) -> tuple[Blob, dict[str, str]]:
        bucket, key = _split(path)
        out = self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        blob = Blob(path, out["ContentLength"], _ms(out["LastModified"]), out.get("ETag", ""))
        return blob, out.get("Metadata", {})

    async def _get(self, piece: Piece) -> bytes:
        bucket, key = _split(piece.blob.path)
        last = piece.start + piece.length - 1
        resp = await self.fs._call_s3("get_object", Bucket=bucket, Key=key,
                                      Range=f"bytes={piece.start}-{last}")
        try:
            data = await resp["Body"].read()
        finally:
            resp["Body"].close()
        if len(data) != piece.length:
            raise SegmentError(f"{piece.blob.path}: expected {piece.length} bytes from offset "
                               f"{piece.start}, found {len(data)}")
        return data

    async def _read(self, pieces: list[Piece]) -> bytes:
        gets = [self._get(p) for p in pieces if p.length]
        return b"".join(await _bounded(gets, self.fs.max_concurrency))

    def read(self, pieces: list[Piece]) -> bytes:
        return self._run(self._read, pieces)

    def put(self, path: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Conditional PUT (``IfNoneMatch="*"``)."""
        bucket, key = _split(path)
        token = uuid.uuid4().hex
        try:
            self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*",
                            Metadata={_TOKEN: token, **(metadata or {})})
        except OSError as e:
            self._settle(e, path, token)

    def _settle(self, error: OSError, path: str, token: str) -> None:
        """Re-raise ``error`` as ``FileExistsError`` when the object exists, unless this very
        create made it (a retried request whose first attempt succeeded gets a 412)."""
        if not _already_exists(error):
            raise error
        with contextlib.suppress(FileNotFoundError):  # 409: the other create may still run
            if self.head(path)[1].get(_TOKEN) == token:
                return
        raise FileExistsError(errno.EEXIST, "object exists", path) from error

    def compose(self, dst: str, pieces: list[Piece]) -> None:
        """One new object from ``pieces``, exclusively (see :meth:`ObjectStorage.link`)."""
        metadata = {_SOURCE: source_digest(pieces)}
        if sum(p.length for p in pieces) < MIN_PART_BYTES:  # GETs and one PUT
            self.put(dst, self.read(pieces), metadata)
            return
        parts = plan_parts(pieces)
        if len(parts) > MAX_PARTS:
            raise OSError(errno.EFBIG, f"{len(parts)} parts exceed S3's {MAX_PARTS}", dst)
        token = uuid.uuid4().hex
        try:
            self._run(self._multipart, dst, parts, {_TOKEN: token, **metadata})
        except OSError as e:
            self._settle(e, dst, token)

    async def _multipart(self, dst: str, parts: list[Part], metadata: dict[str, str]) -> None:
        bucket, key = _split(dst)
        created = await self.fs._call_s3("create_multipart_upload", Bucket=bucket, Key=key,
                                         Metadata=metadata)
        upload = {"Bucket": bucket, "Key": key, "UploadId": created["UploadId"]}
        try:  # at most max_concurrency parts at once: a downloaded part holds 5 MiB
            etags = await _bounded([self._part(upload, n, p) for n, p in enumerate(parts, 1)],
                                   self.fs.max_concurrency)
            done = [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, 1)]
            await self.fs._call_s3("complete_multipart_upload", **upload, IfNoneMatch="*",
                                   MultipartUpload={"Parts": done})
        except BaseException:
            with contextlib.suppress(Exception):  # a failed abort leaves a stale upload that
                await self.fs._call_s3("abort_multipart_upload", **upload)  # cleanup aborts
            raise

    async def _part(self, upload: dict[str, str], number: int, part: Part) -> str:
        if part.copy:
            piece = part.pieces[0]
            bucket, key = _split(piece.blob.path)
            out = await self.fs._call_s3(
                "upload_part_copy", **upload, PartNumber=number,
                CopySource={"Bucket": bucket, "Key": key},
                CopySourceRange=f"bytes={piece.start}-{piece.start + piece.length - 1}")
            return out["CopyPartResult"]["ETag"]
        body = await self._read(list(part.pieces))
        return (await self.fs._call_s3("upload_part", **upload, PartNumber=number,
                                       Body=body))["ETag"]

    def made_from(self, dst: str, pieces: list[Piece]) -> bool:
        """Whether ``dst`` records that it was composed from exactly ``pieces``."""
        try:
            return self.head(dst)[1].get(_SOURCE) == source_digest(pieces)
        except FileNotFoundError:
            return False

    def delete(self, paths: list[str]) -> None:
        for start in range(0, len(paths), 1000):
            bucket = _split(paths[start])[0]
            keys = [{"Key": _split(p)[1]} for p in paths[start:start + 1000]]
            out = self.fs.call_s3("delete_objects", Bucket=bucket,
                                  Delete={"Objects": keys, "Quiet": True})
            if out.get("Errors"):
                raise OSError(errno.EIO, f"delete failed: {out['Errors'][:3]}", paths[start])

    def abort_uploads(self, prefix: str, before_ms: int) -> list[str]:
        bucket, key = _split(prefix)
        aborted: list[str] = []
        page: dict[str, str] = {}
        while True:
            out = self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key, **page)
            for upload in out.get("Uploads", []):
                if _ms(upload["Initiated"]) < before_ms:
                    with contextlib.suppress(FileNotFoundError):  # completed or aborted meanwhile
                        self.fs.call_s3("abort_multipart_upload", Bucket=bucket,
                                        Key=upload["Key"], UploadId=upload["UploadId"])
                    aborted.append(f"{bucket}/{upload['Key']}")
            if not out.get("IsTruncated"):
                return aborted
            page = {"KeyMarker": out["NextKeyMarker"], "UploadIdMarker": out["NextUploadIdMarker"]}


class _MemoryObjects:
    """fsspec's ``memory://``: one process, so check-then-create under one process-wide lock
    is an exclusive create. For tests and single-process use."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def list(self, prefix: str) -> list[Blob]:
        with _MEMORY_LOCK:
            return [Blob(p, f.size, _ms(f.created)) for p, f in list(self.fs.store.items())
                    if p.startswith(prefix)]

    def head(self, path: str) -> tuple[Blob, dict[str, str]]:
        with _MEMORY_LOCK:
            f = self.fs.store.get(path)
            if f is None:
                raise FileNotFoundError(errno.ENOENT, "no such object", path)
            return Blob(path, f.size, _ms(f.created)), {}

    def read(self, pieces: list[Piece]) -> bytes:
        return b"".join(self.fs.cat_file(p.blob.path, p.start, p.start + p.length)
                        for p in pieces if p.length)

    def put(self, path: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        with _MEMORY_LOCK:
            if path in self.fs.store:
                raise FileExistsError(errno.EEXIST, "object exists", path)
            self.fs.pipe_file(path, data)

    def compose(self, dst: str, pieces: list[Piece]) -> None:
        with _MEMORY_LOCK:
            self.put(dst, self.read(pieces))

    def made_from(self, dst: str, pieces: list[Piece]) -> bool:
        """Whether ``dst`` holds exactly these bytes (memory is cheap to compare)."""
        with _MEMORY_LOCK:
            f = self.fs.store.get(dst)
            return f is not None and bytes(f.getbuffer()) == self.read(pieces)

    def delete(self, paths: list[str]) -> None:
        with _MEMORY_LOCK:
            for p in paths:
                self.fs.store.pop(p, None)

    def abort_uploads(self, prefix: str, before_ms: int) -> list[str]:
        return []  # memory has no multipart uploads
