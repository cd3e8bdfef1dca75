"""The catalog of ``table.format=iceberg`` and the names of its tables and files.

The catalog comes from ``table.catalog.<property>`` (pyiceberg's ``load_catalog``): by default
pyiceberg's SQL catalog on a SQLite file beside the output (``<root>/_iceberg/catalog.db``,
for a local output and one machine); a REST catalog (``table.catalog.type=rest``) for
production, its requests with timeouts (``rest.py``). A secret (a property naming a secret,
credential, token or password) is given by reference, ``env:VAR`` or ``file:/path``, as
``encryption.key`` is, and never logged. Data files are named by URI, which writers spell
differently (:func:`same_uri`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from commit_protocol.tables import SECRET_WORDS, option_values, same_uri
from commit_protocol.vocabulary.errors import OptionError, TableError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

CATALOG_PREFIX = "catalog."
CATALOG_NAME = "name"  # table.catalog.name: the name the catalog is opened under
DEFAULT_CATALOG_NAME = "rotsink"
IDENTIFIER = "identifier"
LOCATION = "location"  # table.location: output (default) | catalog | a URI
OUTPUT_LOCATION, CATALOG_LOCATION = "output", "catalog"
# Properties pyiceberg 0.12 passes to botocore as given (Glue's client), which needs an int
_INT_PROPERTIES = ("glue.max-retries",)
# What names a catalog that has no uri, in errors: AWS Glue's endpoint and region
_ADDRESS_KEYS = ("glue.endpoint", "glue.region")
# pyiceberg's catalogs that place a new table under their warehouse property
_WAREHOUSE_PLACED = ("glue", "hive", "sql", "dynamodb")
_AZURE_SCHEMES = ("abfs", "abfss", "az", "wasb", "wasbs")
# adlfs's keywords that pyiceberg's file IO takes as adls.<keyword with dashes>
_ADLS_KEYWORDS = ("connection_string", "account_name", "account_key", "sas_token",
                  "tenant_id", "client_id", "client_secret", "account_host", "anon")
# gcsfs's keywords -> pyiceberg's gcs.* properties of its fsspec file IO
_GCS_KEYWORDS = {"endpoint_url": "gcs.service.host", "token": "gcs.oauth2.token",
                 "project": "gcs.project-id", "requester_pays": "gcs.requester-pays"}
# On gs:// pyiceberg writes through gcsfs, the client rotsink's own storage uses, so the
# credentials take the same forms (a service account's JSON file, "google_default", "cloud",
# "anon"); pyarrow's GCS filesystem, pyiceberg's default, takes only an access token.
_GCS_FILE_IO = "pyiceberg.io.fsspec.FsspecFileIO"


# A commit to a Hive catalog takes the metastore's table lock. A lock it has to wait for is
# held by another writer's commit, so once granted the commit fails its requirement anyway
# and is tried again from a fresh read: a long wait only keeps the two writers in step.
# pyiceberg 0.12 waits 2 s, then 4 and 8 (its multiplier of 2 before its minimum applies):
# measured beside a backfill committing every 0.5 s, each writer waited 2 s for the other's
# lock, and the stream lost five races in a row in four runs of five. At most 0.2 s a check
# (for 2 s in all) keeps a lost attempt short. Options the user gives override these.
HIVE_LOCK_CHECKS = {"lock-check-max-wait-time": "0.2", "lock-check-retries": "10"}


def catalog_properties(root_uri: str, options: dict[str, str],
                       fs_options: dict[str, str] | None = None) -> dict[str, str]:
    """``load_catalog``'s properties from the ``table.catalog.*`` options, secrets resolved
    from their references; the embedded SQLite catalog by default; the store of the
    ``fs.*`` options (an S3 endpoint, an Azure account), unless the catalog's properties say
    otherwise (the table's readers and pyiceberg's file IO then reach the same store).

    >>> catalog_properties("file:///data/out", {})["uri"]
    'sqlite:////data/out/_iceberg/catalog.db'
    >>> catalog_properties("s3://b/out", {"catalog.type": "rest"},
    ...                    {"endpoint_url": "http://127.0.0.1:9000"})["s3.endpoint"]
    'http://127.0.0.1:9000'
    """
    given = option_values(options, CATALOG_PREFIX)
    properties = {key: _typed(key, _resolved(key, value)) for key, value in given.items()
                  if key != CATALOG_NAME}
    properties = {**_file_io_properties(root_uri, fs_options or {}), **properties}
    if properties.get("type") == "hive":
        properties = {**HIVE_LOCK_CHECKS, **properties}
    if "type" not in properties and "uri" not in properties:
        if not root_uri.startswith("file://"):
            raise OptionError(f"option table.format='iceberg' at {root_uri}: the embedded "
                              "catalog (SQLite) is for a local output; name the catalog of a "
                              "table on an object store: table.catalog.type and "
                              "table.catalog.uri (a REST catalog, or a SQL catalog's database "
                              "URL; docs/tables.md)")
        root = root_uri[len("file://"):]
        os.makedirs(f"{root}/_iceberg", exist_ok=True)
        properties = {"type": "sql", "uri": f"sqlite:///{root}/_iceberg/catalog.db",
                      "warehouse": f"{root_uri}/_iceberg", **properties}
    return properties


def _file_io_properties(root_uri: str, fs: dict[str, str]) -> dict[str, str]:
    """pyiceberg's file IO properties that reach the store the ``fs.*`` options reach: an S3
    endpoint, an Azure account and its credentials (adlfs's keywords are pyiceberg's
    ``adls.*`` properties), or Cloud Storage through gcsfs with its credentials.

    >>> _file_io_properties("gs://b/out", {"token": "/keys/sa.json", "project": "p"})
    {'py-io-impl': 'pyiceberg.io.fsspec.FsspecFileIO', 'gcs.project-id': 'p', \
'gcs.oauth2.token': '/keys/sa.json'}
    """
    scheme = root_uri.split("://")[0].lower()
    if scheme in ("s3", "s3a") and "endpoint_url" in fs:
        return {"s3.endpoint": fs["endpoint_url"], "s3.path-style-access": "true",
                "s3.region": "us-east-1"}
    if scheme in _AZURE_SCHEMES:
        return {f"adls.{key.replace('_', '-')}": value for key, value in fs.items()
                if key in _ADLS_KEYWORDS}
    if scheme in ("gs", "gcs"):
        # gcs.project-id "" where fs.project is unset, as gcsfs's own default: pyiceberg
        # passes None, and gcsfs then warns "GCS project not set" at every file IO it makes
        return {"py-io-impl": _GCS_FILE_IO, "gcs.project-id": "",
                **{_GCS_KEYWORDS[key]: value for key, value in fs.items()
                   if key in _GCS_KEYWORDS}}
    return {}


class _OpenCatalogs:
    """The catalogs this process opened lately, by name and properties: the last ``size``,
    each for ``reuse_s`` seconds.

    Opening one is not free (a SQL catalog makes an engine and checks its tables, a REST
    catalog asks for its config: one request, 17-35 ms with SigV4) and a driver commits a
    micro-batch every few seconds for months, through a new ``Committer`` each: the catalog is
    kept, the table loaded from it afresh for every commit (another writer may have moved
    it). Bounds: a driver writes one or a few outputs, so a handful is enough, and a catalog
    pushed out has its engine's pool closed; a catalog is opened again after ``reuse_s``, so
    a REST catalog's OAuth token (which pyiceberg renews only on a 419 answer) is never older
    than that; a SQLite file is known by its inode too, so an output deleted and started again
    gets a catalog of its own, never a pooled connection to the file that is gone.
    """

    def __init__(self, size: int = 4, reuse_s: float = 300.0) -> None:
        self.size, self.reuse_s = size, reuse_s
        self._open: OrderedDict[tuple[Any, ...], tuple[Catalog, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str, properties: dict[str, str]) -> Catalog:
        from commit_protocol.tables.iceberg.rest import open_catalog, request_timeouts

        key = (name, tuple(sorted(properties.items())), _sqlite_file(properties))
        now = time.monotonic()
        with self._lock:
            found = self._open.get(key)
            if found is not None and now - found[1] < self.reuse_s:
                self._open.move_to_end(key)
                return found[0]
        request_timeouts(properties)  # a wrong timeout is the option's error, not the catalog's
        try:
            catalog = open_catalog(name, properties)
        except Exception as e:  # a missing folder, a refused connection: pyiceberg's own words
            raise TableError(f"cannot open the Iceberg catalog {name!r} "
                             f"({described(properties)}): {type(e).__name__}: {e}") from e
        key = (*key[:2], _sqlite_file(properties))  # (a SQL catalog makes its file)
        with self._lock:
            replaced = self._open.pop(key, None)
            self._open[key] = (catalog, now)
            pushed_out = [self._open.popitem(last=False)[1] for _ in
                          range(len(self._open) - self.size)]
        for old, _ in ([replaced] if replaced else []) + pushed_out:
            engine = getattr(old, "engine", None)  # a SQL catalog's
            if engine is not None and old is not catalog:
                engine.dispose()
        return catalog

    def __len__(self) -> int:
        return len(self._open)

    def clear(self) -> None:
        with self._lock:
            self._open.clear()


OPEN_CATALOGS = _OpenCatalogs()


def described(properties: dict[str, str]) -> str:
    """The catalog's type and address for an error message, a password in the URI masked.

    >>> described({"type": "sql", "uri": "postgresql://u:secret@db/lake"})
    'table.catalog.type=sql, table.catalog.uri=postgresql://u:***@db/lake'
    >>> described({"type": "glue", "glue.region": "eu-west-1", "s3.endpoint": "http://s3"})
    'table.catalog.type=glue, table.catalog.glue.region=eu-west-1'
    """
    uri = re.sub(r"//([^:/@]+):[^@/]*@", r"//\1:***@", properties.get("uri", ""))
    return ", ".join(f"table.catalog.{key}={value}" for key, value in
                     (("type", properties.get("type", "")), ("uri", uri),
                      *((k, properties.get(k, "")) for k in _ADDRESS_KEYS)) if value)


def _sqlite_file(properties: dict[str, str]) -> tuple[int, int] | None:
    """The device and inode of a SQL catalog's SQLite file; None for other catalogs or a file
    not made yet."""
    uri = properties.get("uri", "")
    if not uri.startswith("sqlite:///"):
        return None
    try:
        found = os.stat(uri[len("sqlite:///"):])
    except OSError:
        return None
    return found.st_dev, found.st_ino


def new_table_location(root: str, options: dict[str, str]) -> str | None:
    """Where a table rotsink creates lives (``table.location``): at the output's root by
    default, on every catalog (its metadata in ``<root>/metadata``, where path-based readers
    look, and no warehouse needed); ``catalog``: where the catalog places it (a catalog that
    manages its tables' storage, as S3 Tables and SeaweedFS's table buckets do, refuses any
    other); or the URI given. None: the catalog's choice. An existing table keeps its own.

    >>> new_table_location("s3://b/out", {}), new_table_location("s3://b/out",
    ...                                                            {"location": "catalog"})
    ('s3://b/out', None)
    >>> new_table_location("s3://b/out", {"location": "s3a://lake/events/"})
    's3://lake/events'
    """
    given = options.get(LOCATION, OUTPUT_LOCATION)
    if given.lower() == OUTPUT_LOCATION:
        return root
    if given.lower() == CATALOG_LOCATION:
        return None
    return same_uri(given).rstrip("/")


def check_location(options: dict[str, str]) -> None:
    """Refuse at start a ``table.location`` that is neither a keyword nor a URI, and
    ``catalog`` where the catalog has nowhere to place a table: pyiceberg's Glue, Hive, SQL
    and DynamoDB catalogs place it under their ``warehouse`` (a REST catalog's server
    decides), and without one would fail only at the first commit, after the query started.

    >>> check_location({"location": "catalog", "catalog.type": "glue"})
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.OptionError: option table.location='catalog': the glue ...
    """
    given = options.get(LOCATION, OUTPUT_LOCATION)
    if given.lower() not in (OUTPUT_LOCATION, CATALOG_LOCATION) and "://" not in given:
        raise OptionError(f"option table.location={given!r}: expected {OUTPUT_LOCATION} (the "
                          f"default: a new table at the output's root), {CATALOG_LOCATION} "
                          "(where the catalog places it) or a URI such as s3://bucket/table")
    catalog = option_values(options, CATALOG_PREFIX)
    kind = catalog.get("type", "sql" if "uri" not in catalog else "rest")
    if given.lower() == CATALOG_LOCATION and kind in _WAREHOUSE_PLACED \
            and "warehouse" not in catalog:
        raise OptionError(f"option table.location={given!r}: the {kind} catalog has no "
                          "warehouse to place a new table in; set table.catalog.warehouse, "
                          "or leave table.location unset (the table at the output's root)")


def catalog_name(options: dict[str, str]) -> str:
    """The name the catalog is opened under (``table.catalog.name``, default ``rotsink``): a
    SQL or JDBC catalog keeps its tables under the name of the catalog that made them, so a
    catalog shared with Spark's or Trino's shows rotsink's table under their catalog's name.

    >>> catalog_name({}), catalog_name({"catalog.name": "lake"})
    ('rotsink', 'lake')
    """
    return options.get(CATALOG_PREFIX + CATALOG_NAME, DEFAULT_CATALOG_NAME)


def _typed(key: str, value: str) -> Any:
    """A property pyiceberg hands on as it is to a client that needs a number (botocore's
    retries: the string fails the opening of the catalog with a TypeError) as a number.

    >>> _typed("glue.max-retries", "2"), _typed("glue.region", "eu-west-1")
    (2, 'eu-west-1')
    """
    if key not in _INT_PROPERTIES:
        return value
    try:
        return int(value)
    except ValueError:
        raise OptionError(f"option table.catalog.{key}={value!r}: expected a whole "
                          "number") from None


def _resolved(key: str, value: str) -> str:
    """A catalog property's value; a secret's from its reference (never given literally)."""
    if not any(word in key.lower() for word in SECRET_WORDS):
        return value
    if value.startswith("env:"):
        found = os.environ.get(value[4:])
        if found is None:
            raise OptionError(f"option table.catalog.{key}: environment variable "
                              f"{value[4:]!r} is not set")
        return found
    if value.startswith("file:"):
        with open(value[5:]) as f:
            return f.read().strip()
    raise OptionError(f"option table.catalog.{key}: expected a reference env:VAR or file:/path "
                      "to the secret, not the secret itself (options are logged by Spark)")


def below(path: str, prefix: str) -> str:
    """A data file's path below the output's root (``prefix``, as :func:`same_uri`
    spells it), or its whole URI when it lies elsewhere."""
    same = same_uri(path)
    return same[len(prefix):] if same.startswith(prefix) else path


def data_root(root_uri: str) -> str:
    """The output's root as Iceberg names its files: ``file:///...`` or ``s3://...``.

    >>> data_root("s3a://bucket/out"), data_root("file:///data/out")
    ('s3://bucket/out', 'file:///data/out')
    """
    scheme, _, rest = root_uri.partition("://")
    return f"s3://{rest}" if scheme.lower() in ("s3", "s3a") else root_uri.rstrip("/")


def default_identifier(root_uri: str) -> str:
    """``rotsink.<the output directory's name>``, letters, digits and underscores only.

    >>> default_identifier("file:///data/my-events")
    'rotsink.my_events'
    """
    name = root_uri.rstrip("/").rsplit("/", 1)[-1]
    return "rotsink." + ("".join(c if c.isalnum() else "_" for c in name) or "output")
