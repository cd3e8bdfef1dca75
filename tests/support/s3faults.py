"""A loopback HTTP proxy in front of the local S3 server that fails chosen requests.

Tests point ``fs.endpoint_url`` at the proxy and arm a rule such as "answer the next 5
PUTs whose path contains ``_spark_metadata`` with 503": the request never reaches the
server, as when a store or the network fails mid-commit. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class FailRule:
    method: str
    path_contains: str
    remaining: int
    status: int = 503


class FailingProxy:
    """Forwards every request to ``target`` unless an armed rule matches it."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        assert parts.hostname in ("127.0.0.1", "localhost"), "tests only talk to loopback"
        self.target = (parts.hostname, parts.port)
        self.rules: list[FailRule] = []
        self.failed: list[str] = []
        self.seen: list[str] = []  # every request, "METHOD path", for counting
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fail(self, method: str, path_contains: str, times: int, status: int = 503) -> None:
        with self.lock:
            self.rules.append(FailRule(method, path_contains, times, status))

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _matching_rule(self, method: str, path: str) -> FailRule | None:
        with self.lock:
            self.seen.append(f"{method} {path}")
            for rule in self.rules:
                if rule.remaining and rule.method == method and rule.path_contains in path:
                    rule.remaining -= 1
                    self.failed.append(f"{method} {path}")
                    return rule
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                rule = proxy._matching_rule(self.command, self.path)
                if rule is not None:
                    payload = b"<Error><Code>ServiceUnavailable</Code></Error>"
                    self.send_response(rule.status)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection(*proxy.target, timeout=60)
                headers = dict(self.headers.items())  # Host unchanged: it is signed
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                self.send_response(response.status)
                # A HEAD has no body but reports the object's length: keep upstream's.
                dropped = ("transfer-encoding", "connection") + (
                    () if self.command == "HEAD" else ("content-length",))
                for key, value in response.getheaders():
                    if key.lower() not in dropped:
                        self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler
