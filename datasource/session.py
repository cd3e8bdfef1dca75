"""Local Spark sessions for the demo, the tests and the benchmarks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

from commit_protocol.errors import JavaMissingError

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
                  extra_jars: Sequence[str | os.PathLike] = ()):
    """A local Spark session whose Python workers run this interpreter (``PYSPARK_PYTHON``).

    ``task_attempts`` > 1 lets Spark retry a failed task, as on a cluster (local mode
    otherwise fails the job on the first task failure). ``extra_jars`` go on the driver's
    classpath (in local mode the executors run in the driver's JVM), as ``--packages`` would
    put them: Spark's Kafka source, ``hadoop-aws``.
    """
    check_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(f"local[{cores},{task_attempts}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.extraClassPath", os.pathsep.join(map(str, extra_jars)))
        .getOrCreate()
    )
