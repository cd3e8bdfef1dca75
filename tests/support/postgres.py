"""A PostgreSQL server for the SQL catalog tests (pyiceberg's ``SqlCatalog`` beyond SQLite),
on 127.0.0.1, from the binaries :func:`tests.support.jvm.postgres_binaries` fetches.

PostgreSQL refuses to run as root, as CI machines and containers often are: there the
server runs as ``nobody`` (``setpriv``), its data directory handed to that user. Trust
authentication on the loopback address only; ``fsync`` off (a test's server, dropped after
the session).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.emulator import end
from tests.support.jvm import postgres_binaries

USER = "rotsink"


def start_postgres(*, timeout_s: float = 60.0) -> tuple[str, Callable[[], None]]:
    """Start a server on a free port: its SQLAlchemy URI (``postgresql+psycopg2://``, what
    ``pip install 'pyiceberg[sql-postgres]'`` gives a user) once it accepts connections, and a
    stop function that ends it and removes its files."""
    dist = postgres_binaries()
    workdir = Path(tempfile.mkdtemp(prefix="rotsink-postgres-"))
    data = workdir / "data"
    data.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        for path in (workdir, data):
            shutil.chown(path, "nobody")
        as_user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        # a checkout under a folder only root may enter (/root) is out of nobody's reach:
        # the server runs from links to its files in the temp folder (a copy across devices)
        dist = Path(shutil.copytree(dist, workdir / "dist", symlinks=True,
                                    copy_function=_link_or_copy))
    subprocess.run([*as_user, str(dist / "bin" / "initdb"), "-D", str(data), "-U", USER,
                    "--auth=trust", "-E", "UTF8", "--no-sync"], check=True,
                   capture_output=True, stdin=subprocess.DEVNULL)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(workdir / "server.log", "w")
    process = subprocess.Popen(
        [*as_user, str(dist / "bin" / "postgres"), "-D", str(data), "-h", "127.0.0.1",
         "-p", str(port), "-k", str(data), "-c", "fsync=off", "-c", "max_connections=200"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop() -> None:
        end(process)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)

    deadline = time.monotonic() + timeout_s
    while "ready to accept connections" not in (workdir / "server.log").read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            tail = (workdir / "server.log").read_text(errors="replace")[-3000:]
            stop()
            raise RuntimeError(f"PostgreSQL did not start:\n{tail}")
        time.sleep(0.1)
    return f"postgresql+psycopg2://{USER}@127.0.0.1:{port}/postgres", stop


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
