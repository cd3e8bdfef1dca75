"""A loopback HTTP proxy in front of a local object store (the S3 servers, fake-gcs-server,
Azurite) that fails, delays and records requests.

Tests point ``fs.endpoint_url`` (or s3a's endpoint) at the proxy and arm a rule such as
"answer the next 5 PUTs whose path contains ``_spark_metadata`` with 503": the request never
reaches the server, as when a store or the network fails mid-commit. Benchmarks give it a
``latency_s`` that every request waits before it is forwarded (a region's S3 answers in
10-30 ms; loopback in well under 1), and read what was sent from ``requests``: each
request's S3 operation, path and when it started and ended. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass
class FailRule:
    method: str
    path_contains: str
    remaining: int
    status: int = 503


@dataclass(frozen=True)
class Sent:
    """One request the proxy forwarded: its S3 operation (:func:`operation`), the path with
    its query, and the wall-clock time (``time.time()``, as Spark's progress reports it)
    when it arrived and when its answer was sent."""

    operation: str
    path: str
    started: float
    ended: float


def operation(method: str, path: str, headers) -> str:
    """The S3 operation of a request, by its method, query and headers.

    >>> operation("GET", "/b?list-type=2&prefix=x%2F", {})
    'LIST'
    >>> operation("PUT", "/b/k", {"x-amz-copy-source": "/b/j"})
    'COPY'
    >>> operation("POST", "/b?delete", {}), operation("PUT", "/b/k?partNumber=1&uploadId=u", {})
    ('DELETE', 'UPLOAD')
    """
    query = urlsplit(path).query
    if method == "GET":
        return "LIST" if "list-type" in query or "uploads" in query else "GET"
    if method == "PUT":
        if "partNumber" in query:
            return "UPLOAD"
        return "COPY" if "x-amz-copy-source" in {k.lower() for k in headers} else "PUT"
    if method == "POST":
        return "DELETE" if query.startswith("delete") else "UPLOAD"  # create/complete an MPU
    return method  # HEAD, DELETE


def gcs_operation(method: str, path: str, headers) -> str:
    """The operation of a Cloud Storage JSON API request (rotsink's, gcs-connector's).

    >>> gcs_operation("GET", "/storage/v1/b/b/o?prefix=x", {})
    'LIST'
    >>> gcs_operation("POST", "/storage/v1/b/b/o/k/compose", {})
    'COMPOSE'
    >>> gcs_operation("POST", "/upload/storage/v1/b/b/o?uploadType=multipart", {})
    'PUT'
    """
    route, _, query = path.partition("?")
    if method == "GET":
        if route.endswith("/o"):
            return "LIST"
        return "GET" if "alt=media" in query else "HEAD"
    if method == "POST":
        for verb in ("compose", "rewriteTo", "copyTo"):
            if f"/{verb}/" in route + "/":
                return "COMPOSE" if verb == "compose" else "COPY"
        return "PUT" if route.startswith("/upload/") else method
    return "UPLOAD" if method == "PUT" else method  # a resumable upload's chunk; DELETE


def azure_operation(method: str, path: str, headers) -> str:
    """The operation of an Azure Blob API request (rotsink's, hadoop-azure's).

    >>> azure_operation("GET", "/acct/c?restype=container&comp=list", {})
    'LIST'
    >>> azure_operation("PUT", "/acct/c/k?comp=block&blockid=x", {"x-ms-copy-source": "u"})
    'COPY'
    >>> azure_operation("PUT", "/acct/c/k?comp=blocklist", {})
    'COMMIT'
    """
    query = urlsplit(path).query
    names = {k.lower() for k in headers}
    if method == "GET":
        return "LIST" if "comp=list" in query else "GET"
    if method == "PUT":
        if "comp=blocklist" in query:
            return "COMMIT"
        if "comp=block" in query:
            return "COPY" if "x-ms-copy-source" in names else "UPLOAD"
        return "COPY" if "x-ms-copy-source" in names else "PUT"
    return method  # HEAD, DELETE


def sequential(requests: list[Sent]) -> int:
    """The longest chain of ``requests`` that ran one after another (each starting after the
    one before it ended): how many round trips their caller waited for, whatever ran in
    parallel beside them. Greedy by end time, which finds the longest such chain.

    >>> a, b, c = Sent("GET", "a", 0, 1), Sent("GET", "b", 0.5, 1.5), Sent("PUT", "c", 2, 3)
    >>> sequential([a, b, c]), sequential([a, b])
    (2, 1)
    """
    chain, free_at = 0, float("-inf")
    for request in sorted(requests, key=lambda r: r.ended):
        if request.started >= free_at:
            chain, free_at = chain + 1, request.ended
    return chain


def _read_chunked(stream) -> bytes:
    """A request body sent with ``Transfer-Encoding: chunked``, whole."""
    chunks: list[bytes] = []
    while True:
        size = int(stream.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while stream.readline().strip():  # trailers, up to the blank line
                pass
            return b"".join(chunks)
        chunks.append(stream.read(size))
        stream.readline()  # the CRLF after the chunk


class FailingProxy:
    """Forwards every request to ``target`` after ``latency_s``, unless an armed rule
    matches it."""

    def __init__(self, target: str, *, latency_s: float = 0.0, port: int = 0,
                 classify: Callable[[str, str, Any], str] | None = None) -> None:
        parts = urlsplit(target)
        assert parts.hostname in ("127.0.0.1", "localhost"), "tests only talk to loopback"
        self.target = (parts.hostname, parts.port)
        self.latency_s = latency_s
        self.classify = classify or operation  # a request's operation, S3's by default
        self.rules: list[FailRule] = []
        self.failed: list[str] = []
        self.seen: list[str] = []  # every request, "METHOD path", for counting
        self.requests: list[Sent] = []  # every forwarded request, in the order answered
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
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
            # Headers and body leave in two writes: with Nagle's algorithm the body waits
            # for the client's delayed ACK of the headers, up to 40 ms a request.
            disable_nagle_algorithm = True

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _forward(self) -> None:
                started = time.time()
                headers = dict(self.headers.items())  # Host unchanged: it is signed
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    whole = _read_chunked(self.rfile)  # gcs-connector's uploads
                    headers = {k: v for k, v in headers.items()
                               if k.lower() != "transfer-encoding"}
                    headers["Content-Length"] = str(len(whole))
                    body: bytes | None = whole
                else:
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
                if proxy.latency_s:
                    time.sleep(proxy.latency_s)
                upstream = http.client.HTTPConnection(*proxy.target, timeout=60)
                upstream.connect()
                upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                upstream.close()
                # Recorded before the client has its answer, so that a caller counting
                # after its call returned finds it
                sent = Sent(proxy.classify(self.command, self.path, self.headers.keys()),
                            self.path, started, time.time())
                with proxy.lock:
                    proxy.requests.append(sent)
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

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler
