"""``rotsink demo``: a real local streaming query that shows rotation and commits; with
``--table delta`` (or ``iceberg``), into a Delta table that delta-rs reads back (an Iceberg
table on the embedded catalog that pyiceberg reads back) beside Spark's reader."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from datasource.commands.inspect import batch_summaries

if TYPE_CHECKING:
    from commit_protocol.tables import TableFormat

DEMO_OPTIONS = {
    "format": "jsonl",
    "rotation.maxBytes": "64kb",     # size rolls inside a task
    "rotation.maxBatches": "4",      # files span up to 4 micro-batches
    "rotation.interval": "1h",
    "rotation.inactivity": "1h",
    "log.compactInterval": "5",
}
# --table: Parquet files, partitioned, that a table lists as they finish
TABLE_OPTIONS = {"format": "parquet", "partitionBy": "event"}


def _write_input(directory: Path, batches: int, rows: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        lines = (json.dumps({"id": b * rows + r, "event": f"click-{r % 7}", "value": r * 0.5})
                 for r in range(rows))
        (directory / f"events-{b:04d}.json").write_text("\n".join(lines) + "\n")


def run_demo(workdir: str | None, *, batches: int, rows: int, table: str | None = None) -> int:
    """Stream ``batches`` micro-batches through rotsink, print what each commit did, read back
    (``table``: also into a table of that format, read back by its own reader)."""
    from datasource.commands.session import local_session

    options = DEMO_OPTIONS if table is None else \
        {**DEMO_OPTIONS, **TABLE_OPTIONS, "table.format": table}
    table_format = None
    if table is not None:
        from commit_protocol.tables import table_format_named

        table_format = table_format_named(table)
        table_format.check_installed()
    root = Path(workdir or tempfile.mkdtemp(prefix="rotsink-demo-"))
    source, out, checkpoint = root / "input", root / "output", root / "checkpoint"
    _write_input(source, batches, rows)
    print(f"rotsink demo in {root}: {batches} micro-batches x {rows} rows -> {out}")
    spark = local_session(app_name="rotsink-demo")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        started = time.time()
        df = (spark.readStream.schema("id LONG, event STRING, value DOUBLE")
              .option("maxFilesPerTrigger", 1).json(str(source)))
        writer = df.writeStream.format("rotsink").option("checkpointLocation", str(checkpoint))
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.trigger(availableNow=True).start(str(out)).awaitTermination()
        print(f"streamed in {time.time() - started:.1f}s with options {options}\n")
        _print_commits(str(out))
        if table_format is not None:
            return _read_table_back(spark, str(out), table_format)
        return _read_back(spark, str(out), batches * rows)
    finally:
        spark.stop()


def _print_commits(out: str) -> None:
    for s in batch_summaries(out):
        rolled = ", ".join(f"{name} ({size} B, {reason})"
                           for name, size, reason in s.finalized) or "-"
        marker = " [compacted log]" if s.compacted else ""
        print(f"batch {s.batch_id:>3} committed{marker}: rolled {rolled}; "
              f"{len(s.in_progress)} file(s) in progress")


def _read_table_back(spark, out: str, table_format: TableFormat) -> int:
    """The table as its own reader reads it: exactly the rows of Spark's Parquet reader."""
    read = table_format.read_back(out)
    print(f"\n{read.description}")
    spark_ids = [r.id for r in spark.read.parquet(out).select("id").collect()]
    in_progress = spark.read.format("rotsink").option("includeFinalized", "false").load(out)
    print(f"Spark's Parquet reader (honours _spark_metadata): {len(spark_ids)} rows; "
          f"{in_progress.count()} more rows are committed in files still in progress")
    ok = sorted(read.ids) == sorted(spark_ids) and len(set(read.ids)) == len(read.ids)
    print("OK: the table lists exactly the finalized files, every row once" if ok
          else "MISMATCH")
    return 0 if ok else 1


def _read_back(spark, out: str, expected: int) -> int:
    rotsink_rows = spark.read.format("rotsink").load(out)
    committed = rotsink_rows.count()
    distinct = rotsink_rows.select("id").distinct().count()
    finalized = spark.read.format("rotsink").option("includeInProgress", "false").load(out).count()
    spark_rows = spark.read.json(out).count()
    print(f"\nrotsink reader: {committed} rows ({distinct} distinct ids; {expected} streamed)")
    print(f"Spark's JSON reader (honours _spark_metadata): {spark_rows} rows = "
          f"the {finalized} rows of finalized files; the rest is committed in in-progress files")
    ok = committed == distinct == expected and spark_rows == finalized
    print("OK: every row exactly once" if ok else "MISMATCH")
    return 0 if ok else 1
