"""Build the jar of rotsink's JVM KMS client, so Spark's own Parquet reader decrypts our files.

``jvm/RotsinkKeyRingKms.java`` (class ``io.rotsink.kms.RotsinkKeyRingKms``) is shipped as
source in the wheel and compiled here, on the user's machine, against the jars of the
installed PySpark: a prebuilt jar would pin one parquet-mr / Hadoop version, while the
``KmsClient`` interface it implements is what the running Spark has. Runs on the driver,
before the session starts (``spark.jars``) or before ``addJar``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from commit_protocol.vocabulary.errors import KmsJarBuildError

__all__ = ["JAR_NAME", "KMS_CLIENT_CLASS", "KmsJarBuildError", "build_kms_jar"]

KMS_CLIENT_CLASS = "io.rotsink.kms.RotsinkKeyRingKms"
JAR_NAME = "rotsink-kms.jar"
JAVA_SOURCE = Path(__file__).parent / "jvm" / "RotsinkKeyRingKms.java"
JAVA_RELEASE = "17"  # Spark 4 runs on Java 17+



def build_kms_jar(dest_dir: str) -> str:
    """Compile ``RotsinkKeyRingKms.java`` against PySpark's jars into ``dest_dir``.

    Runs on the driver. The jar is written to a temporary name and renamed, so a reader of
    ``dest_dir`` never sees half a jar.

    Parameters
    ----------
    dest_dir : str
        Directory for the jar; created if missing.

    Returns
    -------
    str
        Path of ``dest_dir/rotsink-kms.jar``, for ``spark.jars`` or ``addJar``.

    Raises
    ------
    KmsJarBuildError
        A ``RuntimeError``: no ``javac`` (a JDK 17 or newer is needed, not just a JRE), no
        PySpark jars directory, or a compile error (javac's output is in the message).
    """
    javac = _find_tool("javac")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rotsink-kms-") as work:
        classes = Path(work) / "classes"
        _compile(javac, classes)
        jar_path = dest / JAR_NAME
        tmp_path = dest / f".{JAR_NAME}.{os.getpid()}.tmp"
        _package(classes, tmp_path)
        os.replace(tmp_path, jar_path)
    return str(jar_path)


def spark_jars_dir() -> Path:
    """The ``jars`` directory of the installed PySpark (Spark's own classpath)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if not any(jars.glob("parquet-hadoop-*.jar")):
        raise KmsJarBuildError(f"no parquet-hadoop jar in {jars}; expected the jars of a "
                               "pip-installed PySpark there")
    return jars


def _find_tool(name: str) -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home, "bin", name) if java_home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise KmsJarBuildError(
            f"no '{name}' on PATH or in JAVA_HOME: building the KMS jar needs a JDK 17 or "
            "newer (a JRE is not enough), e.g. 'sudo apt-get install -y openjdk-17-jdk-headless'")
    return found


def _compile(javac: str, classes: Path) -> None:
    # A classpath wildcard takes every jar in the directory, as Spark's own launcher does.
    classpath = str(spark_jars_dir() / "*")
    cmd = [javac, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8",
           "-cp", classpath, "-d", str(classes), str(JAVA_SOURCE)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise KmsJarBuildError(f"javac failed on {JAVA_SOURCE} (exit {done.returncode}); a JDK "
                               f"{JAVA_RELEASE} or newer is needed:\n{done.stderr.strip()}")


def _package(classes: Path, jar_path: Path) -> None:
    # zipfile instead of the 'jar' tool: a jar is a zip whose manifest comes first.
    with zipfile.ZipFile(jar_path, "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF",
                     "Manifest-Version: 1.0\r\nCreated-By: rotsink build_kms_jar\r\n\r\n")
        for path in sorted(classes.rglob("*.class")):
            jar.write(path, path.relative_to(classes).as_posix())
