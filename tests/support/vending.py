"""An Iceberg REST catalog that vends storage credentials, for the tests: a proxy on 127.0.0.1
in front of a REST catalog that does not (SeaweedFS's), which adds to every table it answers
with (``LoadTableResult``: a load, a creation, a staged creation) the S3 credentials the REST
specification's ``config`` carries (``s3.access-key-id``, ``s3.secret-access-key``,
``s3.session-token``, ``s3.session-token-expires-at-ms``), as Polaris, Unity Catalog and S3
Tables do when the client asks with ``X-Iceberg-Access-Delegation: vended-credentials``.

Requests go to the catalog as they came, ``Host`` header included, so a SigV4 signature the
client made for the proxy's address still holds. The proxy counts what it vended.
"""

from __future__ import annotations

import gzip
import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

DELEGATION = "X-Iceberg-Access-Delegation"


@dataclass
class Vending:
    """What the proxy vends (``key``/``secret``, a ``token`` where given, valid ``ttl_s``) and
    what it did: how many table answers carried credentials, and whether each request
    asked for them."""

    key: str
    secret: str
    token: str | None = None
    ttl_s: float = 3600.0
    vended: int = 0
    asked: list[bool] = field(default_factory=list)

    def config(self) -> dict[str, str]:
        expires_ms = int((time.time() + self.ttl_s) * 1000)
        return {"s3.access-key-id": self.key, "s3.secret-access-key": self.secret,
                **({"s3.session-token": self.token} if self.token else {}),
                "s3.session-token-expires-at-ms": str(expires_ms)}


def start_vending_catalog(catalog: str, vending: Vending) -> tuple[str, Callable[[], None]]:
    """A proxy in front of the REST catalog at ``catalog`` that vends ``vending``'s
    credentials; its URL (same path) and a stop function."""
    target = urlsplit(catalog)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            vending.asked.append(self.headers.get(DELEGATION) == "vended-credentials")
            connection = http.client.HTTPConnection(target.netloc, timeout=60)
            # every header as it came (SigV4 signs some), Host and Accept-Encoding included
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            connection.request(self.command, self.path, body=body, headers=headers)
            answer = connection.getresponse()
            data = answer.read()
            if answer.getheader("Content-Encoding") == "gzip":
                data = gzip.decompress(data)
            if answer.status == 200 and data[:1] == b"{":
                document = json.loads(data)
                if "metadata" in document and "metadata-location" in document or \
                        "metadata" in document and self.command == "POST":
                    document["config"] = {**document.get("config", {}), **vending.config()}
                    vending.vended += 1
                    data = json.dumps(document).encode()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("content-length", "content-encoding", "transfer-encoding",
                                       "connection"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            connection.close()

        do_GET = do_POST = do_DELETE = do_HEAD = _forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_address[1]}{target.path}", stop
