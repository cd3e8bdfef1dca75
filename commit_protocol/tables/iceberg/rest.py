"""A REST catalog whose requests give up: pyiceberg's ``RestCatalog`` sends every request with
no timeout, so a catalog that takes a connection and never answers (a hung server, a load
balancer that dropped the backend) would hold the driver's commit, and the micro-batch, for
ever. Here each request has a connect and a read timeout, named as Iceberg's Java REST client
names them (``rest.client.connection-timeout-ms``, ``rest.client.socket-timeout-ms``: the
properties a catalog shared with Spark's Iceberg already has); a request past them fails,
and the table step is tried again as after any catalog error
(``commit_protocol/commit/after_commit.py``). A commit that reached the catalog before its
answer was lost is found by its mark on the retry; a late one that lands after the retry
fails the catalog's own check of the table's current snapshot, and adds nothing.
"""

from __future__ import annotations

import math
from typing import Any

from pyiceberg.catalog import Catalog, CatalogType, infer_catalog_type, load_catalog
from pyiceberg.catalog.rest import RestCatalog
from requests import Session

from commit_protocol.vocabulary.errors import OptionError

CONNECT_TIMEOUT = "rest.client.connection-timeout-ms"
READ_TIMEOUT = "rest.client.socket-timeout-ms"
# A connection to a catalog on the same network takes milliseconds; a commit, a few seconds
# at worst (the catalog writes the table's metadata file before it answers).
DEFAULT_TIMEOUTS_MS = {CONNECT_TIMEOUT: 10_000, READ_TIMEOUT: 60_000}
# The parsed timeouts reach the catalog's constructor among its properties, as load_catalog
# gives them, under a key no catalog reads.
_TIMEOUTS_KEY = "rotsink.request-timeouts-s"


def request_timeouts(properties: dict[str, str]) -> tuple[float, float]:
    """(connect, read) in seconds from the catalog's properties, refusing what is not a
    positive number of milliseconds.

    >>> request_timeouts({})
    (10.0, 60.0)
    >>> request_timeouts({"rest.client.socket-timeout-ms": "1500"})
    (10.0, 1.5)
    >>> request_timeouts({"rest.client.socket-timeout-ms": "1m"})
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.OptionError: option \
table.catalog.rest.client.socket-timeout-ms='1m': a positive number of milliseconds
    """
    seconds = []
    for key, default in DEFAULT_TIMEOUTS_MS.items():
        value = properties.get(key, str(default))
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not (ms > 0 and math.isfinite(ms)):
            raise OptionError(f"option table.catalog.{key}={value!r}: a positive number of "
                              "milliseconds")
        seconds.append(ms / 1000)
    return seconds[0], seconds[1]


def is_rest(name: str, properties: dict[str, str]) -> bool:
    """Whether ``load_catalog`` would open a REST catalog: ``type=rest``, or no type and an
    ``http(s)://`` URI (pyiceberg's own inference)."""
    if "py-catalog-impl" in properties:
        return False
    given = properties.get("type")
    if given:
        return given.lower() == CatalogType.REST.value
    return infer_catalog_type(name, dict(properties)) == CatalogType.REST


def open_catalog(name: str, properties: dict[str, str]) -> Catalog:
    """The catalog ``load_catalog`` opens, a REST one with its requests' timeouts."""
    if not is_rest(name, properties):
        return load_catalog(name, **properties)
    timeouts = request_timeouts(properties)
    given = {key: value for key, value in properties.items() if key != "type"}
    return load_catalog(name, **given, **{
        "py-catalog-impl": f"{__name__}.{TimedRestCatalog.__name__}",
        _TIMEOUTS_KEY: f"{timeouts[0]},{timeouts[1]}"})


class TimedRestCatalog(RestCatalog):
    """pyiceberg's REST catalog, each request of its session with the timeouts."""

    def _create_session(self) -> Session:
        session = super()._create_session()
        connect, read = (float(s) for s in self.properties[_TIMEOUTS_KEY].split(","))
        send = session.request

        def request(method: str, url: str, **kwargs: Any) -> Any:
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = (connect, read)
            return send(method, url, **kwargs)

        session.request = request  # type: ignore[method-assign,assignment]
        return session
