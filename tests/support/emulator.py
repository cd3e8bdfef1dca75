"""A store's emulator as a child process on 127.0.0.1: started, waited for until it answers
over HTTP, stopped after (fake-gcs-server, Azurite)."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable


def serve(name: str, command: list[str], endpoint: str, probe: str,
          *, timeout_s: float = 60) -> Callable[[], None]:
    """Run ``command`` until ``probe`` (a URL below ``endpoint``) answers, even with an HTTP
    error; a function that stops it. Fails when the process ends first: another server on
    the port must not pass for it."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    answered = False
    while not answered and process.poll() is None and time.monotonic() < deadline:
        try:
            urllib.request.urlopen(probe, timeout=2).close()
            answered = True
        except urllib.error.HTTPError:
            answered = True  # it answers (an unsigned request may be refused)
        except OSError:
            time.sleep(0.1)
    if not answered or process.poll() is not None:
        process.kill()
        raise RuntimeError(f"{name} did not start on {endpoint}, or another server holds "
                           "its port")

    return lambda: end(process)


def end(process: subprocess.Popen) -> None:
    """Ask ``process`` to end; kill it after 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
