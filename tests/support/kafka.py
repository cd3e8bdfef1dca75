"""A single-node Kafka broker for the pipeline tests, in KRaft mode, on 127.0.0.1.

The broker (``org.apache.kafka:kafka_2.13``, fetched by :mod:`tests.support.jvm`) runs as a
child JVM with its log in a temp directory: formatted with a fresh cluster id, started,
and stopped (killed) after. Topics are created on first use with ``num.partitions``
partitions, so a producer's first write makes a multi-partition topic.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from datasource.commands.session import check_java
from tests.support.jvm import kafka_broker_classpath

TOPIC_PARTITIONS = 3
# Warnings, and the line that says the broker serves clients (see _broker_started).
LOG4J2 = """\
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d %p %c: %m%n
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""


@dataclass
class KafkaBroker:
    bootstrap: str             # host:port of its PLAINTEXT listener
    process: subprocess.Popen
    workdir: Path

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self) -> str:
        return (self.workdir / "broker.log").read_text(errors="replace")[-3000:]


def start_kafka_broker(*, timeout_s: float = 90.0) -> KafkaBroker:
    """Format and start a broker on free loopback ports; returns once it accepts clients."""
    check_java()
    classpath = kafka_broker_classpath()
    workdir = Path(tempfile.mkdtemp(prefix="rotsink-kafka-"))
    port, controller_port = _free_port(), _free_port()
    config = workdir / "server.properties"
    config.write_text("\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={workdir / 'data'}",
        f"num.partitions={TOPIC_PARTITIONS}",
        "auto.create.topics.enable=true",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
    ]) + "\n")
    logging_config = workdir / "log4j2.properties"
    logging_config.write_text(LOG4J2)
    # A small heap and a quick start: it holds a few thousand records.
    java = ["java", "-Xmx384m", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={logging_config}", "-cp", classpath]
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    # "--cluster-id=<id>" as one argument: an id may begin with "-"
    format_storage = [*java, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                      f"--config={config}"]
    formatted = subprocess.run(format_storage, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL)
    if formatted.returncode:
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"kafka-storage format failed:\n{formatted.stdout}{formatted.stderr}")
    log = open(workdir / "broker.log", "w")
    process = subprocess.Popen([*java, "kafka.Kafka", str(config)], stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    broker = KafkaBroker(f"127.0.0.1:{port}", process, workdir)
    deadline = time.monotonic() + timeout_s
    while not _broker_started(broker):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = broker.log_tail()
            broker.stop()
            raise RuntimeError(f"the Kafka broker did not start within {timeout_s:.0f}s:\n{tail}")
        time.sleep(0.2)
    return broker


def _broker_started(broker: KafkaBroker) -> bool:
    # The broker logs this once its listeners serve requests (KafkaRaftServer started).
    return "Kafka Server started" in (broker.workdir / "broker.log").read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
