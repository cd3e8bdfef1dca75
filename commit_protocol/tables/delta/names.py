"""A Delta table found by name: ``table.identifier`` (``database.table``) in AWS Glue
(``table.catalog.type=glue``) or a Hive Metastore (``hive``,
:mod:`~commit_protocol.tables.delta.hive_names`), where Athena, EMR's Spark, Spark with Hive
support and Trino look a table up.

A Delta table lives at its path; a catalog only names it. At the query's start the name is
looked up: a name not registered yet is registered as an external table at the output's
root, as Spark's ``CREATE TABLE ... USING delta LOCATION`` and Athena's ``CREATE EXTERNAL
TABLE ... TBLPROPERTIES ('table_type'='DELTA')`` register one (both markers, Spark's
placeholder column: readers take the schema from the table's log, never from the catalog);
a name registered for the output's root is joined; a name registered elsewhere, or for a
table that is not Delta, is refused naming both, before anything is written (a stream cannot
write a table at one path and leave its name pointing at another). The database is created
when missing. Nothing is registered again afterwards: the table's schema and partitions live
in its log.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

from commit_protocol.tables import option_values, same_uri
from commit_protocol.vocabulary.errors import OptionError, TableError

logger = logging.getLogger("rotsink.table")

IDENTIFIER = "identifier"
CATALOG_PREFIX = "catalog."
_CATALOGS = ("glue", "hive")  # where a Delta table's name can be kept
# the client library each needs on the driver, and what installs it
_CLIENTS = {"glue": ("boto3", "rotsink[glue]"), "hive": ("hive_metastore", "pyiceberg[hive]")}
# What marks a catalog's table as Delta: Athena's and Trino's, Spark's
_DELTA_MARKS = (("table_type", "delta"), ("spark.sql.sources.provider", "delta"))


def check_name_options(table_options: dict[str, str]) -> None:
    """Refuse at start a Delta name rotsink cannot keep: a catalog other than Glue or Hive,
    an identifier that is not ``database.table``, a catalog without an identifier, a catalog
    whose client library the driver lacks."""
    catalog = option_values(table_options, CATALOG_PREFIX)
    identifier = table_options.get(IDENTIFIER)
    kind = catalog.get("type")
    if kind is None and identifier is None and not catalog:
        return
    if kind not in _CATALOGS:
        raise OptionError(f"option table.catalog.type={kind!r} with table.format=delta: a "
                          f"Delta table's name is kept in {' or '.join(_CATALOGS)}; without a "
                          "catalog the table is found by its path")
    if identifier is None or identifier.count(".") != 1 or "" in identifier.split("."):
        raise OptionError(f"option table.identifier={identifier!r}: expected database.table, "
                          f"the Delta table's name in {kind}")
    if kind == "hive" and not catalog.get("uri", "").startswith("thrift://"):
        raise OptionError(f"option table.catalog.uri={catalog.get('uri')!r}: expected the Hive "
                          "Metastore's thrift://host:port")
    module, extra = _CLIENTS[kind]
    if importlib.util.find_spec(module) is None:
        raise OptionError(f"option table.catalog.type={kind!r} needs {module} on the driver: "
                          f"pip install '{extra}'")


def same_location(a: str, b: str) -> bool:
    """Whether two spellings of a table's location name one place (:func:`same_uri`; a
    plain path is a local file's, a trailing slash is none).

    >>> same_location("s3a://b/events/", "s3://b/events"), same_location("/d/x", "file:/d/x")
    (True, True)
    """
    def plain(uri: str) -> str:
        return same_uri(uri if ":" in uri else f"file:{uri}").rstrip("/")

    return plain(a) == plain(b)


class CatalogNames:
    """The Delta tables' names in one catalog: :meth:`ensure` on what :meth:`_found` and
    :meth:`_register` do in that catalog."""

    kind = ""  # the catalog, as the errors name it

    def __init__(self, table_options: dict[str, str]) -> None:
        self.properties = option_values(table_options, CATALOG_PREFIX)
        self.identifier = table_options[IDENTIFIER]

    def ensure(self, location: str) -> None:
        """Join the name registered for ``location``, register it where there is none, or
        refuse one registered for another table (see the module's docstring)."""
        database, name = self.identifier.split(".")
        where = f"Delta table name {self.identifier} in {self.kind}"
        try:
            found = self._found(database, name)
        except Exception as e:  # unreachable, refusing the credentials: the client's words
            raise TableError(f"cannot look up the {where}: {type(e).__name__}: {e}") from e
        if found is None:
            try:
                registered_now = self._register(database, name, location)
            except Exception as e:  # a name the catalog refuses, a permission: its words
                raise TableError(f"cannot register the {where} at {location}: "
                                 f"{type(e).__name__}: {e}") from e
            if registered_now:
                logger.warning("registered the Delta table %s in %s, at %s", self.identifier,
                               self.kind, location)
            else:  # another starting query registered it first: check it
                self.ensure(location)
            return
        registered, parameters = found
        lowered = {k: str(v).lower() for k, v in parameters.items()}
        if not any(lowered.get(key) == value for key, value in _DELTA_MARKS):
            raise TableError(f"the {where} names a table that is not Delta (at "
                             f"{registered or 'no location'}): choose another "
                             "table.identifier")
        if not same_location(registered, location):
            raise TableError(f"the {where} names the table at {registered}, not this output "
                             f"({location}): write to that path, or choose another "
                             "table.identifier")

    def _found(self, database: str, name: str) -> tuple[str, dict[str, Any]] | None:
        """The location and parameters of the table registered under the name; None."""
        raise NotImplementedError

    def _register(self, database: str, name: str, location: str) -> bool:
        """Register the name at ``location`` as Spark registers a Delta table (the database
        created where missing); False where another registered it first."""
        raise NotImplementedError


# Registered as Spark's CREATE TABLE ... USING delta LOCATION and Athena register it
TABLE_PARAMETERS = {"EXTERNAL": "TRUE", "table_type": "DELTA",
                    "spark.sql.sources.provider": "delta"}
PLACEHOLDER = ("col", "array<string>", "from deserializer")  # Spark's: the schema is the log's


class GlueNames(CatalogNames):
    """In one Glue catalog (its region, endpoint and credentials as pyiceberg's Glue catalog
    takes them: ``glue.region``, ``glue.endpoint``, the environment's AWS credentials)."""

    kind = "Glue"
    _client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("glue", region_name=self.properties.get("glue.region"),
                                        endpoint_url=self.properties.get("glue.endpoint"))
        return self._client

    def _found(self, database: str, name: str) -> tuple[str, dict[str, Any]] | None:
        try:
            found = self.client.get_table(DatabaseName=database, Name=name)["Table"]
        except self.client.exceptions.EntityNotFoundException:
            return None
        return (found.get("StorageDescriptor", {}).get("Location", ""),
                found.get("Parameters") or {})

    def _register(self, database: str, name: str, location: str) -> bool:
        errors = self.client.exceptions
        try:
            self.client.create_database(DatabaseInput={"Name": database})
        except errors.AlreadyExistsException:
            pass
        column, kind, comment = PLACEHOLDER
        table = {"Name": name, "TableType": "EXTERNAL_TABLE", "Parameters": TABLE_PARAMETERS,
                 "StorageDescriptor": {
                     "Location": location,
                     "Columns": [{"Name": column, "Type": kind, "Comment": comment}],
                     "SerdeInfo": {"Parameters": {"path": location}}}}
        try:
            self.client.create_table(DatabaseName=database, TableInput=table)
        except errors.AlreadyExistsException:
            return False
        return True

