"""Spark with Hive support, as a platform runs it, reading a table by its name in a Hive
Metastore: ``python -m tests.support.hive_spark THRIFT_URI NAME WAREHOUSE`` prints one JSON
object: the table's ids (``spark.table(NAME)``), its provider, type and location as
``DESCRIBE TABLE EXTENDED`` says. A process of its own: a session's catalog implementation
is fixed when its first session starts, and the tests' session has none (Spark's Delta
connector is on its classpath here: ``tests.support.table_spark``)."""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    uri, name, warehouse = argv
    from pyspark.sql import SparkSession

    from tests.support.table_spark import reader_session

    jars, conf = reader_session(("delta",))
    builder = (SparkSession.builder.master("local[1]")
               .config("spark.jars", ",".join(map(str, jars)))
               .config("spark.sql.catalogImplementation", "hive")
               .config("spark.hadoop.hive.metastore.uris", uri)
               .config("spark.sql.warehouse.dir", warehouse)
               .config("spark.ui.enabled", "false"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    described = {r.col_name: r.data_type for r in
                 spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()}
    ids = sorted(r.id for r in spark.table(name).select("id").collect())
    print(json.dumps({"ids": ids, "provider": described.get("Provider"),
                      "type": described.get("Type"), "location": described.get("Location")}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
