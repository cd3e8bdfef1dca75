"""Azure Blob Storage and ADLS Gen2 under
:class:`~commit_protocol.storage.object_store.ObjectStorage` (``abfs[s]://``, ``az://``,
``wasb[s]://``), through the Blob API on the async ``BlobServiceClient`` adlfs holds (its
credentials: account key, SAS, service principal, managed identity; its retries). The Blob API
serves flat accounts and accounts with a hierarchical namespace (ADLS Gen2: Databricks,
Fabric's OneLake, Synapse) alike; each operation here is one the service documents for both.

* exclusive create: Put Blob (Put Block List for large data) with ``If-None-Match: *``; a 409
  means the blob exists, unless it carries this create's token (a retry whose first attempt
  succeeded);
* exclusive compose: Put Block From URL for each piece (a byte range of a source blob, read by
  the service itself, authorised by a short SAS the account key signs, by the SAS the client
  holds, or by the client's OAuth token), then Put Block List with ``If-None-Match: *``. Staged
  blocks are invisible until that commit and the service discards uncommitted ones after a
  week, so a process that dies mid-compose leaves nothing to clean. The blob records the
  digest of its sources (ETags, ranges), so a retry recognises it;
* a hierarchical namespace lists directories as blobs (metadata ``hdi_isfolder``): they are
  no files here, and a deleted segmented file's directory is deleted after its segments.

Paths are ``container/name``. Metadata names are C# identifiers, hence the underscores.
"""

from __future__ import annotations

import base64
import builtins
import errno
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from commit_protocol.storage.objects import bounded, epoch_ms, split_path
from commit_protocol.storage.preconditions import PreconditionObjects
from commit_protocol.storage.segments import Blob, Piece

_FOLDER = "hdi_isfolder"  # metadata of a directory of a hierarchical namespace
_DIRECTORY_KEPT = frozenset({"DirectoryIsNotEmpty", "OperationNotSupportedOnDirectory"})
BLOCK_BYTES = 100 << 20  # a staged block's largest size (the service takes up to 4,000 MiB)
_SAS_LIFETIME = timedelta(hours=1)  # a compose's source SAS: longer than any compose takes
_STORAGE_SCOPE = "https://storage.azure.com/.default"  # OAuth scope of Azure Storage
T = TypeVar("T")


async def _translated(path: str, request: Awaitable[T]) -> T:
    """``request``'s result, the service's errors as the protocol's: a missing blob or
    container is ``FileNotFoundError``, an existing blob or a failed precondition
    ``FileExistsError``."""
    from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError

    try:
        return await request
    except ResourceNotFoundError as e:
        code = getattr(e, "error_code", None)  # set by the storage SDK, not azure-core
        what = "no such container" if code == "ContainerNotFound" else "no such blob"
        raise FileNotFoundError(errno.ENOENT, what, path) from e
    except ResourceExistsError as e:
        raise FileExistsError(errno.EEXIST, "blob exists", path) from e
    except HttpResponseError as e:
        if e.status_code == 412:
            raise FileExistsError(errno.EEXIST, "blob exists", path) from e
        raise


def _blob(container: str, name: str, properties: Any) -> Blob:
    return Blob(f"{container}/{name}", int(properties.size),
                epoch_ms(properties.last_modified), str(properties.etag).strip('"'))


def _is_folder(metadata: dict[str, str] | None) -> bool:
    return (metadata or {}).get(_FOLDER, "").lower() == "true"


class AzureObjects(PreconditionObjects):
    """Azure Blob Storage through the async ``BlobServiceClient`` of an adlfs
    ``AzureBlobFileSystem`` (``fs.service_client``)."""

    # metadata names are C# identifiers on Azure: no dashes
    TOKEN = "rotsink_token"
    SOURCE = "rotsink_source"

    @property
    def _timeouts(self) -> dict[str, Any]:
        """The ``fs.*`` timeouts adlfs keeps for its own transfers (``timeout``, on the
        service; ``connection_timeout`` and ``read_timeout``, on the client): given to each
        request here too, which adlfs's service client does not do by itself (its
        defaults, 20 s to connect and 60 s to read, otherwise)."""
        return dict(getattr(self.fs, "_timeout_kwargs", {}))

    def _blob_client(self, path: str) -> Any:
        container, name = split_path(path)
        return self.fs.service_client.get_blob_client(container, name)

    async def _credential_checked(self) -> None:
        """A token credential (Azure's default chain: environment, workload and managed
        identity, the CLIs) asked once for a token before the first listing, the one a query
        makes as it starts: none found is then an error at once. Through the storage SDK's
        request it is retried with the SDK's backoff (15 s and more), about 85 s in all, as
        if the service had failed. The credential keeps the token for the requests after."""
        credential = self.fs.service_client.credential
        if hasattr(credential, "get_token") and not getattr(self, "_token_checked", False):
            await credential.get_token(_STORAGE_SCOPE)
            self._token_checked = True

    async def _list(self, prefix: str) -> builtins.list[Blob]:
        await self._credential_checked()
        container, key = split_path(prefix)
        client = self.fs.service_client.get_container_client(container)

        async def listed() -> builtins.list[Blob]:
            return [_blob(container, item.name, item)
                    async for item in client.list_blobs(name_starts_with=key,
                                                        include=["metadata"],
                                                        **self._timeouts)
                    if not _is_folder(item.metadata)]

        return await _translated(prefix, listed())

    def list(self, prefix: str) -> builtins.list[Blob]:
        return self._run(self._list, prefix)

    async def _head(self, path: str) -> tuple[Blob, dict[str, str]]:
        container, name = split_path(path)
        properties = await _translated(path, self._blob_client(path).get_blob_properties(
            **self._timeouts))
        if _is_folder(properties.metadata):
            raise FileNotFoundError(errno.ENOENT, "a directory, no blob", path)
        return _blob(container, name, properties), dict(properties.metadata or {})

    def head(self, path: str) -> tuple[Blob, dict[str, str]]:
        return self._run(self._head, path)

    async def _download(self, path: str, start: int | None = None,
                        length: int | None = None) -> bytes:
        async def download() -> bytes:
            stream = await self._blob_client(path).download_blob(offset=start, length=length,
                                                               **self._timeouts)
            return bytes(await stream.readall())

        return await _translated(path, download())

    # -- exclusive creates -----------------------------------------------------------------
    async def _upload(self, path: str, data: bytes, metadata: dict[str, str]) -> None:
        # overwrite=False is If-None-Match: * on Put Blob, and on the Put Block List of an
        # upload too large for one request
        await _translated(path, self._blob_client(path).upload_blob(
            data, overwrite=False, metadata=metadata, **self._timeouts))

    async def _compose_large(self, dst: str, pieces: builtins.list[Piece],
                             metadata: dict[str, str], token: str) -> None:
        from azure.core import MatchConditions

        blocks = [(piece.blob.path, start, min(BLOCK_BYTES, piece.start + piece.length - start))
                  for piece in pieces if piece.length
                  for start in range(piece.start, piece.start + piece.length, BLOCK_BYTES)]
        # every block id of a blob has one length: this compose's token and the block's number
        ids = [base64.b64encode(f"{token}{n:08d}".encode()).decode()
               for n in range(len(blocks))]
        client = self._blob_client(dst)
        source = await self._source_access()
        await bounded([self._stage(client, dst, block_id, block, source)
                       for block_id, block in zip(ids, blocks, strict=True)],
                      self._concurrency())
        await _translated(dst, client.commit_block_list(
            ids, metadata=metadata, match_condition=MatchConditions.IfMissing,
            **self._timeouts))

    async def _stage(self, client: Any, dst: str, block_id: str,
                     block: tuple[str, int, int],
                     source: Callable[[str], tuple[str, dict[str, str]]]) -> None:
        """Put Block From URL: the service copies ``block`` (path, offset, length) itself."""
        path, offset, length = block
        url, authorization = source(path)
        await _translated(path, client.stage_block_from_url(
            block_id, url, source_offset=offset, source_length=length, **authorization,
            **self._timeouts))

    async def _source_access(self) -> Callable[[str], tuple[str, dict[str, str]]]:
        """How the service may read a compose's sources: a function from a source path to its
        URL and the keywords of Put Block From URL that authorise the read.

        An account key signs a read SAS for each source; a client with an OAuth credential
        (service principal, managed identity) passes its token (``x-ms-source-authorization``,
        API 2020-10-02 on); a client on a SAS has it in its URLs already.
        """
        service = self.fs.service_client
        credential = service.credential
        if getattr(credential, "account_key", None):
            from azure.storage.blob import BlobSasPermissions, generate_blob_sas

            expiry = datetime.now(timezone.utc) + _SAS_LIFETIME

            def signed(path: str) -> tuple[str, dict[str, str]]:
                container, name = split_path(path)
                sas = generate_blob_sas(service.account_name, container, name,
                                        account_key=credential.account_key,
                                        permission=BlobSasPermissions(read=True), expiry=expiry)
                return f"{self._blob_client(path).url}?{sas}", {}

            return signed
        if hasattr(credential, "get_token"):
            token = (await credential.get_token(_STORAGE_SCOPE)).token
            bearer = {"source_authorization": f"Bearer {token}"}
            return lambda path: (self._blob_client(path).url, bearer)
        return lambda path: (self._blob_client(path).url, {})

    # -- deletes -------------------------------------------------------------------------
    async def _delete(self, path: str) -> None:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        try:
            await self._blob_client(path).delete_blob(**self._timeouts)
        except ResourceNotFoundError:
            pass  # already gone
        except HttpResponseError as e:
            # a hierarchical namespace's directory: kept while it holds files (409), or not
            # deletable through the Blob API on some accounts (400); an empty one is no file
            if getattr(e, "error_code", None) not in _DIRECTORY_KEPT:
                raise

    async def _delete_all(self, paths: builtins.list[str]) -> None:
        # deepest first: on a hierarchical namespace a directory goes only once it is empty
        # (a segmented file's directory after its segments)
        for depth in sorted({p.count("/") for p in paths}, reverse=True):
            await bounded([self._delete(p) for p in paths if p.count("/") == depth],
                          self._concurrency())

    def delete(self, paths: builtins.list[str]) -> None:
        self._run(self._delete_all, paths)

    def abort_uploads(self, prefix: str, before_ms: int,
                      owned: Callable[[str], bool]) -> builtins.list[str]:
        """Nothing to abort: a compose's staged blocks are invisible, and the service discards
        uncommitted blocks after a week."""
        return []
