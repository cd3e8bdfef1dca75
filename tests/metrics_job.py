"""An application as operators run one: two named rotsink queries, Spark's streaming metrics
on, the UI's Prometheus endpoint and JMX configured, until told to stop or killed.

    python -m tests.metrics_job WORK ROWS_PER_FILE

``WORK/input/<query>`` holds each query's JSON input (one file a micro-batch), the query
writes ``WORK/out/<query>`` with ``rotation.maxRecords=ROWS_PER_FILE`` (each input file one
finished part file), checkpointed in ``WORK/checkpoints/<query>``. The queries are
``alpha`` (JSON lines, in a second session of the application) and ``beta`` (Parquet, and a
Delta table that follows it).

Prints one JSON line ``{"ui": <the UI's address>, "app": <application id>}`` once both
queries run, then answers each line of stdin: ``jmx <query> <metric>`` prints the gauge's
value as the JVM's own MBean server gives it (``null`` when it has none), ``end <query>``
stops that query (and prints ``ended``), ``stop`` stops the others and the application.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main(work: str, rows_per_file: str) -> int:
    from datasource.commands.session import local_session
    from tests.support.streams import SCHEMA

    os.setpgid(0, 0)  # killed with its JVM and workers as one driver
    spark = local_session(app_name="rotsink-metrics", conf={
        "spark.ui.enabled": "true", "spark.ui.port": "0",
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.streaming.metricsEnabled": "true",
        "spark.metrics.conf.*.sink.prometheusServlet.class":
            "org.apache.spark.metrics.sink.PrometheusServlet",
        "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
        "spark.metrics.conf.*.sink.jmx.class": "org.apache.spark.metrics.sink.JmxSink",
    })
    spark.sparkContext.setLogLevel("ERROR")
    queries = []
    # alpha starts second, in a session of its own (Spark tells a session's listeners of
    # its own queries only): the application's metrics hold both, and end each with its query
    for name, session in (("beta", spark), ("alpha", spark.newSession())):
        rows = session.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1) \
            .json(f"{work}/input/{name}")
        # beta writes Parquet into a Delta table: its version is a gauge from the start
        table = {"format": "parquet", "table.format": "delta"} if name == "beta" else {}
        queries.append(rows.writeStream.format("rotsink").queryName(name).options(**table)
                       .option("checkpointLocation", f"{work}/checkpoints/{name}")
                       .option("rotation.maxRecords", rows_per_file)
                       .trigger(processingTime="300 milliseconds")
                       .start(f"{work}/out/{name}"))
    context = spark.sparkContext
    print(json.dumps({"ui": context.uiWebUrl, "app": context.applicationId}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["jmx"]:
            print(json.dumps(jmx_value(spark, words[1], words[2])), flush=True)
        elif words[:1] == ["end"]:
            next(q for q in queries if q.name == words[1]).stop()
            print(json.dumps("ended"), flush=True)
        elif words[:1] == ["stop"]:
            break
    for query in queries:
        query.stop()
    spark.stop()
    return 0


def jmx_value(spark, query: str, metric: str) -> int | None:
    """The gauge's ``Value`` attribute, read from the platform MBean server as a JMX client
    reads it (Spark's ``JmxSink`` names it ``metrics:name=<app>.driver.<source>.<metric>``).

    Through Java's reflection: py4j cannot call the server's own class, which is not public."""
    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    name = jvm.javax.management.ObjectName(
        f"metrics:name={spark.sparkContext.applicationId}.driver.rotsink.{query}.{metric},"
        "type=gauges")

    def call(method: str, *arguments) -> Any:
        types = gateway.new_array(jvm.java.lang.Class, len(arguments))
        values = gateway.new_array(jvm.java.lang.Object, len(arguments))
        for i, argument in enumerate(arguments):
            types[i] = jvm.java.lang.Class.forName(
                "java.lang.String" if isinstance(argument, str)
                else "javax.management.ObjectName")
            values[i] = argument
        return jvm.java.lang.Class.forName("javax.management.MBeanServerConnection") \
            .getMethod(method, types).invoke(server, values)

    if not call("isRegistered", name):
        return None
    return int(call("getAttribute", name, "Value"))

if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
