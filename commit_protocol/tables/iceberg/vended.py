"""Storage credentials an Iceberg REST catalog vends for its table.

A REST catalog may hand out the credentials for a table's storage with each answer about the
table (Polaris, Unity Catalog, S3 Tables: ``X-Iceberg-Access-Delegation: vended-credentials``,
which pyiceberg asks for by default), short-lived and scoped to the table, so a writer never
holds a long-lived key. pyiceberg writes the table's metadata with them. rotsink writes the
table's data files itself, and its log beside them: on the driver, before each micro-batch is
planned, the credentials the catalog vended for the table (a load of the table; before the
table exists, a staged creation, which commits nothing) become the output's ``fs.*``
credentials (``key``, ``secret``, ``token``) for the driver and, in the plan Spark ships them
in, for the batch's tasks. They are asked for again when they have less than
:data:`REFRESH_BEFORE_MS` left; a catalog that vends nothing leaves the ``fs.*`` options as
given. S3 credentials only (the keys of Iceberg's S3 file IO); the values are never logged.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from commit_protocol.records.config import SinkConfig
from commit_protocol.tables.iceberg.catalog import IDENTIFIER, LOCATION, new_table_location

logger = logging.getLogger("rotsink.table")

# Iceberg's S3 file IO properties -> s3fs's keywords (rotsink's fs.* options)
S3_CREDENTIALS = {"s3.access-key-id": "key", "s3.secret-access-key": "secret",
                  "s3.session-token": "token"}
EXPIRES_AT = "s3.session-token-expires-at-ms"
# Asked again with this much left: a micro-batch's tasks must finish before they expire
REFRESH_BEFORE_MS = 5 * 60_000


@dataclass(frozen=True)
class Vended:
    """What the catalog vended: as ``fs.*`` options (empty: nothing), and until when."""

    fs_options: dict[str, str]
    expires_ms: int | None

    def fresh(self, now_ms: int) -> bool:
        return self.expires_ms is None or self.expires_ms - now_ms > REFRESH_BEFORE_MS


# (output, catalog, table) -> what this process was vended last (nothing, for a catalog
# that vends nothing: asked once a process)
_KNOWN: dict[tuple[str, str, str], Vended] = {}
_LOCK = threading.Lock()


def with_vended_credentials(config: SinkConfig, schema_json: str, *,
                            now_ms: int | None = None) -> SinkConfig:
    """``config`` with the credentials the table's REST catalog vends for an S3 output over
    its ``fs.*`` credentials; as given for any other catalog or store."""
    if not _vends(config):
        return config
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    from commit_protocol.storage import open_storage
    from commit_protocol.tables.iceberg.table import IcebergFollowedTable

    # the cache is looked up from the options alone: each planning and commit asks, and a
    # table object resolves the catalog's secret references (files, the environment)
    key = (config.path, config.table_options.get("catalog.uri", ""),
           config.table_options.get(IDENTIFIER, ""))
    with _LOCK:
        known = _KNOWN.get(key)
    if known is None or not known.fresh(now_ms):
        root_uri = open_storage(config.path, config.fs_options).root_uri
        table = IcebergFollowedTable(root_uri, config)
        known = _fetch(table, schema_json)
        with _LOCK:
            _KNOWN[key] = known
        if known.fs_options:
            logger.info("Iceberg catalog vended storage credentials for %s (%s)",
                        table.identifier, _until(known.expires_ms))
    if not known.fs_options:
        return config
    return replace(config, fs_options={**config.fs_options, **known.fs_options})


def forget() -> None:
    """Drop what this process was vended (tests: a new driver)."""
    with _LOCK:
        _KNOWN.clear()


def _vends(config: SinkConfig) -> bool:
    if config.table_format != "iceberg":
        return False
    kind = config.table_options.get("catalog.type", "")
    return kind.lower() == "rest" and config.path.split("://")[0].lower() in ("s3", "s3a")


def _fetch(table, schema_json: str) -> Vended:
    """The table's vended credentials: from a load of it, or, before it exists, from a
    staged creation at the location rotsink would create it at (nothing is committed)."""
    loaded = table.loaded()
    if loaded is not None:
        return _vended(table.catalog.properties, loaded.io.properties)
    from pyiceberg.exceptions import BadRequestError, ForbiddenError

    from commit_protocol.tables.iceberg.schema import iceberg_schema

    namespace = table.identifier.rpartition(".")[0]
    schema = iceberg_schema(schema_json)
    try:
        if namespace:
            table.catalog.create_namespace_if_not_exists(namespace)
        location = new_table_location(table.root, table.options)
        try:
            staged = table.catalog.create_table_transaction(table.identifier, schema=schema,
                                                            location=location)
        except (BadRequestError, ForbiddenError):  # a catalog that places its tables itself
            if location is None or LOCATION in table.options:
                raise
            staged = table.catalog.create_table_transaction(table.identifier, schema=schema)
    except Exception as e:  # noqa: BLE001  a catalog that stages no table vends nothing here
        logger.info("the Iceberg catalog staged no table %s (%s: %s): the output is written "
                    "with its fs.* credentials until the table exists", table.identifier,
                    type(e).__name__, e)
        return Vended({}, int(time.time() * 1000))  # asked again next batch: a load then
    # pyiceberg keeps the staged table (and its file IO, with the vended credentials) in
    # the transaction only
    return _vended(table.catalog.properties, staged._table.io.properties)


def _vended(given: dict[str, str], io: dict[str, str]) -> Vended:
    """The credentials in the table's file IO properties that the catalog's own properties
    did not set (the answer's ``config`` and ``storage-credentials``, which pyiceberg merged
    over them)."""
    found = {S3_CREDENTIALS[k]: v for k, v in io.items()
             if k in S3_CREDENTIALS and given.get(k) != v}
    if not found:
        return Vended({}, None)
    expires = io.get(EXPIRES_AT)
    return Vended(found, int(expires) if expires and expires.isdigit() else None)


def _until(expires_ms: int | None) -> str:
    if expires_ms is None:
        return "no expiry given"
    return "expiring at " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_ms / 1000))
