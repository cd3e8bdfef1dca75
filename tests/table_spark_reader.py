"""Spark's own Delta Lake or Iceberg reader on a table rotsink writes, run by a PySpark that
the reader supports (tests/support/table_spark.py makes its venv). Imports nothing of rotsink.

    python tests/table_spark_reader.py FORMAT TABLE OUT_FILE STOP_FILE MIN_READS JARS [CATALOG_DB
                                       [ORPHANS_FILE]]

``FORMAT`` is ``delta`` (``TABLE`` the table's path) or ``iceberg`` (``TABLE`` its identifier in
rotsink's embedded catalog, the SQLite file ``CATALOG_DB``, read through Iceberg's JDBC
catalog). Once the table exists, reads its newest version again and again (Delta's
``versionAsOf`` the version ``DESCRIBE HISTORY`` names, Iceberg's ``VERSION AS OF`` its newest
snapshot: each read is one committed version) until ``STOP_FILE`` exists and at least
``MIN_READS`` reads are done; appends ``{"version": v, "ids": [...]}`` per read to
``OUT_FILE``, with the read's ``start`` and ``end`` (epoch seconds). A read that fails is
written as ``{"error": ...}``. With ``ORPHANS_FILE``
(Iceberg), it then runs Iceberg's own ``remove_orphan_files`` on the table (files older than
25 hours, for real) and writes the files it deleted there, one per line.
"""

from __future__ import annotations

import json
import os
import sys
import time


def session(fmt: str, jars: str, catalog_db: str):
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[1]").appName(f"{fmt}-spark-reader")
               .config("spark.ui.enabled", "false").config("spark.jars", jars)
               .config("spark.sql.shuffle.partitions", "1"))
    if fmt == "delta":
        builder = (builder
                   .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog",
                           "org.apache.spark.sql.delta.catalog.DeltaCatalog")
                   # a snapshot's state is rebuilt in 50 partitions by default: seconds a read
                   # on one core, for a table of a few dozen commits
                   .config("spark.databricks.delta.snapshotPartitions", "1"))
    else:  # Iceberg's JDBC catalog names its rows by the Spark catalog's name: rotsink's
        prefix = "spark.sql.catalog.rotsink"
        builder = (builder.config("spark.sql.extensions",  # its procedures (CALL)
                                  "org.apache.iceberg.spark.extensions."
                                  "IcebergSparkSessionExtensions")
                   .config(prefix, "org.apache.iceberg.spark.SparkCatalog")
                   # the catalog's cache would keep the table as first read, as long as it is
                   # read again within 30 s: each read (and the orphan removal) sees the newest
                   .config(f"{prefix}.cache-enabled", "false")
                   .config(f"{prefix}.type", "jdbc").config(f"{prefix}.uri",
                                                             f"jdbc:sqlite:{catalog_db}")
                   .config(f"{prefix}.warehouse", f"file://{os.path.dirname(catalog_db)}"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def exists(fmt: str, table: str, catalog_db: str) -> bool:
    if fmt == "delta":
        return os.path.isdir(os.path.join(table, "_delta_log"))
    return os.path.exists(catalog_db)


def read(spark, fmt: str, table: str) -> dict:
    if fmt == "delta":
        newest = spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").first()
        assert newest is not None, "a Delta table without a commit"
        version = newest[0]
        rows = spark.read.format("delta").option("versionAsOf", version).load(table)
    else:
        newest = spark.sql(f"SELECT snapshot_id FROM rotsink.{table}.snapshots "
                           "ORDER BY committed_at DESC LIMIT 1").first()
        assert newest is not None, "an Iceberg table without a snapshot"
        version = newest[0]
        rows = spark.sql(f"SELECT id FROM rotsink.{table} VERSION AS OF {version}")
    return {"version": version, "ids": sorted(r.id for r in rows.select("id").collect())}


def remove_orphans(spark, table: str) -> list[str]:
    """Iceberg's orphan removal on ``table``, for real: the files it deleted."""
    import datetime as dt

    cutoff = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=25)).strftime(
        "%Y-%m-%d %H:%M:%S")
    rows = spark.sql(f"CALL rotsink.system.remove_orphan_files(table => '{table}', "
                     f"older_than => TIMESTAMP '{cutoff}')").collect()
    return sorted(r[0] for r in rows)


def main(fmt: str, table: str, out_file: str, stop_file: str, min_reads: str, jars: str,
         catalog_db: str = "", orphans_file: str = "") -> int:
    spark = session(fmt, jars, catalog_db)
    reads = 0
    with open(out_file, "a") as out:
        while reads < int(min_reads) or not os.path.exists(stop_file):
            if not reads and not exists(fmt, table, catalog_db):
                time.sleep(0.2)  # created by the writer's first commit
                continue
            start = time.time()
            try:
                line = read(spark, fmt, table)
            except Exception as e:  # noqa: BLE001 -- reported to the test, which fails on it
                line = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            line.update(start=start, end=time.time())
            out.write(json.dumps(line) + "\n")
            out.flush()
            reads += 1
    if orphans_file:
        with open(orphans_file, "w") as out:
            out.write("".join(f"{path}\n" for path in remove_orphans(spark, table)))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
