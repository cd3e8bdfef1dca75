"""Where delta-rs finds a Delta table on each store: the table's URI and delta-rs's storage
options (the ``object_store`` crate's keys), from the output's URL and its ``fs.*`` options
(the fsspec client's keywords), so one set of options reaches both; ``table.storage.<KEY>``
options are added as they are and win.

On S3 and on Azure delta-rs commits each version with the store's conditional create (a
``PUT`` with ``If-None-Match: *``), so no locking provider is needed. Cloud Storage is not
offered yet: delta-rs writes it through the XML API, which no local emulator here serves
(fake-gcs-server answers its uploads ``400 invalid uploadType``), so it is untested.
"""

from __future__ import annotations

from commit_protocol.records.config import SinkConfig
from commit_protocol.tables import option_values
from commit_protocol.vocabulary.errors import TableError

STORAGE_PREFIX = "storage."  # table.storage.<KEY>: passed to delta-rs as it is
_AZURE_SCHEMES = ("abfs", "abfss", "az", "wasb", "wasbs")
# adlfs's keywords -> object_store's Azure keys
_AZURE_KEYS = {"account_name": "azure_storage_account_name",
               "account_key": "azure_storage_account_key",
               "sas_token": "azure_storage_sas_key",
               "client_id": "azure_storage_client_id",
               "client_secret": "azure_storage_client_secret",
               "tenant_id": "azure_storage_tenant_id"}
# the fields of an Azure connection string -> object_store's keys
_CONNECTION_FIELDS = {"AccountName": "azure_storage_account_name",
                      "AccountKey": "azure_storage_account_key",
                      "SharedAccessSignature": "azure_storage_sas_key",
                      "BlobEndpoint": "azure_storage_endpoint"}


def delta_location(root_uri: str, config: SinkConfig) -> tuple[str, dict[str, str]]:
    """The table's URI for delta-rs and its storage options.

    >>> delta_location("s3://b/out", SinkConfig(path="s3://b/out",
    ...                fs_options={"endpoint_url": "http://127.0.0.1:9000"}))
    ('s3://b/out', {'AWS_ENDPOINT_URL': 'http://127.0.0.1:9000', 'AWS_ALLOW_HTTP': 'true', \
'AWS_REGION': 'us-east-1'})
    >>> delta_location("abfss://lake@acct.dfs.core.windows.net/out",
    ...                SinkConfig(path="abfss://lake@acct.dfs.core.windows.net/out",
    ...                           fs_options={"account_key": "k"}))
    ('az://lake/out', {'azure_storage_account_key': 'k', 'azure_storage_account_name': 'acct'})
    """
    scheme, _, rest = root_uri.partition("://")
    options = option_values(config.table_options, STORAGE_PREFIX)
    if scheme == "file":
        return rest, options
    if scheme.lower() in ("s3", "s3a"):
        return f"s3://{rest}", {**_s3_options(config.fs_options), **options}
    if scheme.lower() in _AZURE_SCHEMES:
        uri, found = _azure_location(rest, config.fs_options)
        return uri, {**found, **options}
    iceberg = " (Iceberg tables, table.format=iceberg, are written there)" \
        if scheme.lower() in ("gs", "gcs") else ""
    raise TableError(f"option table.format=delta at {root_uri}: rotsink writes no Delta "
                     f"table on {scheme}:// yet{iceberg}; Delta tables on a local path, s3:// "
                     "or Azure (abfss://); docs/tables.md")


def _s3_options(fs: dict[str, str]) -> dict[str, str]:
    mapped = {"endpoint_url": "AWS_ENDPOINT_URL", "key": "AWS_ACCESS_KEY_ID",
              "secret": "AWS_SECRET_ACCESS_KEY", "token": "AWS_SESSION_TOKEN"}
    found = {mapped[k]: v for k, v in fs.items() if k in mapped}
    if found.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        found["AWS_ALLOW_HTTP"] = "true"
    if "AWS_ENDPOINT_URL" in found:
        found.setdefault("AWS_REGION", fs.get("client_kwargs.region_name", "us-east-1"))
    return found


def _azure_location(rest: str, fs: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``az://container/path`` and the account's options: the account from the URL's host
    (``container@account.dfs.core.windows.net``) or ``fs.account_name``, credentials from
    ``fs.*`` or a connection string's fields."""
    authority, _, path = rest.partition("/")
    container, _, host = authority.partition("@")
    found = {_AZURE_KEYS[k]: v for k, v in fs.items() if k in _AZURE_KEYS}
    if host:
        found.setdefault("azure_storage_account_name", host.split(".", 1)[0])
    if "connection_string" in fs:
        fields = dict(part.split("=", 1) for part in fs["connection_string"].split(";")
                      if "=" in part)
        found.update({key: fields[name] for name, key in _CONNECTION_FIELDS.items()
                      if name in fields})
    if found.get("azure_storage_endpoint", "").startswith("http://"):
        found["azure_allow_http"] = "true"
    return f"az://{container}/{path}".rstrip("/"), found
