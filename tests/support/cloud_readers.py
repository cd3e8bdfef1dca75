"""Spark's own readers of Cloud Storage and Azure Blob Storage, pointed at the emulators on
127.0.0.1: the Hadoop settings a user sets for gcs-connector and hadoop-azure, with the
emulators' endpoints (``tests/support/jvm.py`` puts both jars on the session's classpath).

Set on the shared session's Hadoop configuration before the first read of a bucket or
container: Hadoop caches a filesystem per bucket, built from the settings then.
"""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.azurite import ACCOUNT, start_azurite

# Hadoop 3.5's core-default.xml names its own hadoop-gcp filesystem for gs:// and gives sizes
# as "64m", which gcs-connector reads as plain numbers (NumberFormatException): a user of
# gcs-connector on PySpark 4.3 sets these (docs/object-storage.md).
GCS_CONNECTOR = {
    "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
    "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
    "fs.gs.block.size": str(64 << 20),
    "fs.gs.rewrite.max.chunk.size": str(512 << 20),
    "fs.gs.outputstream.buffer.size": str(8 << 20),
    "fs.gs.inputstream.inplace.seek.limit": str(8 << 20),
    "fs.gs.inputstream.min.range.request.size": str(2 << 20),
}
# hadoop-azure's emulator mode reaches the development account at 127.0.0.1:10000, a port
# it does not let one change: the tests that read through it hold this lock while Azurite
# runs there (one test process at a time)
EMULATOR_PORT = 10000
_EMULATOR_LOCK = Path(tempfile.gettempdir()) / "rotsink-azurite-10000.lock"


def point_gs_at(spark, endpoint: str) -> None:
    """gcs-connector on fake-gcs-server at ``endpoint``, without credentials."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in {**GCS_CONNECTOR, "fs.gs.storage.root.url": endpoint,
                       "fs.gs.auth.type": "UNAUTHENTICATED",
                       "fs.gs.project.id": "rotsink-tests"}.items():
        hadoop.set(key, value)


def point_wasb_at_emulator(spark) -> None:
    """hadoop-azure's ``wasb://`` on the development account (Azurite on port 10000)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("fs.wasb.impl", "org.apache.hadoop.fs.azure.NativeAzureFileSystem")
    hadoop.set("fs.azure.storage.emulator.account.name", f"{ACCOUNT}.blob.core.windows.net")


@contextlib.contextmanager
def azurite_on_emulator_port() -> Iterator[str]:
    """Azurite on 127.0.0.1:10000 for as long as the block runs, one test process at a time;
    its URL."""
    with _EMULATOR_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        endpoint, stop = start_azurite(EMULATOR_PORT)
        try:
            yield endpoint
        finally:
            stop()
