"""A Spark standalone cluster on loopback, started and stopped by a test.

A Master on 127.0.0.1 and one Worker bound to 127.0.0.2, each a JVM that Spark's own
``spark-class`` starts from the pip-installed PySpark, in the foreground (``sbin/start-*.sh``
daemonize, so the test could not wait for them or be sure to kill them). Every port is picked
by the JVM itself (``0``) and read back from its log; the web UIs listen on loopback (on free
ports) and the Master's REST server is off. The Worker's ``PATH`` begins with the directories a
test names: the ``python3`` found there is the node's Python, which executors start for a job
whose ``PYSPARK_PYTHON`` is ``python3``. Neither daemon inherits the test's ``PYSPARK_*``,
``PYTHONPATH`` or failpoints: executors get only what the Worker and the job give them.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.class_archive import FAST_START
from tests.support.connect_server import die_with_parent, spark_home, stop_process_group

MASTER_HOST = "127.0.0.1"
WORKER_HOST = "127.0.0.2"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# Logged at INFO (Spark's default level for its daemons) once the port is bound and, for the
# Worker, once the Master accepted it.
MASTER_STARTED = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")
WORKER_REGISTERED = "Successfully registered with master"
# The test's own settings that a cluster node would not have.
_NOT_ON_NODES = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV",
                 "SPARK_HOME", "SPARK_CONF_DIR", "ROTSINK_FAILPOINTS", "ROTSINK_FAILPOINTS_FILE")


@dataclass
class StandaloneCluster:
    """A running cluster: ``url`` for ``SparkSession.builder.master``; daemon logs in ``logs``."""

    url: str
    master: subprocess.Popen
    worker: subprocess.Popen | None
    logs: Path

    def log_tail(self, lines: int = 30) -> str:
        tails = []
        for log in sorted(self.logs.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"{log.name}:\n" + "\n".join(text))
        return "\n".join(tails)

    def stop(self) -> None:
        """Stop the Worker (and the executors it runs), then the Master."""
        if self.worker is not None:
            stop_process_group(self.worker)
        stop_process_group(self.master)


def start_cluster(workdir: Path, *, worker_path: Sequence[Path], cores: int = 2,
                  memory: str = "2g", timeout_s: float = 120.0) -> StandaloneCluster:
    """Start a Master and a Worker with ``cores`` and ``memory`` and return once the Worker is
    registered; their logs, local and work directories go under ``workdir``."""
    logs = workdir / "logs"
    logs.mkdir(parents=True)
    properties = workdir / "daemons.conf"
    properties.write_text("spark.master.rest.enabled false\n")  # it would take port 6066
    master = _start(MASTER_CLASS, MASTER_HOST, workdir, logs / "master.log", (),
                    ["--host", MASTER_HOST, "--port", "0", "--webui-port", "0",
                     "--properties-file", str(properties)])
    cluster = StandaloneCluster("", master, None, logs)
    try:
        deadline = time.monotonic() + timeout_s
        cluster.url = _wait_for(cluster, logs / "master.log", MASTER_STARTED, deadline)
        cluster.worker = _start(
            WORKER_CLASS, WORKER_HOST, workdir, logs / "worker.log", worker_path,
            ["--host", WORKER_HOST, "--port", "0", "--webui-port", "0", "--cores", str(cores),
             "--memory", memory, "--work-dir", str(workdir / "work"),
             "--properties-file", str(properties), cluster.url])
        _wait_for(cluster, logs / "worker.log", re.compile(re.escape(WORKER_REGISTERED)),
                  deadline)
    except BaseException:  # a failed or interrupted start leaves no daemon behind
        cluster.stop()
        raise
    return cluster


def node_environment(host: str, workdir: Path, path_first: Sequence[Path]) -> dict[str, str]:
    """This process's environment less what only the test has, as a node's daemon has it."""
    env = {key: value for key, value in os.environ.items() if key not in _NOT_ON_NODES}
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = host  # every listening socket, the web UI's too, on this address
    env["SPARK_LOCAL_DIRS"] = str(workdir / f"local-{host}")
    env["PATH"] = os.pathsep.join([*map(str, path_first), env.get("PATH", "")])
    env["SPARK_DAEMON_JAVA_OPTS"] = FAST_START  # a short-lived daemon: the quick compiler
    return env


def _start(main_class: str, host: str, workdir: Path, log: Path, path_first: Sequence[Path],
           arguments: list[str]) -> subprocess.Popen:
    command = die_with_parent([str(spark_home() / "bin" / "spark-class"), main_class,
                               *arguments])
    with log.open("wb") as sink:
        return subprocess.Popen(command, env=node_environment(host, workdir, path_first),
                                cwd=workdir, stdin=subprocess.DEVNULL, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(cluster: StandaloneCluster, log: Path, line: re.Pattern[str],
              deadline: float) -> str:
    """The first match of ``line`` in ``log`` (group 1, or all of it), once it is there."""
    while time.monotonic() < deadline:
        found = line.search(log.read_text(errors="replace"))
        if found:
            return found.group(1) if found.re.groups else found.group(0)
        if any(p is not None and p.poll() is not None
               for p in (cluster.master, cluster.worker)):
            break
        time.sleep(0.2)
    raise RuntimeError(f"no {line.pattern!r} in {log.name} in time; logs end:\n"
                       f"{cluster.log_tail()}")
