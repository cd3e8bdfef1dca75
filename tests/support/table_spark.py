"""Spark's own table readers for the tests, each in a venv of the newest PySpark it supports,
as a separate process: delta-spark is published for Spark up to 4.2 (its 4.2 build fails on
4.3 with a NoSuchMethodError in ``LogicalRDD``), iceberg-spark-runtime up to 4.1 (its 4.1
build fails on 4.2 and 4.3 with an IncompatibleClassChangeError), and rotsink installs 4.3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PYSPARK = {"delta": "4.2.0", "iceberg": "4.1.4"}
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
