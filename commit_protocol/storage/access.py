"""The check a query makes of its output's store when it starts, before it writes anything:
the bucket or container exists and the credentials are accepted. Without it the first write
fails with the client's own words (``b/lake/o``, ``Unable to locate credentials``), possibly
from an executor."""

from __future__ import annotations

from commit_protocol.storage.base import Storage
from commit_protocol.vocabulary.errors import StoreAccessError

# what a store calls the top of its namespace, by URL scheme
_CONTAINER_SCHEMES = frozenset({"abfs", "abfss", "az", "wasb", "wasbs"})
# errors by which the clients say "no or wrong credentials", by class name: each client has
# its own (botocore, azure-core), and importing them all here would load every SDK
_CREDENTIAL_ERRORS = frozenset({"NoCredentialsError", "PartialCredentialsError",
                                "ClientAuthenticationError", "DefaultCredentialsError",
                                "RefreshError", "CredentialUnavailableError"})


def check_access(storage: Storage) -> None:
    """One listing of the log folder (bounded by the log's retention), its failure as a
    :class:`StoreAccessError` that says what to fix."""
    uri = storage.root_uri
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "file"
    if scheme == "file":
        return  # a local directory is created where missing
    try:
        storage.list("_spark_metadata")
    except FileNotFoundError as e:
        word = "container" if scheme in _CONTAINER_SCHEMES else "bucket"
        bucket = uri.split("://", 1)[1].split("/", 1)[0].split("@", 1)[0]
        raise StoreAccessError(
            f"cannot write to {uri}: the {word} {bucket!r} does not exist, or these "
            f"credentials cannot see it (rotsink creates no {word}s): create it, or correct "
            "the path") from e
    except Exception as e:
        if not _refused(e):
            raise
        raise StoreAccessError(
            f"cannot write to {uri}: the store refused the credentials ({type(e).__name__}: "
            f"{e}); rotsink finds them as the store's own client does, from the fs.* options "
            "or the environment (docs/object-storage.md, Credentials)") from e


def _refused(error: BaseException) -> bool:
    status = getattr(error, "status_code", None) or getattr(error, "code", None)
    return (isinstance(error, PermissionError) or status in (401, 403)
            or type(error).__name__ in _CREDENTIAL_ERRORS)
