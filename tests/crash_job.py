"""One life of the crash-loop driver: a rotsink stream over the input so far, until killed.

Started by :mod:`tests.crashloop` in a process group of its own; it names that group in
``ROTSINK_KILL_PGID`` so a ``killall`` failpoint in any of its processes (this Python
driver, its JVM, Spark's Python workers) kills the whole driver, as a crash would.

    python -m tests.crash_job SOURCE OUT CHECKPOINT OPTIONS_JSON [TASKS]

``SOURCE`` is a folder of JSON files, or ``kafka://host:port/topic``.

``TASKS`` > 0 repartitions the rows into that many tasks per micro-batch (a restart may change
it: the slots of a task partition that no longer runs are then rolled by the driver).

With the key ``_spark_table_reads`` in ``OPTIONS_JSON`` (a file) and ``table.format`` set, the
same application reads the table with Spark's own reader of the format while its query
commits (:mod:`tests.support.table_spark`), a JSON line per read: ``{"version", "ids"}``, or
``{"error"}``; after the query's end, one ``{"final": true, "ids", "parquet"}`` line holds the
table's rows and ``spark.read.parquet(out)``'s, read one after the other.

With the key ``_restarts`` (N) in ``OPTIONS_JSON``, a query that fails (a failpoint that
raises: an error, not a kill) is started again from its checkpoint in the same application,
up to N times, as a user's retry loop or an orchestrator restarts a failed query; each failure
prints ``RESTART <error>``.

Prints ``READY`` once the query runs and ``DONE`` when it has consumed all input.
"""

from __future__ import annotations

import json
import os
import sys
import time

from commit_protocol.vocabulary.failpoints import KILL_PGID_ENV_VAR
from tests.support.streams import SCHEMA, SCHEMA_V2

KAFKA = "kafka://"
# A key of OPTIONS_JSON that is no sink option: "v2" reads the input with SCHEMA_V2 (the
# field the crash loop's producer added mid-loop; the sink has schema.evolution set)
INPUT_SCHEMA = "_input_schema"
SPARK_TABLE_READS = "_spark_table_reads"
CLASS_ARCHIVE = "_class_archive"  # "off": the driver's JVM starts without a class-data archive
RESTARTS = "_restarts"  # how many failed queries to start again (see the module docstring)
KAFKA_RECORDS_PER_BATCH = 100


def main(source: str, out: str, checkpoint: str, options_json: str, tasks: str = "0") -> int:
    os.environ[KILL_PGID_ENV_VAR] = str(os.getpgid(0))  # inherited by the JVM and workers
    from datasource.commands.session import local_session

    if source.startswith(KAFKA):
        from tests.support.jvm import spark_packages

        jars = spark_packages().jars
        spark = local_session(app_name="rotsink-crash-loop", extra_jars=jars,
                              conf=quick_driver(jars))
        spark.sparkContext.setLogLevel("ERROR")
        df = kafka_rows(spark, source)
    else:
        options = json.loads(options_json)
        reads_file = options.get(SPARK_TABLE_READS)
        jars, conf = table_readers(options, out) if reads_file else ((), {})
        spark = local_session(app_name="rotsink-crash-loop", extra_jars=jars,
                              conf={**conf, **quick_driver(
                                  jars, archive=options.get(CLASS_ARCHIVE) != "off")})
        spark.sparkContext.setLogLevel("ERROR")
        schema = SCHEMA_V2 if options.get(INPUT_SCHEMA) == "v2" else SCHEMA
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(source)
    if int(tasks):
        df = df.repartition(int(tasks))
    writer = (df.writeStream.format("rotsink").option("checkpointLocation", checkpoint)
              .trigger(availableNow=True))
    options = json.loads(options_json)
    for key, value in options.items():
        if not key.startswith("_"):
            writer = writer.option(key, value)
    reads_file = options.get(SPARK_TABLE_READS)
    for restart in range(int(options.get(RESTARTS, 0)) + 1):
        query = writer.start(out)
        if restart == 0:
            print("READY", flush=True)
        try:
            if reads_file:
                read_beside(spark, query, options, out, reads_file)
            query.awaitTermination()
            break
        except Exception as e:
            from pyspark.errors import StreamingQueryException

            if not isinstance(e, StreamingQueryException) or \
                    restart == int(options.get(RESTARTS, 0)):
                raise
            print("RESTART " + " ".join(str(e).split())[:2000], flush=True)
    print("DONE", flush=True)
    spark.stop()
    return 0


def table_readers(options: dict, out: str) -> tuple[tuple, dict[str, str]]:
    """Jars and settings of Spark's reader of the output's table format (the embedded
    Iceberg catalog beside ``out``)."""
    from pathlib import Path

    from tests.support.table_spark import reader_session

    return reader_session((options["table.format"],),
                          iceberg_db=Path(out) / "_iceberg" / "catalog.db")


def read_beside(spark, query, options: dict, out: str, reads_file: str) -> None:
    """Spark's reader of the table, read again and again while ``query`` runs, then once
    more beside ``spark.read.parquet(out)`` after its end (see the module docstring)."""
    from pathlib import Path

    from tests.support.table_spark import read_table, table_missing

    table_format = options["table.format"]
    table = out if table_format == "delta" else options["table.identifier"]
    # Iceberg's JDBC catalog cannot open a SQLite file in a folder not made yet: rotsink
    # makes it as the query starts
    made = Path(out) / ("_delta_log" if table_format == "delta" else "_iceberg/catalog.db")
    while query.isActive and not made.exists():
        time.sleep(0.2)
    with open(reads_file, "a") as lines:
        def write(line: dict) -> None:
            lines.write(json.dumps(line) + "\n")
            lines.flush()

        while query.isActive:
            try:
                version, _, ids = read_table(spark, table_format, table)
            except Exception as e:  # noqa: BLE001 -- reported to the crash loop, which fails
                if table_missing(e):
                    time.sleep(0.2)  # made by the first commit that finalizes files
                else:
                    write({"error": f"{type(e).__name__}: {str(e)[:800]}"})
                continue
            write({"version": version, "ids": ids})
            time.sleep(0.5)  # a core left to the query between reads
        query.awaitTermination()
        try:
            _, _, ids = read_table(spark, table_format, table)
        except Exception as e:
            if not table_missing(e):
                raise
            ids = []
        parquet = sorted(r.id for r in spark.read.parquet(out).select("id").collect())
        write({"final": True, "ids": ids, "parquet": parquet})


def quick_driver(extra_jars=(), *, archive: bool = True) -> dict[str, str]:
    """A life's driver JVM starts from a class-data archive (tests.support.class_archive)."""
    from tests.support.class_archive import driver_java_options

    return {"spark.driver.extraJavaOptions": driver_java_options(extra_jars, archive=archive)}


def kafka_rows(spark, source: str):
    """The rows of a Kafka topic (``kafka://host:port/topic``; values are numbered JSON rows),
    with the partition and offset each came from: the pipeline of the README."""
    from pyspark.sql import functions as F

    bootstrap, topic = source.removeprefix(KAFKA).split("/", 1)
    records = (spark.readStream.format("kafka")
               .option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic)
               .option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", KAFKA_RECORDS_PER_BATCH)
               .load())
    rows = records.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("row"),
                          F.col("partition").alias("kafka_partition"),
                          F.col("offset").alias("kafka_offset"))
    return rows.select("row.*", "kafka_partition", "kafka_offset")


def follow(mode: str, upstream: str, out: str, checkpoint: str, options_json: str) -> int:
    """The crash loop's follower (:mod:`tests.support.feed_follower`): the upstream's change
    feed into ``out``, with processing-time triggers until killed (``stream``) or up to the
    upstream's last committed batch (``available-now``)."""
    import time
    from pathlib import Path

    from datasource.commands.session import local_session

    log = Path(upstream) / "_spark_metadata"
    deadline = time.monotonic() + 120
    while not any(p.name[0].isdigit() for p in log.glob("*")):  # the feed needs a schema
        if time.monotonic() > deadline:
            return 2
        time.sleep(0.2)
    spark = local_session(app_name="rotsink-crash-loop-follower", conf=quick_driver())
    spark.sparkContext.setLogLevel("ERROR")
    feed = spark.readStream.format("rotsink").options(**json.loads(options_json)).load(upstream)
    writer = feed.writeStream.format("rotsink").option("checkpointLocation", checkpoint)
    writer = (writer.trigger(availableNow=True) if mode == "available-now"
              else writer.trigger(processingTime="500 milliseconds"))
    writer.start(out).awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--follow":
        sys.exit(follow(*sys.argv[2:7]))
    sys.exit(main(*sys.argv[1:6]))
