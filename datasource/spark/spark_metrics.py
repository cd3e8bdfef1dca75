"""rotsink's metrics in Spark's metrics system, beside Spark's own streaming metrics.

When a session has Spark's streaming metrics on (``spark.sql.streaming.metricsEnabled``),
rotsink's start of a query (:mod:`datasource.writing.writer_calls`) gives it a mailbox
(:mod:`commit_protocol.metrics.mailbox`, where each commit leaves the query's metrics) and
registers a metrics source ``rotsink.<query name>`` in the driver's metrics system, so every
sink the cluster configured carries them: JMX, the UI's ``PrometheusServlet``, CSV, Graphite.
Each gauge is asked for its value when a metrics sink reads it (a scrape, a reporter's
period), and reads the mailbox again at most once a second: nothing of this runs at a
micro-batch of the query but the commit's writing of the mailbox. A Spark listener in the
same process removes the source when the query ends, as Spark does with its own.

Why this way, and not Spark's own route: PySpark gives a Python sink no custom metric
(``PythonStreamingSinkCommitRunner`` returns nothing to the JVM but success), Spark's commit
runs in a Python worker that has no JVM to talk to, and a source of Spark's metrics system is
a JVM object: ``org.apache.spark.metrics.source.Source``, which the user's process
implements through py4j's callback server (as PySpark's own listeners are), over a registry
of Dropwizard gauges (``com.codahale.metrics.Gauge``, on Spark's classpath) implemented the
same way: no compiler, no jar. The
metrics system itself is private to Spark (``SparkEnv.metricsSystem`` is ``private[spark]``)
and py4j cannot call a method of ``SparkEnv`` (its reflection loads every method's types,
and one of them is a shaded protobuf class Spark's jars do not hold), so it is read through
Java's reflection on the field. A source's registry is copied when the source is registered,
so every gauge is made first.

Spark Connect runs the query in a server with no Python of the user's: there, the metrics are
off (docs/operations.md).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from commit_protocol.metrics import METRICS, gauges_of
from commit_protocol.metrics import mailbox as mailboxes
from commit_protocol.metrics.names import OLDEST_INVISIBLE, VISIBILITY_LAG
from datasource.options.names import METRICS_MAILBOX

logger = logging.getLogger("rotsink.metrics")
METRICS_ENABLED = "spark.sql.streaming.metricsEnabled"
SOURCE = "rotsink"


def enabled(session: Any) -> bool:
    """Whether a query of ``session`` publishes rotsink's metrics: a classic session (one
    with a JVM in this process) whose streaming metrics are on."""
    if getattr(session, "_jvm", None) is None:
        return False
    return str(session.conf.get(METRICS_ENABLED, "false")).strip().lower() == "true"


def start_watched(session: Any, writer: Any, start: Callable[[], Any],
                  options: Mapping[str, str]) -> Any:
    """``start()`` a rotsink query of ``writer`` (its ``options`` as given), watched when
    ``session``'s streaming metrics are on."""
    if not enabled(session):
        return start()
    mailbox = tempfile.mkdtemp(prefix="rotsink-metrics-")
    writer.option(METRICS_MAILBOX, mailbox)
    try:
        query = start()
    except BaseException:
        shutil.rmtree(mailbox, ignore_errors=True)
        raise
    try:
        _Watcher.of(session).add(session, query, mailbox, logged_gauges(options))
    except Exception as e:  # the metrics never cost the query
        logger.warning("query %s runs without rotsink's metrics: %s", query.name or query.id, e)
    return query


def logged_gauges(options: Mapping[str, str]) -> dict[str, int]:
    """The gauges the output's log and table give before the query commits (a restarted
    query's totals, its last commit's time and batch, its open files, the table's version),
    so that nothing reads 0 from a restart to the next commit; empty for a new output, or
    one this process cannot read."""
    from commit_protocol.log.metadata_log import open_committed
    from commit_protocol.storage import open_storage
    from commit_protocol.vocabulary.naming import LOG_DIR
    from datasource.options.sink import parse_sink_options

    try:
        config = parse_sink_options(options)
        storage = open_storage(config.path, config.fs_options)
        committed = open_committed(storage)
    except Exception as e:  # the query's own start names a bad option; the log, its commit
        logger.info("rotsink's metrics start at 0: the output's log was not read (%s)", e)
        return {}
    if committed is None:
        return {}
    log, latest, state = committed
    gauges = gauges_of(state)
    if "lastCommit-timestampMs" not in gauges:  # a state written before it carried the time
        gauges["lastCommit-timestampMs"] = next(
            (f.mtime_ms for f in storage.list(LOG_DIR) if f.path == log.path_of(latest)), 0)
    try:
        version = table_version(storage, state, config.fs_options)
    except Exception as e:  # the commit reports the table's own failure
        logger.info("rotsink's metric tableVersion starts unknown: the table was not read "
                    "(%s)", e)
        version = None
    if version is not None:
        gauges["tableVersion"] = version
    return gauges


def table_version(storage: Any, state: Any, fs_options: dict[str, str]) -> int | None:
    """The version (Delta) or sequence number (Iceberg) of the table following the output
    whose last committed state is ``state``; None without a table."""
    from commit_protocol.tables import table_format_of
    from commit_protocol.tables.recorded import table_config

    config = table_config(storage, state, fs_options)
    if config is None or config.table_format is None:
        return None
    return table_format_of(config).open(storage, config).version()


class _JavaObject:
    """``java.lang.Object``'s methods, which py4j hands to a Python object that implements a
    Java interface too (the metrics system finds a source to remove by ``equals``)."""

    def equals(self, other: Any) -> bool:
        return other is self

    def hashCode(self) -> int:  # noqa: N802 (Java's names)
        return id(self) & 0x7FFFFFFF

    def toString(self) -> str:  # noqa: N802
        return f"rotsink {type(self).__name__}"


class QueryValues:
    """A query's values as its last commit left them (over those of the log at its start),
    read again from the mailbox at most every ``REREAD_S`` seconds."""

    REREAD_S = 1.0

    def __init__(self, mailbox: str, logged: dict[str, int]) -> None:
        self.mailbox, self.logged = mailbox, logged
        self.values: dict[str, int] = dict(logged)
        self.read_at = float("-inf")
        self.lock = threading.Lock()

    def value(self, metric: str) -> int:
        now = time.monotonic()
        with self.lock:
            if now - self.read_at >= self.REREAD_S:
                self.values = {**self.logged, **mailboxes.read(self.mailbox)}
                self.read_at = now
            values = self.values
        if metric == VISIBILITY_LAG:  # as old as the moment it is read
            oldest = values.get(OLDEST_INVISIBLE, 0)
            return max(0, int(time.time() * 1000) - oldest) if oldest else 0
        return values.get(metric, -1 if metric == "batchId" else 0)


class _Gauge(_JavaObject):
    """One metric: a Dropwizard gauge whose value the JVM asks this process for when a
    metrics sink reads it (a scrape, a reporter's period), never at a batch."""

    def __init__(self, values: QueryValues, metric: str) -> None:
        self.values, self.metric = values, metric

    def getValue(self) -> int:  # noqa: N802
        return self.values.value(self.metric)

    class Java:
        implements = ["com.codahale.metrics.Gauge"]


class QuerySource(_JavaObject):
    """One query's source in Spark's metrics system: a gauge per metric."""

    def __init__(self, jvm: Any, name: str, values: QueryValues) -> None:
        self.name = name
        self.registry = jvm.com.codahale.metrics.MetricRegistry()
        for metric in METRICS:
            self.registry.register(metric, _Gauge(values, metric))

    # org.apache.spark.metrics.source.Source, called by the metrics system through py4j
    def sourceName(self) -> str:  # noqa: N802
        return self.name

    def metricRegistry(self) -> Any:  # noqa: N802
        return self.registry

    class Java:
        implements = ["org.apache.spark.metrics.source.Source"]


class _Watcher:
    """The rotsink queries of one Spark application, and the listeners (one per session:
    Spark tells a session's listeners of its own queries only) that remove them."""

    _of: dict[str, _Watcher] = {}
    _lock = threading.Lock()

    def __init__(self, session: Any) -> None:
        from pyspark.java_gateway import ensure_callback_server_started

        context = session.sparkContext
        self.jvm = context._jvm
        ensure_callback_server_started(context._gateway)
        field = self.jvm.java.lang.Class.forName("org.apache.spark.SparkEnv") \
            .getDeclaredField("metricsSystem")
        field.setAccessible(True)
        self.metrics_system = field.get(context._jsc.sc().env())
        self.queries: dict[str, tuple[QuerySource, str]] = {}
        self.sessions: set[str] = set()

    @classmethod
    def of(cls, session: Any) -> _Watcher:
        with cls._lock:
            key = session.sparkContext.applicationId
            if key not in cls._of:
                cls._of[key] = cls(session)
            return cls._of[key]

    def add(self, session: Any, query: Any, mailbox: str, logged: dict[str, int]) -> None:
        with self._lock:
            listen = session._jsparkSession.sessionUUID() not in self.sessions
            self.sessions.add(session._jsparkSession.sessionUUID())
        if listen:
            session.streams.addListener(_listener(self))
        source = QuerySource(self.jvm, f"{SOURCE}.{query.name or query.id}",
                             QueryValues(mailbox, logged))
        self.metrics_system.registerSource(source)
        with self._lock:
            self.queries[str(query.id)] = (source, mailbox)
        if not query.isActive:  # ended before it was watched: no terminated event to come
            self.remove(str(query.id))

    def remove(self, query_id: str) -> None:
        with self._lock:
            watched = self.queries.pop(query_id, None)
        if watched is not None:
            source, mailbox = watched
            self.metrics_system.removeSource(source)
            shutil.rmtree(mailbox, ignore_errors=True)


def _listener(watcher: _Watcher) -> Any:
    from pyspark.sql.streaming import StreamingQueryListener

    class RotsinkMetrics(StreamingQueryListener):
        """Removes a rotsink query's source when the query ends."""

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            _quietly(watcher.remove, str(event.id))

    return RotsinkMetrics()


def _quietly(call: Callable[[str], None], query_id: str) -> None:
    """A listener's failure is a warning: Spark would print its Java trace at every event."""
    try:
        call(query_id)
    except Exception as e:
        logger.warning("rotsink's metrics of query %s were not updated: %s", query_id, e)
