"""Shared fixtures. Spark tests share one session-scoped ``local[2]`` session with the UI off."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support.s3server import LocalS3

# Python workers must run the driver's interpreter, or they import nothing of ours.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# Tests talk only to the local S3 server (127.0.0.1); Spark's workers inherit these at session
# start, so they are set before any session exists. Never real credentials.
os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-1"})
os.environ.pop("AWS_SESSION_TOKEN", None)
os.environ.pop("AWS_PROFILE", None)
# gcsfs's default client (2025.x on) asks Cloud Storage's gRPC control API for each bucket's
# layout, and retries without end against an emulator that does not serve it; pyiceberg's file
# IO goes through it (rotsink's own GCS requests do not). Set before anything imports gcsfs.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
# Failpoints are armed by writing this file; Spark's workers inherit the variable.
FAILPOINTS_FILE = Path(tempfile.mkdtemp(prefix="rotsink-fp-")) / "armed"
os.environ["ROTSINK_FAILPOINTS_FILE"] = str(FAILPOINTS_FILE)


@pytest.fixture(scope="session")
def spark(iceberg_catalog_db):
    from datasource.commands.session import local_session
    from tests.support.jvm import cloud_reader_jars, spark_packages, table_reader_formats
    from tests.support.table_spark import SESSION_CATALOG, reader_session

    # Spark's Kafka source and hadoop-aws, gcs-connector and hadoop-azure, as a user's
    # --packages would add them, and Spark's own Delta and Iceberg readers where they are
    # published for this PySpark
    readers, conf = reader_session(table_reader_formats(), iceberg_db=iceberg_catalog_db,
                                   catalog=SESSION_CATALOG)
    session = local_session(app_name="rotsink-tests", conf=conf,
                            extra_jars=(*spark_packages().jars, *cloud_reader_jars(), *readers))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def iceberg_catalog_db(tmp_path_factory) -> Path:
    """The SQLite file of the Iceberg catalog that the session's Spark catalog ``lake`` opens
    (where Spark's Iceberg reader is published for this PySpark): rotsink commits into it
    with ``tests.support.table_spark.iceberg_catalog_options``."""
    return tmp_path_factory.mktemp("iceberg-catalog") / "catalog.db"


@pytest.fixture
def pushdown(spark):
    """Python readers take filters during one test: ``spark.sql.python.filterPushdown.enabled``
    (false by default), which rotsink's reader follows (``datasource.reading.pushdown``)."""
    key = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(key, "false")  # unknown to PySpark 4.0, which has no pushdown
    spark.conf.set(key, "true")
    yield
    spark.conf.set(key, before)


@pytest.fixture
def failpoints():
    """Arm failpoints for one test: ``failpoints.arm("task.after_append=raise:once")``."""

    class Armed:
        def arm(self, spec: str) -> None:
            for marker in FAILPOINTS_FILE.parent.glob(f"{FAILPOINTS_FILE.name}.*.fired*"):
                marker.unlink()
            FAILPOINTS_FILE.write_text(spec)

        def disarm(self) -> None:
            FAILPOINTS_FILE.unlink(missing_ok=True)

    armed = Armed()
    yield armed
    armed.disarm()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of a moto S3 server on 127.0.0.1 shared by the session (dummy credentials above)."""
    from tests.support.s3server import start_moto_server

    endpoint, stop = start_moto_server()
    yield endpoint
    stop()


@pytest.fixture(scope="session")
def seaweedfs_endpoint() -> Iterator[str]:
    """URL of a SeaweedFS S3 gateway (``weed mini``) on 127.0.0.1 shared by the session: a
    real server whose requests run concurrently, unlike moto's."""
    from tests.support.s3server import start_seaweedfs_server

    endpoint, stop = start_seaweedfs_server()
    yield endpoint
    stop()


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[str]:
    """URL of fake-gcs-server, Google Cloud Storage's emulator, on 127.0.0.1 for the session."""
    from tests.support.gcsserver import start_fake_gcs

    endpoint, stop = start_fake_gcs()
    yield endpoint
    stop()


@pytest.fixture(scope="session")
def gcs_bucket(gcs_endpoint) -> str:
    """One bucket on the emulator for the session; each test uses its own prefix."""
    from tests.support.gcsserver import create_bucket

    return create_bucket(gcs_endpoint, "rotsink-contract")


@pytest.fixture(scope="session")
def azure_endpoint() -> Iterator[str]:
    """URL of Azurite, Azure Storage's emulator (Blob service), on 127.0.0.1 for the session."""
    from tests.support.azurite import start_azurite

    endpoint, stop = start_azurite()
    yield endpoint
    stop()


@pytest.fixture(scope="session")
def azure_container(azure_endpoint) -> str:
    """One container on the emulator for the session; each test uses its own prefix."""
    from tests.support.azurite import create_container

    return create_container(azure_endpoint, "rotsink-contract")


@pytest.fixture(scope="session")
def seaweedfs_catalog() -> Iterator[tuple[str, str]]:
    """SeaweedFS with its Iceberg REST catalog on 127.0.0.1: ``(S3 URL, catalog URL)`` (a
    server of its own, so tests of the plain S3 gateway are not slowed by it)."""
    from tests.support.s3server import start_seaweedfs_with_catalog

    endpoint, catalog, stop = start_seaweedfs_with_catalog()
    yield endpoint, catalog
    stop()


@pytest.fixture(scope="session")
def iceberg_rest() -> Iterator[str]:
    """URL of Apache Iceberg's own REST catalog server on 127.0.0.1 for the session."""
    from tests.support.iceberg_rest import start_iceberg_rest

    url, stop = start_iceberg_rest()
    yield url
    stop()


@pytest.fixture(scope="session")
def hive_metastore() -> Iterator[str]:
    """Thrift URI of Apache Hive's standalone metastore on 127.0.0.1 for the session."""
    from tests.support.metastore import start_hive_metastore

    uri, stop = start_hive_metastore()
    yield uri
    stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """SQLAlchemy URI of a PostgreSQL server on 127.0.0.1 for the session (SQL catalogs)."""
    from tests.support.postgres import start_postgres

    uri, stop = start_postgres()
    yield uri
    stop()


@pytest.fixture
def s3_server(request) -> LocalS3:
    """The local S3 server of a test: moto, or the one a test names through indirect
    parametrisation, ``@pytest.mark.parametrize("s3_server", SERVERS, indirect=True)``."""
    from tests.support.s3server import LocalS3

    name = getattr(request, "param", "moto")
    fixture = {"moto": "s3_endpoint", "seaweedfs": "seaweedfs_endpoint"}[name]
    return LocalS3(name, request.getfixturevalue(fixture))


@pytest.fixture(scope="session")
def s3_bucket(s3_endpoint) -> str:
    """One bucket on the local S3 server for the session; each test uses its own prefix."""
    from tests.support.s3server import create_bucket

    return create_bucket(s3_endpoint, "rotsink-contract")


@pytest.fixture(scope="session")
def seaweedfs_bucket(seaweedfs_endpoint) -> str:
    """The same on SeaweedFS."""
    from tests.support.s3server import create_bucket

    return create_bucket(seaweedfs_endpoint, "rotsink-contract")


class Shown:
    """A test's figures (a crash loop's summary, files written): printed as they come when
    output is not captured, and again at the end of the run from every test process (xdist's
    workers' output is not shown)."""

    def __init__(self, capsys, record_property) -> None:
        self.capsys, self.record_property = capsys, record_property

    def __call__(self, text: str) -> None:
        with self.capsys.disabled():
            print(text)
        self.record_property("figures", text)

    def live(self):
        """Output shown as it comes, in this process (a crash loop's lives)."""
        return self.capsys.disabled()


@pytest.fixture
def shown(capsys, record_property) -> Shown:
    return Shown(capsys, record_property)


def pytest_terminal_summary(terminalreporter) -> None:
    """The figures the tests recorded (``shown``), after the run."""
    recorded = [(report.nodeid, text) for key in ("passed", "failed")
                for report in terminalreporter.stats.get(key, [])
                if getattr(report, "when", "call") == "call"
                for name, text in getattr(report, "user_properties", []) if name == "figures"]
    if recorded:
        terminalreporter.section("figures")
        for nodeid, text in recorded:
            terminalreporter.write_line(f"{nodeid}:\n{text.strip()}")

