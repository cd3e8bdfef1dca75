"""A Delta table's name in a Hive Metastore (``table.catalog.type=hive``,
``table.catalog.uri=thrift://host:9083``), where Spark with Hive support, Trino's Delta
connector and Hive look a table up; what is registered and checked is
:class:`~commit_protocol.tables.delta.names.CatalogNames`'s.

The metastore is spoken to over Thrift with the client pyiceberg's Hive catalog ships
(``pip install 'pyiceberg[hive]'``: the ``hive_metastore`` bindings), one connection per
start. The table is registered as Spark's ``CREATE TABLE ... USING delta LOCATION``
registers it in a metastore: an external table at the location, the provider among its
parameters, Spark's placeholder column, the location again as the serde's ``path``, and
the input and output formats Spark gives a data source table.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from commit_protocol.tables.delta.names import PLACEHOLDER, TABLE_PARAMETERS, CatalogNames

# What Spark's HiveExternalCatalog writes for a data source table's storage
_INPUT = "org.apache.hadoop.mapred.SequenceFileInputFormat"
_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat"
_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
_TIMEOUT_MS = 60_000  # a metastore that accepts the connection and never answers


class HiveNames(CatalogNames):
    """In one Hive Metastore (``uri``: ``thrift://host:port``)."""

    kind = "the Hive Metastore"

    def _found(self, database: str, name: str) -> tuple[str, dict[str, Any]] | None:
        from hive_metastore.ttypes import NoSuchObjectException

        with self._client() as client:
            try:
                table = client.get_table(dbname=database, tbl_name=name)
            except NoSuchObjectException:
                return None
        return (table.sd.location if table.sd else "") or "", dict(table.parameters or {})

    def _register(self, database: str, name: str, location: str) -> bool:
        from hive_metastore.ttypes import (
            AlreadyExistsException,
            Database,
            FieldSchema,
            SerDeInfo,
            StorageDescriptor,
            Table,
        )

        column, kind, comment = PLACEHOLDER
        storage = StorageDescriptor(
            cols=[FieldSchema(column, kind, comment)], location=location, inputFormat=_INPUT,
            outputFormat=_OUTPUT, serdeInfo=SerDeInfo(serializationLib=_SERDE,
                                                      parameters={"path": location}))
        with self._client() as client:
            try:
                client.create_database(Database(name=database))
            except AlreadyExistsException:
                pass
            try:
                client.create_table(Table(tableName=name, dbName=database, sd=storage,
                                          tableType="EXTERNAL_TABLE", partitionKeys=[],
                                          parameters=dict(TABLE_PARAMETERS)))
            except AlreadyExistsException:
                return False
        return True

    def _client(self) -> _Connection:
        address = urlparse(self.properties["uri"])  # thrift://host:port (checked at start)
        return _Connection(address.hostname or "", address.port or 9083)


class _Connection:
    """One connection to the metastore, its client for the ``with`` block. A class, not a
    generator: contextlib sets ``__traceback__`` on the exception it passes through, and the
    Thrift bindings' exceptions refuse any attribute set ("can't modify immutable instance"),
    which would hide the metastore's own error."""

    def __init__(self, host: str, port: int) -> None:
        from thrift.transport import TSocket, TTransport

        socket = TSocket.TSocket(host, port)
        socket.setTimeout(_TIMEOUT_MS)
        self.transport = TTransport.TBufferedTransport(socket)

    def __enter__(self) -> Any:
        from hive_metastore.ThriftHiveMetastore import Client
        from thrift.protocol import TBinaryProtocol

        self.transport.open()
        return Client(TBinaryProtocol.TBinaryProtocol(self.transport))

    def __exit__(self, *exc_info: object) -> None:
        self.transport.close()
