"""S3 under :class:`~commit_protocol.storage.object_store.ObjectStorage`, through the botocore
client s3fs holds (``s3://``, ``s3a://``): the operations of
:class:`~commit_protocol.storage.objects.Objects`, each with S3's own primitive.

* exclusive create: PutObject with ``If-None-Match: *``; a 412 (or SeaweedFS's ``EINVAL``, a
  409 ConditionalRequestConflict) means the object exists, unless it carries this create's
  token (a retry whose first attempt succeeded);
* exclusive compose: a multipart upload of ``UploadPartCopy`` ranges (or of the bytes, for
  pieces under the 5 MiB part minimum) completed with ``If-None-Match: *``; the object
  records the digest of its sources, so a retry recognises it;
* stale uploads: ``ListMultipartUploads`` and ``AbortMultipartUpload``.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import uuid
from collections.abc import Callable

from commit_protocol.storage.objects import AsyncObjects, bounded, epoch_ms, split_path
from commit_protocol.storage.segments import (
    MAX_PARTS,
    MIN_PART_BYTES,
    Blob,
    Part,
    Piece,
    plan_parts,
    source_digest,
)
from commit_protocol.vocabulary.errors import SegmentError

_TOKEN = "rotsink-token"  # S3 user metadata: which create made the object
_SOURCE = "rotsink-source"  # S3 user metadata: source_digest() of a composed object's bytes


def already_exists(error: BaseException) -> bool:
    """Whether an error of a conditional create means the object exists (or is being created
    concurrently).

    s3fs makes a ``FileExistsError`` of a 412 only when the error names the ``If-None-Match``
    condition, as AWS's does; SeaweedFS's names none and arrives as ``OSError(EINVAL)``, the
    errno s3fs also gives EntityTooSmall, InvalidPart or InvalidArgument, which are real
    errors. So the answer rests on the botocore error s3fs keeps as the cause, never on the
    errno or the message: code PreconditionFailed or HTTP status 412, or a 409
    ConditionalRequestConflict (another conditional write to the key is in flight).
    """
    if isinstance(error, FileExistsError):
        return True
    response = getattr(error.__cause__, "response", None) or {}
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412


class S3Objects(AsyncObjects):
    """S3 through the botocore client s3fs holds (``_call_s3``: s3fs's retries and error
    translation; no listing cache)."""

    async def _list(self, prefix: str) -> builtins.list[Blob]:
        bucket, key = split_path(prefix)
        blobs: builtins.list[Blob] = []
        page: dict[str, str] = {}
        while True:
            out = await self.fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=key, **page)
            blobs += [Blob(f"{bucket}/{o['Key']}", o["Size"], epoch_ms(o["LastModified"]),
                           o.get("ETag", "")) for o in out.get("Contents", [])]
            if not out.get("IsTruncated"):
                return blobs
            page = {"ContinuationToken": out["NextContinuationToken"]}

    def list(self, prefix: str) -> builtins.list[Blob]:
        return self._run(self._list, prefix)

    def head(self, path: str) -> tuple[Blob, dict[str, str]]:
        bucket, key = split_path(path)
        out = self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        blob = Blob(path, out["ContentLength"], epoch_ms(out["LastModified"]), out.get("ETag", ""))
        return blob, out.get("Metadata", {})

    def get(self, path: str) -> bytes:
        """The whole object (1 GET); ``FileNotFoundError`` when there is none."""
        bucket, key = split_path(path)

        async def whole() -> bytes:
            resp = await self.fs._call_s3("get_object", Bucket=bucket, Key=key)
            try:
                return await resp["Body"].read()
            finally:
                resp["Body"].close()

        return self._run(whole)

    async def _get(self, piece: Piece) -> bytes:
        bucket, key = split_path(piece.blob.path)
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

    async def _read(self, pieces: builtins.list[Piece]) -> bytes:
        gets = [self._get(p) for p in pieces if p.length]
        return b"".join(await bounded(gets, self.fs.max_concurrency))

    def read(self, pieces: builtins.list[Piece]) -> bytes:
        return self._run(self._read, pieces)

    def put(self, path: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Conditional PUT (``IfNoneMatch="*"``)."""
        bucket, key = split_path(path)
        token = uuid.uuid4().hex
        try:
            self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*",
                            Metadata={_TOKEN: token, **(metadata or {})})
        except OSError as e:
            self._settle(e, path, token)

    def _settle(self, error: OSError, path: str, token: str) -> None:
        """Re-raise ``error`` as ``FileExistsError`` when the object exists, unless this very
        create made it (a retried request whose first attempt succeeded gets a 412)."""
        if not already_exists(error):
            raise error
        with contextlib.suppress(FileNotFoundError):  # 409: the other create may still run
            if self.head(path)[1].get(_TOKEN) == token:
                return
        raise FileExistsError(errno.EEXIST, "object exists", path) from error

    def compose(self, dst: str, pieces: builtins.list[Piece]) -> None:
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

    async def _multipart(self, dst: str, parts: builtins.list[Part],
                         metadata: dict[str, str]) -> None:
        bucket, key = split_path(dst)
        created = await self.fs._call_s3("create_multipart_upload", Bucket=bucket, Key=key,
                                         Metadata=metadata)
        upload = {"Bucket": bucket, "Key": key, "UploadId": created["UploadId"]}
        try:  # at most max_concurrency parts at once: a downloaded part holds 5 MiB
            etags = await bounded([self._part(upload, n, p) for n, p in enumerate(parts, 1)],
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
            bucket, key = split_path(piece.blob.path)
            out = await self.fs._call_s3(
                "upload_part_copy", **upload, PartNumber=number,
                CopySource={"Bucket": bucket, "Key": key},
                CopySourceRange=f"bytes={piece.start}-{piece.start + piece.length - 1}")
            return out["CopyPartResult"]["ETag"]
        body = await self._read(list(part.pieces))
        return (await self.fs._call_s3("upload_part", **upload, PartNumber=number,
                                       Body=body))["ETag"]

    def made_from(self, dst: str, pieces: builtins.list[Piece]) -> bool:
        """Whether ``dst`` records that it was composed from exactly ``pieces``."""
        try:
            return self.head(dst)[1].get(_SOURCE) == source_digest(pieces)
        except FileNotFoundError:
            return False

    def delete(self, paths: builtins.list[str]) -> None:
        for start in range(0, len(paths), 1000):
            bucket = split_path(paths[start])[0]
            keys = [{"Key": split_path(p)[1]} for p in paths[start:start + 1000]]
            out = self.fs.call_s3("delete_objects", Bucket=bucket,
                                  Delete={"Objects": keys, "Quiet": True})
            if out.get("Errors"):
                raise OSError(errno.EIO, f"delete failed: {out['Errors'][:3]}", paths[start])

    def abort_uploads(self, prefix: str, before_ms: int,
                      owned: Callable[[str], bool]) -> builtins.list[str]:
        bucket, key = split_path(prefix)
        aborted: builtins.list[str] = []
        page: dict[str, str] = {}
        while True:
            out = self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key, **page)
            for upload in out.get("Uploads", []):
                if epoch_ms(upload["Initiated"]) < before_ms and \
                        owned(upload["Key"][len(key):]):
                    with contextlib.suppress(FileNotFoundError):  # completed or aborted meanwhile
                        self.fs.call_s3("abort_multipart_upload", Bucket=bucket,
                                        Key=upload["Key"], UploadId=upload["UploadId"])
                    aborted.append(f"{bucket}/{upload['Key']}")
            if not out.get("IsTruncated"):
                return aborted
            page = {"KeyMarker": out["NextKeyMarker"], "UploadIdMarker": out["NextUploadIdMarker"]}
