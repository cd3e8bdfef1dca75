"""A loopback front for fake-gcs-server that enforces what the real service enforces and the
emulator does not: a ``compose`` with ``ifGenerationMatch=0`` onto a name that has a live
object is answered 412, as Cloud Storage answers it (its objects.compose reference: the
precondition applies to the destination). The check and the forwarded compose are two steps:
the tests that rely on it send one compose at a time. Everything else
is forwarded as it is (:class:`tests.support.faulty_proxy.FailingProxy`: rules to fail requests,
latency, the requests seen). Only 127.0.0.1 is ever contacted."""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

from tests.support.faulty_proxy import FailingProxy, FailRule

_COMPOSE = re.compile(r"^/storage/v1/b/([^/]+)/o/(.+)/compose$")


class GCSFront(FailingProxy):
    """fake-gcs-server at ``target``, with exclusive composes."""

    def __init__(self, target: str, **kwargs) -> None:
        super().__init__(target, **kwargs)
        self.upstream = target
        self.compose_lock = threading.Lock()
        self.refused: list[str] = []  # composes answered 412 here

    def _matching_rule(self, method: str, path: str, body: bytes | None) -> FailRule | None:
        rule = super()._matching_rule(method, path, body)
        if rule is not None or method != "POST":
            return rule
        parts = urlsplit(path)
        match = _COMPOSE.match(parts.path)
        if match is None or parse_qs(parts.query).get("ifGenerationMatch") != ["0"]:
            return None
        bucket, name = match.groups()
        with self.compose_lock:
            try:
                urllib.request.urlopen(f"{self.upstream}/storage/v1/b/{bucket}/o/{name}",
                                       timeout=30).close()
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None  # no live object: the compose goes ahead
                raise
            self.refused.append(path)
            return FailRule(method, path, 1, status=412)
