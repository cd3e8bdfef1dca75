"""The JVM artifacts the pipeline tests need, fetched from Maven Central into ``.jvm-cache/``.

Three sets, each resolved by Maven from a pom under ``tests/jvm/`` and linked with its
dependencies into a folder of its own (they must not share a classpath):

- ``spark-packages``: what a PySpark user adds with ``--packages`` for Kafka in and S3 out,
  Spark's Kafka source, Spark's Avro reader and Hadoop's ``s3a`` filesystem, at the installed
  PySpark's versions (a folder per PySpark version);
- ``table-reader``: Spark's own Delta and Iceberg readers built for the installed PySpark's
  Spark release, where one is published (:data:`TABLE_READERS`);
- ``kafka-broker``: a Kafka broker's classpath, run in KRaft mode by :mod:`tests.support.kafka`;
- ``iceberg-rest``: Apache Iceberg's own REST catalog server, run by
  :mod:`tests.support.iceberg_rest`;
- ``hive-metastore``: Apache Hive's standalone metastore, run by
  :mod:`tests.support.metastore`;
- ``postgres``: a PostgreSQL server's binaries (no JVM: Maven Central serves them in a jar),
  run by :mod:`tests.support.postgres`;
- ``cloud-readers``: Spark's readers of ``gs://`` (gcs-connector) and ``wasb://`` (hadoop-azure),
  for the tests of Spark's readers on the stores' emulators (:mod:`tests.support.cloud_readers`).

``python -m tests.support.jvm`` fetches them (``.ci/run`` does, before the tests) and builds
the class-data archives of the crash loops' drivers (:mod:`tests.support.class_archive`); the
session fixtures call :func:`spark_packages` and :func:`kafka_broker_classpath`, which fetch what is
missing. Without ``mvn`` or Java they fail with what to install: never a silent skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.support.install_once import install_once

ROOT = Path(__file__).resolve().parents[2]
POMS = ROOT / "tests" / "jvm"
CACHE = ROOT / ".jvm-cache"

# Spark's Kafka source and Avro reader are released with Spark; Maven Central may lag a PySpark
# release on PyPI (on 2026-11-26 it served spark-sql-kafka up to 4.0.4, 4.1.3 and 4.2.0,
# spark-avro up to 4.0.2, 4.1.1 and 4.2.0, none for 4.3). Then the newest earlier patch of the
# same release is tried, and for a release with none, the newest connector of an earlier
# release: its API (DataSource V2) is stable within Spark 4, and the tests prove the pairing
# they run.
SPARK_FALLBACKS = ("4.2.0",)

# Spark's own table readers as published for each Spark release (Maven Central, 2026-11-26):
# (group, artifact, version). None yet for Spark 4.3: delta-spark's 4.2 build fails on it with
# a NoSuchMethodError in LogicalRDD, iceberg-spark-runtime's 4.1 build on 4.2 and 4.3 with an
# IncompatibleClassChangeError.
TABLE_READERS: dict[tuple[int, int], dict[str, tuple[str, str, str]]] = {
    (4, 0): {"delta": ("io.delta", "delta-spark_4.0_2.13", "4.4.0"),
             "iceberg": ("org.apache.iceberg", "iceberg-spark-runtime-4.0_2.13", "1.11.0")},
    (4, 1): {"delta": ("io.delta", "delta-spark_4.1_2.13", "4.4.0"),
             "iceberg": ("org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.12.0")},
    (4, 2): {"delta": ("io.delta", "delta-spark_4.2_2.13", "4.4.0")},
}


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

    folder = _fetch("spark-packages", folder=f"spark-packages-{pyspark.__version__}",
                    candidates=spark_candidates(pyspark.__version__), hadoop=hadoop_version())
    shipped = {_artifact_name(j) for j in pyspark_jars().glob("*.jar")}
    jars = tuple(sorted(j for j in folder.glob("*.jar") if _artifact_name(j) not in shipped))
    return Artifacts(jars, (folder / "VERSIONS").read_text().strip())


def spark_candidates(version: str) -> tuple[str, ...]:
    """The Spark versions whose connectors are tried for PySpark ``version``, in order.

    >>> spark_candidates("4.1.4")
    ('4.1.4', '4.1.3', '4.1.2', '4.1.1', '4.1.0', '4.2.0')
    >>> spark_candidates("4.3.0")
    ('4.3.0', '4.2.0')
    """
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    same_release = tuple(f"{major}.{minor}.{p}" for p in range(patch, -1, -1))
    return same_release + tuple(v for v in SPARK_FALLBACKS if v not in same_release)


def cloud_reader_jars() -> tuple[Path, ...]:
    """gcs-connector and hadoop-azure with its dependencies, but those PySpark ships."""
    shipped = {_artifact_name(j) for j in pyspark_jars().glob("*.jar")}
    return tuple(sorted(j for j in _fetch("cloud-readers").glob("*.jar")
                        if _artifact_name(j) not in shipped))


def kafka_broker_classpath() -> str:
    folder = _fetch("kafka-broker")
    return ":".join(str(j) for j in sorted(folder.glob("*.jar")))


def iceberg_rest_classpath() -> str:
    """Apache Iceberg's REST catalog server and what it runs on
    (:mod:`tests.support.iceberg_rest`)."""
    folder = _fetch("iceberg-rest")
    return ":".join(str(j) for j in sorted(folder.glob("*.jar")))


def postgres_binaries() -> Path:
    """A PostgreSQL server's distribution (``bin/postgres``, ``bin/initdb``), unpacked from
    the jar Maven Central serves it in (:mod:`tests.support.postgres`)."""
    import lzma
    import tarfile
    import zipfile

    folder = _fetch("postgres")

    def extract(dist: Path) -> str:
        (jar,) = folder.glob("embedded-postgres-binaries-*.jar")
        with zipfile.ZipFile(jar) as archive:
            (packed,) = [n for n in archive.namelist() if n.endswith(".txz")]
            with archive.open(packed) as txz, lzma.open(txz) as tar_bytes, \
                    tarfile.open(fileobj=tar_bytes) as tar:
                tar.extractall(dist, filter="tar")
        return jar.name

    _unpacked(folder / "dist", extract)
    return folder / "dist"


def hive_metastore() -> tuple[str, Path]:
    """Apache Hive's standalone metastore: its classpath, and the home of its schema scripts
    (unpacked from its bin archive) for its schema tool (:mod:`tests.support.metastore`)."""
    import tarfile

    folder = _fetch("hive-metastore")

    def extract(home: Path) -> str:
        (archive,) = folder.glob("hive-standalone-metastore-*-bin.tar.gz")
        with tarfile.open(archive) as tar:
            scripts = [m for m in tar.getmembers() if "/scripts/" in m.name]
            tar.extractall(home, members=scripts, filter="tar")
        (top,) = home.iterdir()
        return top.name

    top = folder / "home" / _unpacked(folder / "home", extract)
    return ":".join(str(j) for j in sorted(folder.glob("*.jar"))), top


def _unpacked(target: Path, extract: Callable[[Path], str]) -> str:
    """``extract(target)`` once, into an emptied ``target``; what it returned, kept in
    ``target/UNPACKED`` (written last: an unpack cut short is done again)."""
    marker = target / "UNPACKED"

    def unpack() -> None:
        shutil.rmtree(target, ignore_errors=True)
        note = extract(target)
        marker.write_text(note + "\n")

    install_once(marker, unpack, lock=CACHE / f".{target.parent.name}-{target.name}.lock")
    return marker.read_text().strip()


def table_reader_formats() -> tuple[str, ...]:
    """The table formats whose Spark reader is published for the installed PySpark."""
    from datasource.spark.compat import pyspark_version

    return tuple(TABLE_READERS.get(pyspark_version(), {}))


def table_reader_jars(table_format: str) -> tuple[Path, ...]:
    """Spark's reader of ``table_format`` for the installed PySpark: delta-spark and Delta's
    own jars, or iceberg-spark-runtime (a jar of its own), iceberg-aws-bundle (Glue, S3) and
    the SQLite and PostgreSQL JDBC drivers; their other dependencies are Spark's."""
    from datasource.spark.compat import pyspark_version

    version = pyspark_version()
    if table_format not in TABLE_READERS.get(version, {}):
        raise JvmSetupError(f"no Spark {table_format} reader is published for Spark "
                            f"{'.'.join(map(str, version))} (tests.support.jvm.TABLE_READERS)")
    group, artifact, release = TABLE_READERS[version][table_format]
    properties = {"reader.group": group, "reader.artifact": artifact, "reader.version": release}
    name = f"table-reader-{artifact}-{release}"
    if table_format == "iceberg":  # Glue and S3FileIO: the AWS SDK, bundled at the same release
        properties["iceberg.aws.version"] = release
        name += "-aws"
    folder = _fetch("table-reader", folder=name, properties=properties)
    wanted = ("delta-",) if table_format == "delta" else (
        "iceberg-spark-runtime", "iceberg-aws-bundle", "sqlite-jdbc", "postgresql-")
    return tuple(sorted(j for j in folder.glob("*.jar") if j.name.startswith(wanted)))


def _fetch(pom: str, *, folder: str = "", candidates: tuple[str, ...] = ("",),
           hadoop: str = "", properties: dict[str, str] | None = None) -> Path:
    """Resolve the dependencies of ``tests/jvm/<pom>/pom.xml`` and link them into
    ``.jvm-cache/<folder>/`` (default: the pom's name) unless already there."""
    target = CACHE / (folder or pom)
    install_once(target / "VERSIONS", lambda: _resolve(pom, target, candidates, hadoop,
                                                       properties),
                 lock=CACHE / f".{target.name}.lock")  # _resolve empties the folder first
    return target


def _resolve(pom: str, target: Path, candidates: tuple[str, ...], hadoop: str,
             properties: dict[str, str] | None) -> None:
    mvn = _require_tools()
    errors = []
    for spark in candidates:
        shutil.rmtree(target, ignore_errors=True)
        classpath = CACHE / f".{target.name}.classpath"
        command = [mvn, "-B", "-q", "-f", str(POMS / pom / "pom.xml"),
                   "dependency:build-classpath", f"-Dmdep.outputFile={classpath}",
                   "-DincludeScope=runtime",
                   *(f"-D{key}={value}" for key, value in (properties or {}).items())]
        if spark:
            command += [f"-Dspark.version={spark}", f"-Dhadoop.version={hadoop}"]
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode == 0:
            _link_jars([j for j in classpath.read_text().strip().split(":") if j], target)
            classpath.unlink()
            versions = (f"spark-sql-kafka {spark}, spark-avro {spark}, hadoop-aws {hadoop}"
                        if spark else " ".join((properties or {}).values()) or pom)
            (target / "VERSIONS").write_text(versions + "\n")
            return
        errors.append(f"{' '.join(command)}\n{_maven_error(done.stdout + done.stderr)}")
    raise JvmSetupError(f"Maven could not fetch the JVM artifacts of {pom}:\n"
                        + "\n".join(errors))


def _link_jars(jars: list[str], target: Path) -> None:
    """Hard-link Maven's resolved jars into ``target``: a copy of each set would cost the disk
    a gigabyte or more (the AWS SDK bundle alone is 560 MB, in every PySpark version's set),
    and a machine running CI again and again ran out of it. A jar on another filesystem than
    Maven's repository is copied."""
    target.mkdir(parents=True, exist_ok=True)
    for jar in map(Path, jars):
        try:
            (target / jar.name).hardlink_to(jar)
        except OSError:
            shutil.copy2(jar, target / jar.name)


def _maven_error(output: str) -> str:
    lines = [line for line in output.splitlines() if "[ERROR]" in line]
    return "\n".join(lines[:3]) or output[-2000:]


def _require_tools() -> str:
    from datasource.commands.session import check_java

    check_java()
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmSetupError(
            "the Kafka, s3a and pipeline tests fetch Spark's Kafka source, hadoop-aws and a "
            "Kafka broker from Maven Central, and 'mvn' is not on PATH: install Maven "
            "(Debian/Ubuntu: 'sudo apt-get install -y maven'; macOS: 'brew install maven')")
    return mvn


def main(argv: list[str] | None = None) -> int:
    """Fetch what is missing and build the class-data archives of the crash loops' drivers;
    with ``--compat`` (for ``pytest -m compat``, whose short loop starts its drivers without
    one) only fetch."""
    compat = "--compat" in (sys.argv[1:] if argv is None else argv)
    try:
        packages = spark_packages()
        cloud_reader_jars()
        kafka_broker_classpath()
        iceberg_rest_classpath()
        postgres_binaries()
        hive_metastore()
        readers = table_reader_formats()
        for table_format in readers:
            table_reader_jars(table_format)
    except JvmSetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"JVM artifacts in {CACHE}: {packages.versions}, Kafka broker, Iceberg's REST "
          f"catalog server, PostgreSQL, Hive's metastore, Spark's table "
          f"readers: {', '.join(readers) or 'none for this Spark'}")
    from tests.support.class_archive import class_archive

    classpaths = [] if compat else [(), packages.jars]
    # each build runs a Spark session of its own, most of a minute of one core: both at once
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = list(pool.map(class_archive, classpaths))
    print(f"class-data archives of the test drivers: {sum(a is not None for a in built)} of "
          f"{len(built)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
