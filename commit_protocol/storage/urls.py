"""An object store's URL: the stores rotsink writes to, the URL's shape checked before
anything is written, and the store opened (:func:`open_object_storage`).

fsspec's clients take more than Spark's readers do: adlfs reads ``abfss://lake@/out`` (no
account) as the container ``lake`` of whatever account the options name, so a query wrote
hundreds of blobs under a root no Spark reader can open (the log names every file by that
URL); and it takes a Hadoop URL without its container (``wasb://acct.blob.core.windows.net/out``)
as a container named after the host, which Azure then refuses as "invalid characters",
naming neither the URL nor what is missing. The output's URL is written into every log entry,
so it must be one that Spark's own readers (hadoop-aws, gcs-connector, hadoop-azure) open.
"""

from __future__ import annotations

import re

from commit_protocol.storage.object_store import ObjectStorage
from commit_protocol.storage.objects import CLIENTS, FSSPEC_SCHEMES, parse_fs_options
from commit_protocol.vocabulary.errors import OptionError, UnsafeStorageError

# Azure's rules for names (learn.microsoft.com, "Naming and referencing containers"): a
# container 3-63 lowercase letters, digits and single hyphens ($root: the account's root
# container), an account 3-24 lowercase letters and digits
_CONTAINER = re.compile(r"^(\$root|[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9])$")
_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
# Hadoop's schemes name container and account in the URL (the log names every file by
# it); adlfs's az:// the container only, the account coming from fs.account_name or a
# connection string
_HADOOP_AZURE = ("wasb", "wasbs", "abfs", "abfss")
_AZURE = (*_HADOOP_AZURE, "az")
_BUCKET_SCHEMES = ("s3", "s3a", "gs", "gcs")
_FORMS = {"wasb": "wasb[s]://CONTAINER@ACCOUNT.blob.core.windows.net/PATH",
          "abfs": "abfs[s]://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH",
          "az": "az://CONTAINER/PATH (the account in fs.account_name)"}


def check_store_url(url: str) -> None:
    """Refuse an object store's URL that names no bucket or container, or (Azure) no account
    or a malformed one, with an :class:`OptionError` naming the option ``path``, the URL and
    the form expected.

    >>> check_store_url("abfss://lake@acct.dfs.core.windows.net/out")
    >>> check_store_url("abfss://lake@/out")
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.OptionError: path: 'abfss://lake@/out' names no \
storage account after 'lake@' (expected abfs[s]://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH)
    """
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    authority = rest.split("/", 1)[0]
    if scheme in _BUCKET_SCHEMES:
        if not authority:
            raise OptionError(f"path: {url!r} names no bucket "
                              f"(expected {scheme}://BUCKET/PATH)")
        return
    if scheme not in _AZURE:
        return  # a local path, memory://, or a scheme refused on its own
    form = _FORMS[scheme.removesuffix("s") if scheme in ("wasbs", "abfss") else scheme]
    container, at, host = authority.rpartition("@")
    if not at:
        container, host = authority, ""
        if scheme in _HADOOP_AZURE:
            raise OptionError(
                f"path: {url!r} names no container and account: hadoop-azure, and so "
                f"Spark's readers, need both (expected {form}; az://CONTAINER/PATH names the "
                "container only, for rotsink's readers)")
    if not _CONTAINER.match(container):
        what = "no container" if not container or "." in container else \
            f"the container {container!r}, which is no valid container name (3-63 lowercase " \
            "letters, digits and hyphens)"
        raise OptionError(f"path: {url!r} names {what} (expected {form})")
    if at:
        account = host.split(".", 1)[0].lower()  # a host name is any case
        if not host:
            raise OptionError(f"path: {url!r} names no storage account after "
                              f"'{container}@' (expected {form})")
        if not _ACCOUNT.match(account):
            raise OptionError(f"path: {url!r} names the storage account {account!r}, which "
                              "is no valid account name (3-24 lowercase letters and digits) "
                              f"(expected {form})")


SUPPORTED_PROTOCOLS = tuple(CLIENTS)  # the schemes with a client (storage.objects)



def open_object_storage(url: str, fs_options: dict[str, str]) -> ObjectStorage:
    """Storage for an object store's URL (the schemes of
    :data:`~commit_protocol.storage.objects.CLIENTS`: S3, Cloud Storage, Azure, ``memory://``);
    runs on driver and executors.

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
            f"conditional writes), gs:// (Cloud Storage preconditions), abfs[s]://, az://, "
            f"wasb[s]:// (Azure Blob Storage conditional headers) and memory://, not on "
            f"{protocol}://, where a publish or a log write could silently replace another "
            "writer's file")
    check_store_url(url)
    import fsspec.core

    scheme = FSSPEC_SCHEMES.get(protocol)
    fsspec_url = f"{scheme}://{url.split('://', 1)[1]}" if scheme else url
    try:
        fs, root = fsspec.core.url_to_fs(fsspec_url, **parse_fs_options(fs_options))
    except ValueError as e:
        if "account_name" not in str(e):
            raise
        # adlfs: "unable to connect to account for Must provide either a connection_string
        # or account_name with credentials!!"
        raise OptionError(
            f"path: {url!r}: no Azure storage account is named (options given: "
            f"{', '.join(f'fs.{k}' for k in sorted(fs_options)) or 'none'}); name it in the "
            "URL (CONTAINER@ACCOUNT.dfs.core.windows.net), or by fs.account_name, or give "
            "fs.connection_string (fs.account_host is where the account is served, not its "
            "name)") from e
    return ObjectStorage(fs, root, url)
