"""Apache Hive's standalone metastore (3.1) for the Hive catalog tests, on 127.0.0.1. (Not
``hive_metastore.py``: pytest puts this folder on ``sys.path``, where that name would hide
the Thrift bindings of the same name pyiceberg's Hive catalog imports.)

Fetched by :func:`tests.support.jvm.hive_metastore`; each start makes a fresh embedded Derby
database with Hive's schema tool (the lock tables pyiceberg's Hive catalog takes its commit
lock in come only from the schema scripts, not from the metastore's own schema creation),
then runs ``HiveMetaStore`` on a free port bound to the loopback address. Two settings point
the standalone metastore away from classes that live in Hive's query engine (a partition
expression proxy, a replication clean-up task), which it does not ship.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from datasource.commands.session import check_java
from tests.support.jvm import hive_metastore

SITE = """<configuration>
  <property><name>javax.jdo.option.ConnectionURL</name>
    <value>jdbc:derby:;databaseName={workdir}/db;create=true</value></property>
  <property><name>javax.jdo.option.ConnectionDriverName</name>
    <value>org.apache.derby.jdbc.EmbeddedDriver</value></property>
  <property><name>metastore.schema.verification</name><value>false</value></property>
  <property><name>metastore.warehouse.dir</name><value>file://{workdir}/warehouse</value>
  </property>
  <property><name>metastore.thrift.bind.host</name><value>127.0.0.1</value></property>
  <property><name>metastore.expression.proxy</name>
    <value>org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy</value></property>
  <property><name>metastore.task.threads.always</name>
    <value>org.apache.hadoop.hive.metastore.events.EventCleanerTask</value></property>
</configuration>
"""
LOG4J = """log4j.rootLogger=WARN, console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d %p %c{1}: %m%n
"""


def start_hive_metastore(*, timeout_s: float = 120.0) -> tuple[str, Callable[[], None]]:
    """Start a metastore on a free port: its Thrift URI once it accepts connections, and a
    stop function that ends it and removes its files."""
    check_java()
    classpath, home = hive_metastore()
    workdir = Path(tempfile.mkdtemp(prefix="rotsink-hive-metastore-"))
    conf = workdir / "conf"
    conf.mkdir()
    (conf / "metastore-site.xml").write_text(SITE.format(workdir=workdir))
    (conf / "log4j.properties").write_text(LOG4J)
    java = ["java", "-Xmx384m", "-cp", f"{conf}:{classpath}"]
    log = open(workdir / "metastore.log", "w")
    schema = subprocess.run(
        [*java, "org.apache.hadoop.hive.metastore.tools.MetastoreSchemaTool", "-dbType",
         "derby", "-initSchema"], env={**os.environ, "METASTORE_HOME": str(home)},
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [*java, "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop() -> None:
        process.kill()
        process.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return f"thrift://127.0.0.1:{port}", stop
        except OSError:
            if schema.returncode or process.poll() is not None or time.monotonic() > deadline:
                tail = (workdir / "metastore.log").read_text(errors="replace")[-3000:]
                stop()
                raise RuntimeError(f"Hive's metastore did not start:\n{tail}") from None
            time.sleep(0.2)

