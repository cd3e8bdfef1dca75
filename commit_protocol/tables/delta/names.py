"""A Delta table found by name: ``table.identifier`` (``database.table``) in AWS Glue
(``table.catalog.type=glue``), where Athena, EMR's Spark and Trino look a table up.

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
_CATALOGS = ("glue",)  # where a Delta table's name can be kept today
# What marks a catalog's table as Delta: Athena's and Trino's, Spark's
_DELTA_MARKS = (("table_type", "delta"), ("spark.sql.sources.provider", "delta"))


def check_name_options(table_options: dict[str, str]) -> None:
    """Refuse at start a Delta name rotsink cannot keep: a catalog other than Glue, an
    identifier that is not ``database.table``, a catalog without an identifier."""
    catalog = option_values(table_options, CATALOG_PREFIX)
    identifier = table_options.get(IDENTIFIER)
    kind = catalog.get("type")
    if kind is None and identifier is None and not catalog:
        return
    if kind not in _CATALOGS:
        raise OptionError(f"option table.catalog.type={kind!r} with table.format=delta: a "
                          f"Delta table's name is kept in {', '.join(_CATALOGS)} (a Hive "
                          "Metastore is not supported yet); without a catalog the table is "
                          "found by its path")
    if identifier is None or identifier.count(".") != 1 or "" in identifier.split("."):
        raise OptionError(f"option table.identifier={identifier!r}: expected database.table, "
                          f"the Delta table's name in {kind}")
    if importlib.util.find_spec("boto3") is None:
        raise OptionError("option table.catalog.type='glue' needs boto3 on the driver: "
                          "pip install 'rotsink[glue]'")


def same_location(a: str, b: str) -> bool:
    """Whether two spellings of a table's location name one place (:func:`same_uri`; a
    plain path is a local file's, a trailing slash is none).

    >>> same_location("s3a://b/events/", "s3://b/events"), same_location("/d/x", "file:/d/x")
    (True, True)
    """
    def plain(uri: str) -> str:
        return same_uri(uri if ":" in uri else f"file:{uri}").rstrip("/")

    return plain(a) == plain(b)


class GlueNames:
    """The Delta tables' names in one Glue catalog (its region, endpoint and credentials as
    pyiceberg's Glue catalog takes them: ``glue.region``, ``glue.endpoint``, the environment's
    AWS credentials)."""

    def __init__(self, table_options: dict[str, str]) -> None:
        self.properties = option_values(table_options, CATALOG_PREFIX)
        self.identifier = table_options[IDENTIFIER]
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("glue", region_name=self.properties.get("glue.region"),
                                        endpoint_url=self.properties.get("glue.endpoint"))
        return self._client

    def ensure(self, location: str) -> None:
        """Join the name registered for ``location``, register it where there is none, or
        refuse one registered for another table (see the module's docstring)."""
        database, name = self.identifier.split(".")
        where = f"Delta table name {self.identifier} in Glue"
        errors = self.client.exceptions
        try:
            found = self.client.get_table(DatabaseName=database, Name=name)["Table"]
        except errors.EntityNotFoundException:
            found = None
        except Exception as e:  # unreachable, refusing the credentials: botocore's words
            raise TableError(f"cannot look up the {where}: {type(e).__name__}: {e}") from e
        if found is None:
            self._register(database, name, location)
            return
        registered = found.get("StorageDescriptor", {}).get("Location", "")
        parameters = {k: str(v).lower() for k, v in (found.get("Parameters") or {}).items()}
        if not any(parameters.get(key) == value for key, value in _DELTA_MARKS):
            raise TableError(f"the {where} names a table that is not Delta (at "
                             f"{registered or 'no location'}): choose another "
                             "table.identifier")
        if not same_location(registered, location):
            raise TableError(f"the {where} names the table at {registered}, not this output "
                             f"({location}): write to that path, or choose another "
                             "table.identifier")

    def _register(self, database: str, name: str, location: str) -> None:
        errors = self.client.exceptions
        try:
            self.client.create_database(DatabaseInput={"Name": database})
        except errors.AlreadyExistsException:
            pass
        table = {"Name": name, "TableType": "EXTERNAL_TABLE",
                 "Parameters": {"EXTERNAL": "TRUE", "table_type": "DELTA",
                                "spark.sql.sources.provider": "delta"},
                 "StorageDescriptor": {
                     "Location": location,
                     # Spark's placeholder: the schema is the log's
                     "Columns": [{"Name": "col", "Type": "array<string>",
                                  "Comment": "from deserializer"}],
                     "SerdeInfo": {"Parameters": {"path": location}}}}
        try:
            self.client.create_table(DatabaseName=database, TableInput=table)
        except errors.AlreadyExistsException:
            self.ensure(location)  # another starting query registered it first: check it
            return
        logger.warning("registered the Delta table %s in Glue, at %s", self.identifier,
                       location)


def names_of(table_options: dict[str, str]) -> GlueNames | None:
    """The catalog that keeps the table's name; None where the table has only its path."""
    if option_values(table_options, CATALOG_PREFIX).get("type") in _CATALOGS:
        return GlueNames(table_options)
    return None
