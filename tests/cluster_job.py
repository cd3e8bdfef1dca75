"""A rotsink stream on ``local-cluster[2,1,1024]`` (two executor JVMs) into local S3.

Run by ``tests/spark/test_local_cluster.py`` in its own process, since a Spark application
has one master. Prints one JSON line with what the readers found.

    python -m tests.cluster_job ENDPOINT BUCKET WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support.streams import SCHEMA, write_numbered_source


def main(endpoint: str, bucket: str, workdir: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    env = {k: os.environ[k] for k in ("PYSPARK_PYTHON", "AWS_ACCESS_KEY_ID",
                                      "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    builder = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    for key, value in env.items():
        builder = builder.config(f"spark.executorEnv.{key}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    source = Path(workdir) / "in"
    total = write_numbered_source(source, files=6, rows_per_file=200)
    out, options = f"s3://{bucket}/out", {"fs.endpoint_url": endpoint}
    df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).json(str(source))
          .repartition(4))  # tasks on both executors
    query = (df.writeStream.format("rotsink").options(**options)
             .option("checkpointLocation", str(Path(workdir) / "ck"))
             .option("rotation.maxBatches", "2").option("compression", "zstd")
             .trigger(availableNow=True).start(out))
    query.awaitTermination()
    rows = spark.read.format("rotsink").options(**options).load(out).select("id").collect()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(json.dumps({"total": total, "ids": sorted(r.id for r in rows),
                      "executors": executors}))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
