"""A rotsink stream on a standalone cluster whose nodes' Python has no rotsink: the job ships it.

Run by ``tests/spark/test_shipped_rotsink.py`` in its own process (one application per way of
shipping), as a client-mode driver: the test's interpreter, which has rotsink, in a working
directory of its own. Prints one JSON line with what the readers and the executors found.

    PYSPARK_PYTHON=./environment/bin/python python -m tests.shipped_job archives MASTER DIR ENV
    PYSPARK_PYTHON=python3 python -m tests.shipped_job pyfiles MASTER DIR ZIP

``archives``: ``spark.archives=ENV#environment`` (a packed venv with rotsink, without PySpark),
a relative output path, the heartbeat as a second source, read back by Spark's reader,
rotsink's, the fast path and the change feed, all through the automatic ``format("rotsink")``
lookup. ``pyfiles``:
``spark.submit.pyFiles=ZIP`` (rotsink's pure-Python wheel as a zip) on nodes with only pyarrow
and numpy: Parquet, after ``spark.dataSource.register``; the errors of the automatic lookup
and of JSON lines (polars is compiled, so no zip can carry it) are reported as they come.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.streams import SCHEMA, write_numbered_source

LOOPBACK = "127.0.0.1"
_STARTED = time.monotonic()
SECONDS: dict[str, float] = {}  # when each step ended, from the process's start


def step(name: str) -> None:
    SECONDS[name] = round(time.monotonic() - _STARTED, 1)


def session(master: str, app: str, conf: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    from tests.support.class_archive import FAST_START, driver_java_options

    settings = {
        "spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
        # short-lived JVMs: the driver from Spark's classes already parsed, both with the
        # quick compiler (tests.support.class_archive)
        "spark.driver.extraJavaOptions": driver_java_options(),
        "spark.executor.extraJavaOptions": FAST_START, **conf,
    }
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    step("session")
    return spark


def archives(master: str, workdir: Path, archive: str) -> dict[str, Any]:
    from pyspark import SparkFiles

    import pyspark_rotsink

    spark = session(master, "rotsink-archives", {"spark.archives": f"{archive}#environment"})
    # Python data sources run Python on the driver too, as PYSPARK_PYTHON: in client mode
    # ./environment must be there as well. Spark unpacked the archive for the driver already.
    os.symlink(SparkFiles.get("environment"), "environment")
    found: dict[str, Any] = {"executors": where_executors_import(spark)}
    found["total"] = write_numbered_source(workdir / "in", files=3, rows_per_file=100)
    out = "out"  # relative: in the driver's working directory, not the executors'
    df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
          .json(str(workdir / "in")).repartition(2))
    query = (pyspark_rotsink.with_heartbeat(df, "1 second").writeStream.format("rotsink")
             .option("checkpointLocation", str(workdir / "ck"))
             .option("rotation.maxBatches", "2")  # three batches: both slots' last file open
             .trigger(availableNow=True).start(out))
    query.awaitTermination()
    progress = query.lastProgress
    found["sources"] = len(progress.sources) if progress is not None else 0
    step("stream")
    found["spark"] = ids(spark.read.schema(SCHEMA).json(out))
    found["finalized"] = finalized_ids(Path(out))
    found["rotsink"] = ids(spark.read.format("rotsink").load(out))
    found["fast_path"] = ids(pyspark_rotsink.read(spark, out))
    step("reads")
    feed = (spark.readStream.format("rotsink").load(out).writeStream.format("memory")
            .queryName("feed").trigger(availableNow=True).start())
    feed.awaitTermination()
    found["feed"] = ids(spark.table("feed"))
    step("feed")
    return found


def pyfiles(master: str, workdir: Path, zip_path: str) -> dict[str, Any]:
    import pyspark_rotsink
    from datasource.source import RotSinkDataSource

    spark = session(master, "rotsink-pyfiles", {"spark.submit.pyFiles": zip_path})
    found: dict[str, Any] = {"executors": where_executors_import(spark)}
    found["total"] = write_numbered_source(workdir / "in", files=2, rows_per_file=100)
    # The automatic lookup registers rotsink without the job's py-files.
    found["automatic"] = error_of(spark, workdir, "automatic", format="parquet")
    spark.dataSource.register(RotSinkDataSource)  # carries them, and PYSPARK_PYTHON
    found["parquet"] = error_of(spark, workdir, "parquet", format="parquet",
                                **{"rotation.maxBatches": "1"})
    if found["parquet"]:
        return found
    out = str(workdir / "out-parquet")
    found["spark"] = ids(spark.read.parquet(out))
    found["rotsink"] = ids(spark.read.format("rotsink").load(out))
    found["fast_path"] = ids(pyspark_rotsink.read(spark, out))
    step("reads")
    found["jsonl"] = error_of(spark, workdir, "jsonl", format="jsonl")
    return found


def error_of(spark: Any, workdir: Path, name: str, **options: str) -> str:
    """Run a rotsink query of the input to its end; '' when it succeeds, else the first
    ``ModuleNotFoundError`` line of its failure (or the failure's start)."""
    from pyspark.errors import StreamingQueryException

    df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
          .json(str(workdir / "in")).repartition(2))
    query = (df.writeStream.format("rotsink").options(**options)
             .option("checkpointLocation", str(workdir / f"ck-{name}"))
             .trigger(availableNow=True).start(str(workdir / f"out-{name}")))
    try:
        query.awaitTermination()
    except StreamingQueryException as failure:
        text = str(failure)
        missing = re.search(r"ModuleNotFoundError: [^\n]*", text)
        return missing.group(0) if missing else text[:2000]
    finally:
        step(name)
    return ""


def where_executors_import(spark: Any) -> list[list[str | None]]:
    """Each executor Python worker's interpreter and the file it imports rotsink from."""
    found = spark.sparkContext.parallelize(range(2), 2).map(_python_and_rotsink).collect()
    step("executors")
    return found


def _python_and_rotsink(_: int) -> list[str | None]:
    # Pickled by value (this module runs as __main__): executors need only the stdlib.
    import importlib.util
    import os
    import sys

    spec = importlib.util.find_spec("datasource")  # a py-file's origin is relative to the cwd
    return [sys.executable, os.path.abspath(spec.origin) if spec and spec.origin else None]


def ids(df: Any) -> list[int]:
    return sorted(row.id for row in df.select("id").collect())


def finalized_ids(out: Path) -> list[int]:
    """The ids in the visible part files on disk: what Spark's readers must return."""
    return sorted(json.loads(line)["id"] for part in out.glob("part-*")
                  for line in part.read_text().splitlines())


def main(mode: str, master: str, workdir: str, shipped: str) -> None:
    run = {"archives": archives, "pyfiles": pyfiles}[mode]
    found = run(master, Path(workdir), shipped)
    print(json.dumps({**found, "seconds": SECONDS}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
