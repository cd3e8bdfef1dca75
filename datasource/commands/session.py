"""Local Spark sessions for the demo, the tests and the benchmarks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

from commit_protocol.vocabulary.errors import JavaMissingError

JAVA_HINT = (
    "Spark needs Java 17 or newer and none was found on PATH or in JAVA_HOME. "
    "Install it, e.g. 'sudo apt-get install -y openjdk-17-jre-headless' (Debian/Ubuntu), "
    "'brew install openjdk@17' (macOS), then run this command again."
)


def check_java() -> None:
    """Fail with installation advice when no usable ``java`` is available."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise JavaMissingError(JAVA_HINT)
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    version = out.split('"')[1] if '"' in out else ""
    major = version.split(".")[0]
    if major.isdigit() and int(major) < 17:
        raise JavaMissingError(f"found Java {version} at {java}; {JAVA_HINT}")


def local_session(*, app_name: str = "rotsink", cores: int = 2, task_attempts: int = 4,
                  extra_jars: Sequence[str | os.PathLike] = (),
                  conf: Mapping[str, str] | None = None):
    """A local Spark session whose Python workers run this interpreter (``PYSPARK_PYTHON``).

    ``task_attempts`` > 1 lets Spark retry a failed task, as on a cluster (local mode
    otherwise fails the job on the first task failure). ``extra_jars`` go on the driver's
    classpath (in local mode the executors run in the driver's JVM), as ``--packages`` would
    put them: Spark's Kafka source, ``hadoop-aws``. ``conf`` overrides any setting (the
    benchmarks' tuning runs).
    """
    check_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from datasource.writing.arrow_transfer import KEY, UNCHECKED

    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.sql.session.timeZone": "UTC",
        # Local mode runs the executors in the driver's JVM: Spark's 1g default starves the
        # Arrow path of Python sinks on large batches (README, Tuning).
        "spark.driver.memory": "2g",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.driver.extraClassPath": os.pathsep.join(map(str, extra_jars)),
        # no per-row size check on the Arrow path into Python sinks
        # (datasource.writing.arrow_transfer)
        KEY: UNCHECKED,
        **(conf or {}),
    }
    builder = SparkSession.builder.master(f"local[{cores},{task_attempts}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
