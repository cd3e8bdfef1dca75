"""Spark's own Delta reader for the tests: delta-spark is published for Spark up to 4.2, not
for the PySpark 4.3 rotsink installs (its 4.2 build fails on 4.3 with a NoSuchMethodError in
``LogicalRDD``), so it runs in a venv of PySpark 4.2.0 of its own, as a separate process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PYSPARK = "4.2.0"
READER = Path(__file__).resolve().parents[1] / "delta_spark_reader.py"


def delta_spark_python(venv: Path) -> Path:
    """A venv with PySpark 4.2.0 (from PyPI, or pip's cache); returns its interpreter."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                        "--no-compile", f"pyspark=={PYSPARK}"], check=True,
                       stdin=subprocess.DEVNULL)
    return python


def start_reader(python: Path, table: str, out_file: Path, stop_file: Path, *,
                 min_reads: int) -> subprocess.Popen:
    """The reader (``tests/delta_spark_reader.py``), started now; it stops once
    ``stop_file`` exists and it has read ``min_reads`` times."""
    from tests.support.jvm import delta_spark_jars

    jars = ",".join(str(j) for j in delta_spark_jars())
    # its own PySpark and interpreter: nothing of this session's Spark settings
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_HOME"))}
    env["PYSPARK_PYTHON"] = str(python)
    return subprocess.Popen([str(python), str(READER), table, str(out_file), str(stop_file),
                             str(min_reads), jars], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
