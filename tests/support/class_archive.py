"""A class-data archive of Spark's driver JVM, so that each crash-loop life starts in half
the time.

A crash-loop life starts a fresh driver (its JVM dies with it at every kill): about 4.4 s of
a life's 13 went to the JVM loading Spark's classes. A dynamic class-data-sharing archive
(JDK 13+: ``-XX:ArchiveClassesAtExit``, then ``-XX:SharedArchiveFile``) holds those classes
already parsed, and a short-lived driver gains from the quick compiler alone
(``-XX:TieredStopAtLevel=1``): measured here, a session in 2.4 s instead of 4.4, a life of
four micro-batches in 8.2 s instead of 14.5.

The archive is built once per classpath (PySpark's jars plus the extra jars of a life, such
as Spark's Kafka source) into ``.jvm-cache/cds/`` by a tiny streaming query run to its end
(the JVM writes the archive when it exits normally), under a lock that parallel test
workers share. A JVM given an archive that no longer matches its classpath runs without it.
Tests only: nothing here reaches users' sessions.

    python -m tests.support.class_archive ARCHIVE [JAR ...]   # what the build runs
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from commit_protocol.vocabulary.failpoints import ENV_VAR, FILE_ENV_VAR, KILL_PGID_ENV_VAR
from tests.support.jvm import CACHE

FAST_START = "-XX:TieredStopAtLevel=1"


def driver_java_options(extra_jars: Sequence[Path] = (), *, archive: bool = True) -> str:
    """``spark.driver.extraJavaOptions`` for a short-lived test driver: the archive of its
    classpath (built now if missing; none when it cannot be built, or without ``archive``:
    a loop of a few lives gains less than a build costs) and the quick compiler."""
    archive_path = class_archive(extra_jars) if archive else None
    shared = f"-XX:SharedArchiveFile={archive_path} " if archive_path is not None else ""
    return shared + FAST_START


def class_archive(extra_jars: Sequence[Path] = ()) -> Path | None:
    """The archive of PySpark's classpath plus ``extra_jars``; None when building it failed
    (the driver then starts without one, as before)."""
    import pyspark

    key = hashlib.sha256("\n".join([_java_version(), pyspark.__version__,
                                    *map(str, extra_jars)]).encode()).hexdigest()[:16]
    archive = CACHE / "cds" / f"driver-{key}.jsa"
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{archive}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists():
            _build(archive, extra_jars)
    return archive if archive.exists() else None


def _java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True)
    return done.stderr.strip()


def _build(archive: Path, extra_jars: Sequence[Path]) -> None:
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    command = [sys.executable, "-m", "tests.support.class_archive", str(partial),
               *map(str, extra_jars)]
    root = Path(__file__).resolve().parents[2]
    # the build is no life of the crash loop: the life's armed failpoints stay out of it
    # (once they fired in the build, and the life's query never met them)
    env = {k: v for k, v in os.environ.items()
           if k not in (ENV_VAR, FILE_ENV_VAR, KILL_PGID_ENV_VAR)}
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=300)
    if done.returncode == 0 and partial.exists():
        partial.rename(archive)
    else:
        partial.unlink(missing_ok=True)


def main(archive: str, *jars: str) -> int:
    """Run a rotsink streaming query of two micro-batches to its end in a JVM that writes
    the classes it loaded to ``archive`` when it exits."""
    import json

    from datasource.commands.session import local_session

    spark = local_session(app_name="rotsink-class-archive", extra_jars=jars,
                          conf={"spark.driver.extraJavaOptions":
                                f"-XX:ArchiveClassesAtExit={archive}"})
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="rotsink-cds-") as work:
        source = Path(work) / "in"
        source.mkdir()
        for f in range(2):
            rows = (json.dumps({"id": f * 10 + i, "g": str(i % 2)}) for i in range(10))
            (source / f"in-{f}.json").write_text("\n".join(rows) + "\n")
        query = (spark.readStream.schema("id LONG, g STRING").option("maxFilesPerTrigger", 1)
                 .json(str(source)).writeStream.format("rotsink")
                 .option("partitionBy", "g").option("rotation.maxBatches", "1")
                 .option("checkpointLocation", os.path.join(work, "ck"))
                 .trigger(availableNow=True).start(os.path.join(work, "out")))
        query.awaitTermination()
        spark.read.format("rotsink").load(os.path.join(work, "out")).count()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
