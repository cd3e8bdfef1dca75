"""Spark's own table readers for the tests, each in a venv of the newest PySpark it supports,
as a separate process: delta-spark is published for Spark up to 4.2 (its 4.2 build fails on
4.3 with a NoSuchMethodError in ``LogicalRDD``), iceberg-spark-runtime up to 4.1 (its 4.1
build fails on 4.2 and 4.3 with an IncompatibleClassChangeError), and rotsink installs 4.3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

PYSPARK = {"delta": "4.2.0", "iceberg": "4.1.4"}
Result = TypeVar("Result")
# reads Spark's reader must make while the query commits: a JVM on a shared core takes seconds
# a read, so CI asks for a few; ROTSINK_SPARK_TABLE_READS=50 asks for more, on demand
SPARK_READS_BESIDE = int(os.environ.get("ROTSINK_SPARK_TABLE_READS", "2"))
READER = Path(__file__).resolve().parents[1] / "table_spark_reader.py"


def reader_python(table_format: str, venv: Path) -> Path:
    """A venv with the PySpark the format's Spark reader runs on (from PyPI, or pip's cache);
    returns its interpreter."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                        "--no-compile", f"pyspark=={PYSPARK[table_format]}"], check=True,
                       stdin=subprocess.DEVNULL)
    return python


def start_reader(table_format: str, python: Path, table: str, out_file: Path, stop_file: Path,
                 *, min_reads: int, catalog_db: str = "", orphans_file: str = ""
                 ) -> subprocess.Popen:
    """The reader (``tests/table_spark_reader.py``), started now; it stops once ``stop_file``
    exists and it has read ``min_reads`` times (then, given ``orphans_file``, runs Iceberg's
    orphan removal on the table)."""
    from tests.support.jvm import delta_spark_jars, iceberg_spark_jars

    jars = delta_spark_jars() if table_format == "delta" else iceberg_spark_jars()
    # its own PySpark and interpreter: nothing of this session's Spark settings
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_HOME"))}
    env["PYSPARK_PYTHON"] = str(python)
    return subprocess.Popen([str(python), str(READER), table_format, table, str(out_file),
                             str(stop_file), str(min_reads), ",".join(map(str, jars)),
                             catalog_db, orphans_file], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)


def wait_for_first_read(reader: subprocess.Popen, out_file: Path, *, timeout_s: float = 300
                        ) -> None:
    """Polls until the reader has read once (its JVM's start takes a while)."""
    deadline = time.monotonic() + timeout_s
    while not (out_file.exists() and out_file.read_text()):
        assert reader.poll() is None, reader.stderr.read()[-3000:] if reader.stderr else ""
        assert time.monotonic() < deadline, "the Spark reader did not read"
        time.sleep(0.2)


def run_beside_reader(run: Callable[[int, int], Result], out_file: Path, *, first_file: int,
                      files: int, more_files: int = 6,
                      reads_beside: int = SPARK_READS_BESIDE, versions: int = 3,
                      runs: int = max(8, 2 * SPARK_READS_BESIDE)) -> tuple[Result, int, int]:
    """Runs a query beside the reader writing ``out_file`` until the reader has read at least
    ``reads_beside`` times while the query was committing and seen ``versions`` table
    versions: ``run(first_file, files)`` writes that many input files and runs the query to
    its end, over ``files`` input files, then over ``more_files`` at a time, at most ``runs``
    times. A JVM reader on a busy machine may take seconds a read, so one run can end before
    it reads twice. Returns the last ``run``'s result, the input files written and the reads
    that overlapped a run."""
    running: list[tuple[float, float]] = []
    written = 0
    while True:
        start = time.time()
        result = run(first_file + written, files if not running else more_files)
        running.append((start, time.time()))
        written += files if len(running) == 1 else more_files
        lines = [json.loads(line) for line in out_file.read_text().splitlines()]
        beside = sum(any(line["start"] < end and line["end"] > start for start, end in running)
                     for line in lines)
        seen = {line["version"] for line in lines if "version" in line}
        if (beside >= reads_beside and len(seen) >= versions) or len(running) == runs:
            return result, written, beside
