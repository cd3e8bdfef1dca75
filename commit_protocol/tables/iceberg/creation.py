"""Where and how rotsink creates an Iceberg table (the first batch of an output whose
catalog holds no table of its ``table.identifier``).

A new table lives at the output's root (``table.location``, default ``output``), on every
catalog: its metadata in ``<root>/metadata`` where path-based readers look, its data files
rotsink's finalized files, and no catalog needs a warehouse for it. Some catalogs manage their
tables' storage and place every table themselves (S3 Tables, SeaweedFS's table buckets: "table
location must be within bucket warehouse", a 400; Polaris outside a catalog's allowed locations,
a 403): where the location was not given, such a refusal creates the table where the catalog
places it, with a WARNING; a location the user
named and the catalog refuses is an error naming the option. A table that exists keeps its
location whatever the option says.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from commit_protocol.tables import TableCommit
from commit_protocol.tables.iceberg.catalog import LOCATION, new_table_location
from commit_protocol.tables.iceberg.files import new_spec
from commit_protocol.tables.iceberg.maintenance import created_properties
from commit_protocol.tables.iceberg.schema import iceberg_schema
from commit_protocol.vocabulary.errors import TableError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table as IcebergTable

logger = logging.getLogger("rotsink.table")

# Where every writer puts new data files: the output's root, so that another writer's files
# (a DELETE's rewrite, a backfill) land in the output's partition directories, where the log
# can list them for path readers (Iceberg's default, <location>/data/, is outside them)
DATA_PATH = "write.data.path"
# Asked of every engine at creation (Iceberg's defaults, said): row-level changes rewrite
# files (copy-on-write) rather than add delete files, which spark.read.parquet(path) cannot
# apply (rotsink's reader applies position deletes: commit_protocol.tables.row_deletes)
COPY_ON_WRITE = {f"write.{change}.mode": "copy-on-write"
                 for change in ("delete", "update", "merge")}
# The newest Iceberg format version pyiceberg 0.12 writes (v3: apache/iceberg-python#1551)
WRITTEN_VERSION = 2


def create_table(catalog: Catalog, identifier: str, *, root: str, options: dict[str, str],
                 commit: TableCommit, append_to: Callable[[Any, TableCommit], Any]
                 ) -> IcebergTable:
    """Create ``identifier`` with ``commit``'s batch (staged by ``append_to`` on the
    creating transaction) as its first snapshot; the table as committed."""
    from pyiceberg.exceptions import BadRequestError, ForbiddenError
    from pyiceberg.table.name_mapping import create_mapping_from_schema

    schema = iceberg_schema(commit.schema_json)
    namespace = identifier.rpartition(".")[0]
    if namespace:
        catalog.create_namespace_if_not_exists(namespace)
    properties = {**COPY_ON_WRITE, **created_properties(commit.owner),
                  DATA_PATH: root, "format-version": str(WRITTEN_VERSION),
                  "schema.name-mapping.default":
                      create_mapping_from_schema(schema).model_dump_json()}

    def created(location: str | None) -> IcebergTable:
        tx = catalog.create_table_transaction(
            identifier, schema=schema, partition_spec=new_spec(schema, commit),
            location=location, properties=properties)
        append_to(tx, commit)
        return tx.commit_transaction()

    location = new_table_location(root, options)
    if location is None:
        return created(None)
    try:
        return created(location)
    except (BadRequestError, ForbiddenError) as e:  # 400 (S3 Tables), 403 (Polaris)
        if LOCATION in options:
            raise TableError(f"option table.location={options[LOCATION]!r}: the catalog "
                             f"refused it as the location of the new Iceberg table "
                             f"{identifier} ({e}); name another, or table.location=catalog "
                             "(where the catalog places its tables)") from None  # a refusal
        logger.warning("the catalog refused the output's root %s as the location of the new "
                       "Iceberg table %s (%s): the table is where the catalog places it, its "
                       "data files at the output (set table.location=catalog to say so)",
                       location, identifier, e)
        return created(None)
