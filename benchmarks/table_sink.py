"""A table fed one micro-batch a second: rotsink against the table format's own streaming sink
and a micro-batch-per-commit table sink.

    python benchmarks/table_sink.py --table delta --seconds 300 --repeats 7
    python benchmarks/table_sink.py --table iceberg --seconds 300 --repeats 7
    python benchmarks/table_sink.py --table delta --day generated --seconds 300 --repeats 7

The sides run one after another in one session (after a short warm-up each), each fed one
JSON file of ``--rows`` rows a second for ``--seconds`` by a ``ProcessingTime("1 second")``
query, rows spread over four days:

* ``spark``: the format's own streaming sink, ``writeStream.format("delta")`` (delta-spark) or
  ``writeStream.format("iceberg")`` (iceberg-spark-runtime, into a table of a Spark Iceberg
  catalog on SQLite), partitioned by day, where its jars are published for the running
  PySpark (``tests.support.jvm.TABLE_READERS``: Delta up to 4.2, Iceberg up to 4.1; fetched
  from Maven Central like the tests' jars); left out on others;
* ``per-batch``: what Python users do without those jars, and what those sinks do per
  micro-batch: ``foreachBatch`` appending each micro-batch to the table, a new file per
  partition per batch (delta-rs's ``write_deltalake(..., partition_by=["day"])``, or
  pyiceberg's ``table.append`` to a table partitioned by day, on the same embedded SQLite
  catalog rotsink uses);
* ``floor``: a Python sink that does nothing (``benchmarks/floors.py``): what the Python Data
  Source API costs a micro-batch;
* ``rotsink``: ``format=parquet``, ``table.format``, ``partitionBy=day``, default rotation
  (files finish after 60 s).

With ``--day generated`` (Delta), the input has a timestamp ``ts`` and no day: every side writes
into a table made first with ``day DATE GENERATED ALWAYS AS (CAST(ts AS DATE))`` and
partitioned by it (by Spark's SQL where its Delta jars are published, else by delta-rs), which
each sink computes itself (rotsink's tasks, Delta's writer, delta-rs), without partitionBy.

Printed per side: micro-batches, the median trigger time (Spark's ``triggerExecution``), input
rows/s and MB/s, peak memory of the JVM, the driver and the Python workers, the table's files
at the end and per hour (files / run seconds * 3600, which undercounts rotsink's steady state:
its open files are not counted), and then a one-day query through the same reader on each
table (delta-rs, pyiceberg: ``count`` and ``sum`` of one day, a filter on the partition
column), median of ``--repeats``.
Ratios: files per hour of the format's sinks over rotsink's (target >= 50x), rotsink's query
time over theirs (target <= 0.5x), trigger times over the floor's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import floors  # noqa: E402
from common import (  # noqa: E402
    feed_and_drain,
    format_memory,
    median,
    peak_memory_mb,
    quiet_session,
    ratio,
    reset_peak_memory,
)

SCHEMA = "id LONG, name STRING, score DOUBLE, day STRING"
DAYS = ("2026-11-23", "2026-11-24", "2026-11-25", "2026-11-26")
SIDES = ("spark", "per-batch", "floor", "rotsink")
IDENTIFIER = "bench.events"
SPARK_CATALOG_DB = "spark-catalog.db"  # the Spark Iceberg sink's catalog, under the run's root


GENERATED_SCHEMA = "id LONG, name STRING, score DOUBLE, ts TIMESTAMP"
GENERATED_DDL = ("id BIGINT, name STRING, score DOUBLE, ts TIMESTAMP, "
                 "day DATE GENERATED ALWAYS AS (CAST(ts AS DATE))")


def input_row(i: int) -> dict:
    return {"id": i, "name": f"event {i}", "score": i / 7, "day": DAYS[i % len(DAYS)]}


def timed_row(i: int) -> dict:
    """``--day generated``: the day as a timestamp at 10:00 UTC (the same date in UTC, where
    delta-rs computes it, and in the session's zone, where Spark and rotsink do)."""
    return {"id": i, "name": f"event {i}", "score": i / 7,
            "ts": f"{DAYS[i % len(DAYS)]}T10:{i % 60:02d}:00Z"}


def generated_table(spark, out: Path, *, by_spark: bool) -> None:
    """The table every side of ``--day generated`` writes into, made before its query."""
    if by_spark:
        spark.sql(f"CREATE TABLE delta.`{out}` ({GENERATED_DDL}) USING delta "
                  "PARTITIONED BY (day)")
        return
    from deltalake import DeltaTable, Field, Schema
    from deltalake.schema import PrimitiveType

    fields = [Field("id", PrimitiveType("long")), Field("name", PrimitiveType("string")),
              Field("score", PrimitiveType("double")), Field("ts", PrimitiveType("timestamp")),
              Field("day", PrimitiveType("date"),
                    metadata={"delta.generationExpression": "CAST(ts AS DATE)"})]
    DeltaTable.create(str(out), Schema(fields), partition_by=["day"])


def append_with_pyiceberg(out: str):
    """The per-batch Iceberg sink: each micro-batch appended by pyiceberg, on the driver, to a
    table partitioned by day in an embedded SQLite catalog (as rotsink's)."""
    def append(frame, batch_id: int) -> None:
        data = frame.toArrow()
        if data.num_rows:
            table = iceberg_table(out, data.schema)
            table.append(data, snapshot_properties={"batch": str(batch_id)})
    return append


def iceberg_table(out: str, schema=None):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    from commit_protocol.tables.iceberg.table import catalog_properties

    catalog = load_catalog("rotsink", **catalog_properties(f"file://{out}", {}))
    try:
        return catalog.load_table(IDENTIFIER)
    except NoSuchTableError:
        catalog.create_namespace_if_not_exists("bench")
        table = catalog.create_table(IDENTIFIER, schema=schema, location=f"file://{out}")
        with table.update_spec() as spec:
            spec.add_identity("day")
        return catalog.load_table(IDENTIFIER)


def spark_iceberg_table(out: Path):
    """The Spark Iceberg sink's table of the run writing ``out``, as pyiceberg loads it from
    the same SQLite catalog (tables named after ``out``)."""
    from pyiceberg.catalog import load_catalog

    db = out.parent / SPARK_CATALOG_DB
    catalog = load_catalog("rotsink", type="sql", uri=f"sqlite:///{db}",
                           warehouse=f"file://{out.parent}")
    return catalog.load_table(f"bench.{out.name.replace('-', '_')}")


def start_spark_sink(spark, writer, out: Path, table: str):
    """The format's own streaming sink into a table partitioned by day."""
    if table == "delta":
        return writer.format("delta").partitionBy("day").start(str(out))
    from tests.support.table_spark import ICEBERG_CATALOG

    name = f"{ICEBERG_CATALOG}.bench.{out.name.replace('-', '_')}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ICEBERG_CATALOG}.bench")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} (id BIGINT, name STRING, score DOUBLE, "
              f"day STRING) USING iceberg PARTITIONED BY (day) LOCATION 'file://{out}'")
    return writer.toTable(name, format="iceberg")


def append_with_delta_rs(table: str, generated: bool = False):
    """The per-batch Delta sink: each micro-batch appended by delta-rs, on the driver."""
    def append(frame, batch_id: int) -> None:
        from deltalake import write_deltalake
        from deltalake.transaction import CommitProperties, Transaction

        data = frame.toArrow()
        if data.num_rows:  # Delta's sink records the batch in the same commit (txn)
            write_deltalake(table, data, mode="append",
                            partition_by=None if generated else ["day"],
                            commit_properties=CommitProperties(
                                app_transactions=[Transaction("per-batch", batch_id)]))
    return append


def start(spark, side: str, source: Path, out: Path, *, trigger: dict, table: str,
          generated: bool = False, by_spark: bool = False):
    schema = GENERATED_SCHEMA if generated else SCHEMA
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
    writer = df.writeStream.option("checkpointLocation", f"{out}-ck").trigger(**trigger)
    if generated and side != "floor":
        generated_table(spark, out, by_spark=by_spark)
    if side == "spark":
        if generated:
            return writer.format("delta").start(str(out))
        return start_spark_sink(spark, writer, out, table)
    if side == "per-batch":
        if table == "delta":
            return writer.foreachBatch(append_with_delta_rs(str(out), generated)).start()
        return writer.foreachBatch(append_with_pyiceberg(str(out))).start()
    if side == "floor":
        return writer.format("floor").start(str(out))
    options = {"format": "parquet", "table.format": table}
    if not generated:
        options["partitionBy"] = "day"
    if table == "iceberg":
        options["table.identifier"] = IDENTIFIER
    return writer.format("rotsink").options(**options).start(str(out))


def run(spark, root: Path, side: str, args) -> dict:
    """Feed one file a second into a fresh query of ``side`` for ``args.seconds``."""
    source, out = root / f"{side}-src", root / side
    source.mkdir(parents=True)
    reset_peak_memory(spark)
    generated = args.day == "generated"
    query = start(spark, side, source, out, trigger={"processingTime": "1 second"},
                  table=args.table, generated=generated, by_spark=args.by_spark)
    elapsed = feed_and_drain(query, source, args.rows, timed_row if generated else input_row,
                             args.seconds)
    # Spark keeps the last 100 progress reports: the trigger times of those; every input
    # file is one batch (maxFilesPerTrigger=1), all consumed (processAllAvailable)
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    inputs = list(source.glob("in-*.json"))
    rows = len(inputs) * args.rows
    input_bytes = sum(f.stat().st_size for f in inputs)
    return {"seconds": elapsed, "batches": len(inputs), "rows": rows,
            "trigger_ms": median([p["durationMs"]["triggerExecution"] for p in progress]),
            "mb_per_s": input_bytes / elapsed / 1e6, "memory": peak_memory_mb(spark),
            "out": out}


def table_files(out: Path, table: str, side: str) -> int:
    if table == "iceberg":
        loaded = spark_iceberg_table(out) if side == "spark" else iceberg_table(str(out))
        return len(loaded.inspect.files())
    from deltalake import DeltaTable

    return len(DeltaTable(str(out)).file_uris())


def one_day_query_s(out: Path, repeats: int, table: str, side: str, generated: bool = False
                    ) -> tuple[float, int, float]:
    """Median seconds of ``count`` and ``sum(score)`` over one day, through the table's own
    reader with the day pushed down as a partition filter (a fresh table load each time, as
    a query engine does)."""
    import pyarrow.compute as pc

    times, count, total = [], 0, 0.0
    for _ in range(repeats):
        started = time.monotonic()
        if table == "iceberg":
            # the filtered partition column selected too: pyiceberg 0.12 returns no row when a
            # scan filters on an identity partition column its files lack and selects it not
            # (iceberg-python#2028); rotsink's files, like Spark's, hold no partition column
            loaded = spark_iceberg_table(out) if side == "spark" else iceberg_table(str(out))
            data = loaded.scan(row_filter=f"day == '{DAYS[1]}'",
                               selected_fields=("score", "day")).to_arrow()
        else:
            from deltalake import DeltaTable

            day = dt.date.fromisoformat(DAYS[1]) if generated else DAYS[1]
            data = DeltaTable(str(out)).to_pyarrow_dataset().to_table(
                columns=["score"], filter=pc.field("day") == day)
        count, total = data.num_rows, pc.sum(data.column("score")).as_py() or 0.0
        times.append(time.monotonic() - started)
    return median(times), count, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=300, help="feeding time per side")
    parser.add_argument("--rows", type=int, default=1000, help="rows per micro-batch")
    parser.add_argument("--repeats", type=int, default=5, help="runs of the one-day query")
    parser.add_argument("--table", choices=("delta", "iceberg"), default="delta")
    parser.add_argument("--day", choices=("column", "generated"), default="column",
                        help="the day a column of the input, or generated from ts (Delta)")
    args = parser.parse_args()
    if args.day == "generated" and args.table != "delta":
        parser.error("--day generated is Delta's (Iceberg's is days(ts): a partitionBy)")
    root = Path(tempfile.mkdtemp(prefix="rotsink-table-bench-"))
    from tests.support.jvm import table_reader_formats
    from tests.support.table_spark import reader_session

    own_sink = args.table in table_reader_formats()
    args.by_spark = own_sink
    generated = args.day == "generated"
    sides = SIDES if own_sink else tuple(side for side in SIDES if side != "spark")
    jars, conf = reader_session((args.table,) if own_sink else (),
                                iceberg_db=root / SPARK_CATALOG_DB)
    spark = quiet_session("rotsink-table-sink", conf=conf, extra_jars=jars)
    floors.register(spark)
    print(f"table {args.table}: one micro-batch of {args.rows} rows a second for "
          f"{args.seconds} s per side, partitioned by day ({len(DAYS)} days"
          + (", generated from ts" if generated else "") + "); PySpark "
          f"{spark.version}; the format's own Spark sink "
          + ("measured" if own_sink else "not published for this Spark: left out"))
    for side in sides:  # warm-up: a few batches each, not measured
        warm = root / f"warm-{side}-src"
        warm.mkdir()
        (warm / "in.json").write_text(json.dumps(timed_row(0) if generated else input_row(0))
                                      + "\n")
        start(spark, side, warm, root / f"warm-{side}", trigger={"availableNow": True},
              table=args.table, generated=generated, by_spark=own_sink).awaitTermination()
    results = {side: run(spark, root, side, args) for side in sides}
    for side, r in results.items():
        files = table_files(r["out"], args.table, side) if side != "floor" else 0
        r["files_per_hour"] = files / r["seconds"] * 3600
        print(f"{side:>16}: {r['batches']} batches, median trigger {r['trigger_ms']:.0f} ms, "
              f"{r['rows'] / r['seconds']:,.0f} rows/s, {r['mb_per_s']:.2f} MB/s, "
              f"{format_memory(r['memory'])}"
              + ("" if side == "floor" else f"; {files} table files, "
                                            f"{r['files_per_hour']:,.0f} files/hour"))
    tables = tuple(side for side in sides if side != "floor")
    queried = {side: one_day_query_s(results[side]["out"], args.repeats, args.table, side,
                                     generated) for side in tables}
    for side, (seconds, count, total) in queried.items():
        print(f"{side:>16}: one-day query {seconds * 1000:.1f} ms (count {count}, "
              f"sum {total:,.1f})")
    ours, floor_ms = results["rotsink"], results["floor"]["trigger_ms"]
    for side in tables[:-1]:
        theirs = results[side]
        print(f"{side} / rotsink, files per hour: "
              f"{ratio(theirs['files_per_hour'], ours['files_per_hour'])} (target >= 50x); "
              f"rotsink / {side}, one-day query: "
              f"{ratio(queried['rotsink'][0], queried[side][0])} (target <= 0.5x); "
              f"median trigger over the floor's: {side} "
              f"{ratio(theirs['trigger_ms'], floor_ms)}, rotsink "
              f"{ratio(ours['trigger_ms'], floor_ms)}")
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
