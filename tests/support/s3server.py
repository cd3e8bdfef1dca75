"""A local S3-compatible server for tests: moto's, in this process, on 127.0.0.1.

The session fixture ``s3_endpoint`` (in ``tests/conftest.py``) starts it once. Only dummy
credentials are used, and only the loopback address is ever contacted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


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
    assert wsgi_server is not None  # set by start()
    app, lock = wsgi_server.app, threading.Lock()

    def one_at_a_time(environ, start_response):
        with lock:
            return list(app(environ, start_response))

    wsgi_server.app = one_at_a_time
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}", server.stop
