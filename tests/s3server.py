"""A local S3-compatible server for tests: moto's, in this process, on 127.0.0.1.

Tests import the fixture with ``from tests.s3server import s3_endpoint  # noqa: F401``. Only
dummy credentials are set, and only the loopback address is ever contacted.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator

import pytest

_DUMMY_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
              "AWS_DEFAULT_REGION": "us-east-1"}


def start_moto_server() -> tuple[str, Callable[[], None]]:
    """Start moto's threaded server on a free loopback port; return its URL and a stop function.

    Requests are handled one at a time: moto checks ``If-None-Match`` and then stores, in two
    steps, so two concurrent conditional writes to one key could both succeed on it (seen
    with racing CompleteMultipartUploads), where S3 lets exactly one succeed. Serializing the
    application makes each request atomic, as on S3; connections stay concurrent.
    """
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    wsgi_server = server._server  # werkzeug's server: its handlers call ``.app`` per request
    app, lock = wsgi_server.app, threading.Lock()

    def one_at_a_time(environ, start_response):
        with lock:
            return list(app(environ, start_response))

    wsgi_server.app = one_at_a_time
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}", server.stop


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of a moto S3 server shared by the session, with dummy credentials in the
    environment (never real ones: session tokens and profiles are removed)."""
    saved = {k: os.environ.get(k) for k in (*_DUMMY_ENV, "AWS_SESSION_TOKEN", "AWS_PROFILE")}
    os.environ.update(_DUMMY_ENV)
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.pop("AWS_PROFILE", None)
    endpoint, stop = start_moto_server()
    try:
        yield endpoint
    finally:
        stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
