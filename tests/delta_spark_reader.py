"""Spark's own Delta Lake reader on a table rotsink writes, run by a PySpark that delta-spark
supports (4.2; tests/support/delta_spark.py makes its venv). Imports nothing of rotsink.

    python tests/delta_spark_reader.py TABLE OUT_FILE STOP_FILE MIN_READS JARS

Once the table exists, reads its newest version again and again (``versionAsOf`` the version
``DESCRIBE HISTORY`` names, so each read is one committed version) until ``STOP_FILE`` exists
and at least ``MIN_READS`` reads are done; appends ``{"version": v, "ids": [...]}`` per read to
``OUT_FILE``. A read that fails is written as ``{"error": ...}``.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(table: str, out_file: str, stop_file: str, min_reads: str, jars: str) -> int:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("delta-spark-reader")
             .config("spark.ui.enabled", "false")
             .config("spark.jars", jars)
             .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
             .config("spark.sql.catalog.spark_catalog",
                     "org.apache.spark.sql.delta.catalog.DeltaCatalog")
             .config("spark.sql.shuffle.partitions", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    reads = 0
    with open(out_file, "a") as out:
        while reads < int(min_reads) or not os.path.exists(stop_file):
            if not reads and not os.path.isdir(os.path.join(table, "_delta_log")):
                time.sleep(0.2)  # created by the writer's first commit
                continue
            try:
                newest = spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").first()
                assert newest is not None, "a Delta table without a commit"
                version = newest[0]
                rows = (spark.read.format("delta").option("versionAsOf", version).load(table)
                        .select("id").collect())
                line = {"version": version, "ids": sorted(r.id for r in rows)}
            except Exception as e:  # noqa: BLE001 -- reported to the test, which fails on it
                line = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            out.write(json.dumps(line) + "\n")
            out.flush()
            reads += 1
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
