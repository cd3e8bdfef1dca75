"""The JVM artifacts the pipeline tests need, fetched from Maven Central into ``.jvm-cache/``.

Two sets, each resolved by Maven from a pom under ``tests/jvm/`` and copied with its
dependencies into a folder of its own (they must not share a classpath):

- ``spark-packages``: what a PySpark user adds with ``--packages`` for Kafka in and S3 out,
  Spark's Kafka source, Spark's Avro reader and Hadoop's ``s3a`` filesystem, at the installed
  PySpark's versions;
- ``kafka-broker``: a Kafka broker's classpath, run in KRaft mode by :mod:`tests.support.kafka`.

``python -m tests.support.jvm`` fetches both (``.ci/run`` does, before the tests) and builds
the class-data archives of the crash loops' drivers (:mod:`tests.support.class_archive`); the
session fixtures call :func:`spark_packages` and :func:`kafka_broker_classpath`, which fetch what is
missing. Without ``mvn`` or Java they fail with what to install: never a silent skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POMS = ROOT / "tests" / "jvm"
CACHE = ROOT / ".jvm-cache"

# Spark's Kafka source is released with Spark; Maven Central may lag a PySpark release on PyPI
# (PySpark 4.3.0 was on PyPI, its spark-sql-kafka not on Maven Central, on 2026-11-25). Then
# the newest connector of an earlier release is tried: its API (DataSource V2) is stable
# within Spark 4, and the tests prove the pairing they run.
SPARK_FALLBACKS = ("4.2.0",)


class JvmSetupError(RuntimeError):
    """A tool or artifact the JVM tests need is missing; the message says what to do."""


@dataclass(frozen=True)
class Artifacts:
    jars: tuple[Path, ...]
    versions: str  # what was resolved, e.g. "spark-sql-kafka 4.2.0, hadoop-aws 3.5.0"


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def hadoop_version() -> str:
    """The Hadoop version PySpark ships (``hadoop-client-api-X.jar``)."""
    for jar in pyspark_jars().glob("hadoop-client-api-*.jar"):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise JvmSetupError(f"no hadoop-client-api jar in {pyspark_jars()}: is PySpark installed?")


def _artifact_name(jar: Path) -> str:
    """``bundle-2.35.4.jar`` -> ``bundle``: the name without its version."""
    return re.sub(r"-\d[\w.+-]*$", "", jar.stem)


def spark_packages() -> Artifacts:
    """Jars to put on Spark's classpath beside PySpark's own (which are left out)."""
    import pyspark

    folder = _fetch("spark-packages", candidates=(pyspark.__version__, *SPARK_FALLBACKS),
                    hadoop=hadoop_version())
    shipped = {_artifact_name(j) for j in pyspark_jars().glob("*.jar")}
    jars = tuple(sorted(j for j in folder.glob("*.jar") if _artifact_name(j) not in shipped))
    return Artifacts(jars, (folder / "VERSIONS").read_text().strip())


def kafka_broker_classpath() -> str:
    folder = _fetch("kafka-broker")
    return ":".join(str(j) for j in sorted(folder.glob("*.jar")))


def iceberg_spark_jars() -> tuple[Path, ...]:
    """Spark's Iceberg reader: iceberg-spark-runtime for Spark 4.1 (a jar of its own) and the
    SQLite JDBC driver (its other dependencies are Spark's)."""
    folder = _fetch("iceberg-spark")
    return tuple(sorted(j for j in folder.glob("*.jar")
                        if j.name.startswith(("iceberg-spark-runtime", "sqlite-jdbc"))))


def delta_spark_jars() -> tuple[Path, ...]:
    """Spark's Delta reader: delta-spark for Spark 4.2 and Delta's own jars (its other
    dependencies are Spark's, which the PySpark running it ships)."""
    return tuple(sorted(_fetch("delta-spark").glob("delta-*.jar")))


def _fetch(name: str, *, candidates: tuple[str, ...] = ("",), hadoop: str = "") -> Path:
    """Copy the pom's dependencies into ``.jvm-cache/<name>/`` unless already there."""
    folder = CACHE / name
    if (folder / "VERSIONS").exists():
        return folder
    mvn = _require_tools()
    errors = []
    for spark in candidates:
        shutil.rmtree(folder, ignore_errors=True)
        command = [mvn, "-B", "-q", "-f", str(POMS / name / "pom.xml"),
                   "dependency:copy-dependencies", f"-DoutputDirectory={folder}",
                   "-DincludeScope=runtime"]
        if spark:
            command += [f"-Dspark.version={spark}", f"-Dhadoop.version={hadoop}"]
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode == 0:
            versions = (f"spark-sql-kafka {spark}, spark-avro {spark}, hadoop-aws {hadoop}"
                        if spark else name)
            (folder / "VERSIONS").write_text(versions + "\n")
            return folder
        errors.append(f"{' '.join(command)}\n{_maven_error(done.stdout + done.stderr)}")
    raise JvmSetupError(f"Maven could not fetch the JVM artifacts of {name}:\n"
                        + "\n".join(errors))


def _maven_error(output: str) -> str:
    lines = [line for line in output.splitlines() if "[ERROR]" in line]
    return "\n".join(lines[:3]) or output[-2000:]


def _require_tools() -> str:
    from datasource.session import check_java

    check_java()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmSetupError(
            "the Kafka, s3a and pipeline tests fetch Spark's Kafka source, hadoop-aws and a "
            "Kafka broker from Maven Central, and 'mvn' is not on PATH: install Maven "
            "(Debian/Ubuntu: 'sudo apt-get install -y maven'; macOS: 'brew install maven')")
    return mvn


def main() -> int:
    try:
        packages = spark_packages()
        kafka_broker_classpath()
        delta_spark_jars()
        iceberg_spark_jars()
    except JvmSetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"JVM artifacts in {CACHE}: {packages.versions}, Kafka broker, delta-spark, "
          "iceberg-spark-runtime")
    from tests.support.class_archive import class_archive

    built = [class_archive(jars) for jars in ((), packages.jars)]  # the crash loops' drivers
    print(f"class-data archives of the test drivers: {sum(a is not None for a in built)} of 2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
