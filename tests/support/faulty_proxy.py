"""A loopback HTTP proxy in front of a local object store (the S3 servers, fake-gcs-server,
Azurite) that fails, delays and records requests.

Tests point ``fs.endpoint_url`` (or s3a's endpoint) at the proxy and arm a rule such as
"answer the next 5 PUTs whose path contains ``_spark_metadata`` with 503": the request never
reaches the server, as when a store or the network fails mid-commit. Or they let it fail a
random share of every kind of request (:meth:`FailingProxy.chaos`), as a store does on a bad
day, each fault one of :data:`FAULTS`. Benchmarks give it a
``latency_s`` that every request waits before it is forwarded (a region's S3 answers in
10-30 ms; loopback in well under 1), and read what was sent from ``requests``: each
request's S3 operation, path and when it started and ended. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
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
    fault: str = ""  # "reset", "reset-after" or "slow" (see FAULTS) instead of the status
    body_contains: bytes = b""  # and in the body (Cloud Storage names an upload's object there)
    slow_s: float = 0.0  # how late a "slow" answer is


# What a store or the network does to a request on a bad day: answer 500 or 503 (S3's "slow
# down", Azure's "server busy") or 429 (Cloud Storage's; Azure and S3 throttle with 503)
# without doing it; reset the connection before the request reaches the store, or after the
# store did it (the answer lost: a retry of an exclusive create then finds its own object);
# answer late (after ``slow_s``); or an outage: 503 to every request for a while, longer than
# the clients retry, so that the error reaches rotsink (Spark then aborts the batch).
FAULTS = ("500", "503", "429", "reset", "reset-after", "slow", "outage")
STORE_FAULTS = {"s3": tuple(f for f in FAULTS if f != "429"), "gcs": FAULTS,
                "azure": tuple(f for f in FAULTS if f != "429")}


@dataclass
class Chaos:
    """A random ``share`` of requests get one of ``faults`` (seeded: a run is repeatable as far
    as the order of requests is)."""

    share: float
    faults: tuple[str, ...] = FAULTS
    seed: int = 7
    slow_s: float = 1.5
    outage_requests: int = 12  # more than any client's attempts at one request

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.outage_left = 0

    def fault(self) -> str | None:
        if self.outage_left:
            self.outage_left -= 1
            return "outage"
        if self.rng.random() >= self.share:
            return None
        fault = self.rng.choice(self.faults)
        if fault == "outage":
            self.outage_left = self.outage_requests - 1
        return fault


@dataclass(frozen=True)
class Sent:
    """One request the proxy forwarded: its S3 operation (:func:`operation`), the path with
    its query, and the wall-clock time (``time.time()``, as Spark's progress reports it)
    when it arrived and when its answer was sent, and the store's status."""

    operation: str
    path: str
    started: float
    ended: float
    status: int = 0


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


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # a connection the proxy reset on purpose


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
        self.random_faults: Chaos | None = None
        self.injected: Counter = Counter()  # (operation, fault) -> how many
        self.server = _QuietServer(("127.0.0.1", port), self._handler())
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fail(self, method: str, path_contains: str, times: int, status: int = 503, *,
             fault: str = "", body_contains: bytes = b"", slow_s: float = 0.0) -> None:
        """Answer the next ``times`` requests ``method`` of a path containing
        ``path_contains`` (and a body containing ``body_contains``) with ``status``, or with
        ``fault``: a reset before the store sees the request, or after it did it
        (``reset-after``), or the store's answer ``slow_s`` late (``slow``: the request
        reaches the store then)."""
        with self.lock:
            self.rules.append(FailRule(method, path_contains, times, status, fault,
                                       body_contains, slow_s))

    def chaos(self, chaos: Chaos | None) -> None:
        """Fail a random share of every request from now on (None: stop)."""
        with self.lock:
            self.random_faults = chaos

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.random_faults = None

    def _random_fault(self, method: str, path: str, headers) -> str | None:
        with self.lock:
            fault = None if self.random_faults is None else self.random_faults.fault()
            if fault is not None:
                self.injected[(self.classify(method, path, headers), fault)] += 1
        return fault

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _matching_rule(self, method: str, path: str, body: bytes | None) -> FailRule | None:
        with self.lock:
            self.seen.append(f"{method} {path}")
            for rule in self.rules:
                if rule.remaining and rule.method == method and rule.path_contains in path \
                        and rule.body_contains in (body or b""):
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
                rule = proxy._matching_rule(self.command, self.path, body)
                fault = rule.fault or str(rule.status) if rule is not None else \
                    proxy._random_fault(self.command, self.path, self.headers.keys())
                if fault is not None and (fault.isdigit() or fault == "outage"):
                    self._fail(503 if fault == "outage" else int(fault))
                    return
                if fault == "reset":
                    self._reset()
                    return
                if fault == "slow":
                    time.sleep(rule.slow_s if rule is not None else
                               proxy.random_faults.slow_s if proxy.random_faults else 0.0)
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
                            self.path, started, time.time(), response.status)
                with proxy.lock:
                    proxy.requests.append(sent)
                if fault == "reset-after":  # the store did it; its answer is lost
                    self._reset()
                    return
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

            def _fail(self, status: int) -> None:
                payload = b"<Error><Code>ServiceUnavailable</Code></Error>"
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _reset(self) -> None:
                """Close the client's connection with a TCP reset, answering nothing."""
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def finish(self) -> None:
                try:
                    super().finish()
                except OSError:
                    pass  # a connection reset on purpose

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler
