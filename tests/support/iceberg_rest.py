"""Apache Iceberg's own REST catalog server for the catalog tests, on 127.0.0.1.

``org.apache.iceberg.rest.RESTCatalogServer`` (iceberg-open-api's test fixtures, fetched by
:mod:`tests.support.jvm`): the server of Iceberg's REST compatibility kit and of its
``rest-fixture`` image, serving the REST spec in front of Iceberg's ``JdbcCatalog``, here on a
SQLite file in a temp directory, and writing table metadata with Hadoop's FileIO (local
files: the outputs of its tests are local). Configured by ``CATALOG_*`` environment
variables as the image is (``CATALOG_URI`` -> ``uri``, ``CATALOG_REST_PORT`` -> ``rest.port``).
Jetty listens on every interface of the port (the server names no host); only the loopback
address is ever contacted.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from datasource.commands.session import check_java
from tests.support.jvm import iceberg_rest_classpath


def start_iceberg_rest(*, timeout_s: float = 60.0) -> tuple[str, Callable[[], None]]:
    """Start the server on a free port; its URL once ``/v1/config`` answers, and a stop
    function that ends it and removes its files."""
    check_java()
    classpath = iceberg_rest_classpath()
    workdir = Path(tempfile.mkdtemp(prefix="rotsink-iceberg-rest-"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "CATALOG_URI": f"jdbc:sqlite:file:{workdir}/catalog.db",
           "CATALOG_WAREHOUSE": f"file://{workdir}/warehouse", "CATALOG_REST_PORT": str(port),
           "CATALOG_JDBC_SCHEMA__VERSION": "V1"}
    log = open(workdir / "server.log", "w")
    process = subprocess.Popen(["java", "-Xmx256m", "-cp", classpath,
                                "org.apache.iceberg.rest.RESTCatalogServer"],
                               env=env, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)

    def stop() -> None:
        process.kill()
        process.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/v1/config", timeout=2):
                return url, stop
        except OSError as e:
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (workdir / "server.log").read_text(errors="replace")[-3000:]
                stop()
                raise RuntimeError(f"Iceberg's REST catalog server did not start ({e}):\n"
                                   f"{tail}") from None
            time.sleep(0.2)
