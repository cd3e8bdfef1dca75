"""fake-gcs-server, Google Cloud Storage's emulator, on 127.0.0.1 for the tests.

The emulator is a Go program (``github.com/fsouza/fake-gcs-server``), built once with ``go
install`` into ``.tools-cache/bin`` below the repository (as ``.jvm-cache`` keeps the jars):
``python -m tests.support.gcsserver`` builds it where it is missing (``.ci/run`` does), and
the first test that needs it does too. It enforces ``ifGenerationMatch=0`` on uploads, serves
ranged reads, listings and ``compose``, but does not enforce a compose's precondition (the
real service does): ``tests/unit/test_storage_contract.py`` covers that with a front that
enforces it (:mod:`tests.support.gcsfront`). Only the loopback address is ever contacted,
with anonymous credentials.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.support.emulator import serve
from tests.support.install_once import install_once

# gcsfs's default client asks the gRPC control API, which the emulator does not serve, for each
# bucket's layout, retrying without end (pyiceberg's file IO goes through it): off for every
# process started from here, before gcsfs is imported (tests/conftest.py sets it too).
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"

MODULE = "github.com/fsouza/fake-gcs-server"
VERSION = "v1.56.1"  # the emulator the tests were written against
ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools-cache" / "bin"
OPTIONS = {"token": "anon"}  # with "endpoint_url": the sink's fs.* options for the emulator


def binary(*, build: bool = True) -> Path:
    """The emulator's executable: ``ROTSINK_FAKE_GCS``, or the one built into
    ``.tools-cache/bin`` (built now when ``build`` and Go is there)."""
    named = os.environ.get("ROTSINK_FAKE_GCS")
    if named:
        return Path(named)
    built = TOOLS / "fake-gcs-server"
    if build:
        install_once(built, _go_install)
    return built


def _go_install() -> None:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the GCS tests need fake-gcs-server, built with Go (not found): "
                           "install Go (apt-get install golang, or go.dev), then run "
                           "python -m tests.support.gcsserver")
    # built into a folder of its own, then renamed into place: go copies the binary into
    # GOBIN across filesystems, and an interrupted copy must not look like a build
    partial = TOOLS / ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    subprocess.run([go, "install", f"{MODULE}@{VERSION}"], check=True,
                   env={**os.environ, "GOBIN": str(partial)})
    os.replace(partial / "fake-gcs-server", TOOLS / "fake-gcs-server")
    partial.rmdir()


def start_fake_gcs() -> tuple[str, Callable[[], None]]:
    """A fresh emulator (objects in memory) on a free port of 127.0.0.1: its URL and a
    function that stops it."""
    from tests.support.connect_server import free_port

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    stop = serve("fake-gcs-server",
                 [str(binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                  "-backend", "memory", "-public-host", f"127.0.0.1:{port}", "-log-level",
                  "error"],
                 endpoint, f"{endpoint}/storage/v1/b")
    return endpoint, stop


def create_bucket(endpoint: str, bucket: str) -> str:
    """Create ``bucket`` on the emulator at ``endpoint``; returns its name."""
    request = urllib.request.Request(f"{endpoint}/storage/v1/b?project=rotsink-tests",
                                     data=json.dumps({"name": bucket}).encode(),
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).close()
    return bucket


if __name__ == "__main__":
    print(f"fake-gcs-server: {binary()}")
    sys.exit(0)
