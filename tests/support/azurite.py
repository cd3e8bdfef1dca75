"""Azurite, Azure Storage's emulator (its Blob service), on 127.0.0.1 for the tests.

Azurite is a Node.js program (npm ``azurite``), installed once with ``npm install`` into
``.tools-cache/npm`` below the repository (as ``.jvm-cache`` keeps the jars):
``python -m tests.support.azurite`` installs it where it is missing (``.ci/run`` does), and the
first test that needs it does too. It serves the Blob API of a flat (no hierarchical
namespace) account, ``devstoreaccount1`` with its published key, and enforces ``If-None-Match:
*`` on Put Blob and Put Block List; it has no DFS endpoint (``abfs://`` in Hadoop's sense), so
Spark reads it through hadoop-azure's ``wasb://``. Only the loopback address is ever contacted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.emulator import serve
from tests.support.install_once import install_once

PACKAGE = "azurite"
VERSION = "3.37.0"  # the emulator the tests were written against
ROOT = Path(__file__).resolve().parents[2]
PREFIX = ROOT / ".tools-cache" / "npm"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (published in its README; no secret)
KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
       "KBHBeksoGMGw==")


def binary(*, install: bool = True) -> Path:
    """The emulator's blob service: ``ROTSINK_AZURITE``, or the one npm installed into
    ``.tools-cache/npm`` (installed now when ``install`` and npm is there)."""
    named = os.environ.get("ROTSINK_AZURITE")
    if named:
        return Path(named)
    installed = PREFIX / "node_modules" / ".bin" / "azurite-blob"
    if install:
        install_once(PREFIX / f"installed-{PACKAGE}-{VERSION}", _npm_install)
    return installed


def _npm_install() -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("the Azure tests need Azurite, installed with npm (not found): "
                           "install Node.js, then run python -m tests.support.azurite")
    shutil.rmtree(PREFIX / "node_modules", ignore_errors=True)  # what a broken install left
    PREFIX.mkdir(parents=True, exist_ok=True)
    subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix",
                    str(PREFIX), f"{PACKAGE}@{VERSION}"], check=True)
    (PREFIX / f"installed-{PACKAGE}-{VERSION}").touch()


def connection_string(endpoint: str) -> str:
    """The connection string of the emulator's account at ``endpoint``."""
    return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={endpoint}/{ACCOUNT};")


def options(endpoint: str) -> dict[str, str]:
    """The sink's ``fs.*`` options (adlfs's keywords) for the emulator at ``endpoint``."""
    return {"connection_string": connection_string(endpoint)}


def start_azurite(port: int = 0) -> tuple[str, Callable[[], None]]:
    """A fresh emulator (blobs in memory) on ``port`` of 127.0.0.1 (a free one when 0): its
    URL (without the account) and a function that stops it."""
    from tests.support.connect_server import free_port

    port = port or free_port()
    endpoint = f"http://127.0.0.1:{port}"
    stop = serve("Azurite",
                 [str(binary()), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                  "--inMemoryPersistence", "--skipApiVersionCheck", "--silent",
                  "--disableTelemetry"],
                 endpoint, f"{endpoint}/{ACCOUNT}?comp=list")
    return endpoint, stop


def create_container(endpoint: str, container: str) -> str:
    """Create ``container`` on the emulator at ``endpoint``; returns its name."""
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(connection_string(endpoint)) as service:
        service.create_container(container)
    return container


if __name__ == "__main__":
    print(f"Azurite: {binary()}")
    sys.exit(0)
