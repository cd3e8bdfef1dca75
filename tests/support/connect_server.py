"""A local Spark Connect server for the tests, started and stopped by the test itself.

Spark's ``SparkConnectServer`` (in PySpark's ``spark-connect`` jar) runs under
``spark-submit`` as a foreground child process, not through ``sbin/start-connect-server.sh``:
that script daemonizes, so the test could not wait for it or be sure to kill it. The server
listens on 127.0.0.1 only, on a port picked free, and its Python workers run this interpreter,
so they import the installed rotsink exactly as a cluster's workers would.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
LOOPBACK = "127.0.0.1"
# SparkConnectServer logs this (at INFO, Spark's default level) once its gRPC port is bound.
STARTED_LINE = "Spark Connect server started at: "

# Run by this interpreter before it execs spark-submit (whose scripts exec the JVM, so the JVM
# keeps this process id): the kernel kills the server when the test process dies, even by
# SIGKILL, where no fixture teardown runs. prctl(PR_SET_PDEATHSIG = 1) is Linux only.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "if sys.platform.startswith('linux'):\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


@dataclass
class ConnectServer:
    """A running server: ``url`` for ``SparkSession.builder.remote``; its output in ``log``."""

    url: str
    process: subprocess.Popen
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the JVM, SIGKILL after ``grace_s``, and make sure its Python workers are gone."""
        stop_process_group(self.process, grace_s)


def die_with_parent(command: list[str]) -> list[str]:
    """``command`` run so that the kernel kills it when this process dies (Linux; elsewhere
    it runs as it is): for a JVM started through Spark's scripts, which exec it."""
    return [sys.executable, "-c", _DIE_WITH_PARENT, *command]


def stop_process_group(process: subprocess.Popen, grace_s: float = 15.0) -> None:
    """Stop a JVM started with ``start_new_session=True``, SIGKILL after ``grace_s``, and make
    sure its Python workers are gone.

    SIGTERM first lets Spark run its shutdown hooks (stopping the SparkContext, deleting
    its temp directories). PySpark's worker daemons put themselves in process groups of
    their own, so a signal to the JVM's group misses them: they exit when the JVM closes
    their stdin, and any still alive a moment later is killed."""
    workers = _descendants(process.pid)
    _signal_group(process.pid, signal.SIGTERM)  # the group start_new_session made
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
    deadline = time.monotonic() + 5
    while workers and time.monotonic() < deadline:
        workers = [pid for pid in workers if _alive(pid)]
        time.sleep(0.1)
    for pid in workers:
        _signal(pid, signal.SIGKILL)


def _signal_group(group: int, sig: signal.Signals) -> None:
    try:
        os.killpg(group, sig)
    except ProcessLookupError:  # nothing of the group is left
        pass


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # exited meanwhile
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` now, from ``/proc`` (none where there is no ``/proc``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
        except (OSError, IndexError):
            continue  # exited meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def spark_home() -> Path:
    """The PySpark this interpreter imports, whatever ``SPARK_HOME`` the machine has."""
    import pyspark

    return Path(pyspark.__file__).parent


def server_environment() -> dict[str, str]:
    """This process's environment for the server, made a plain classic Spark's."""
    env = dict(os.environ)
    # Spark starts its Python workers with PYSPARK_PYTHON: this interpreter has rotsink.
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_HOME"] = str(spark_home())
    # Every listening socket of the driver (RPC, block manager) on loopback too.
    env["SPARK_LOCAL_IP"] = LOOPBACK
    # As sbin/start-connect-server.sh: the server itself is a classic Spark application.
    env["SPARK_CONNECT_MODE"] = "0"
    for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE"):
        env.pop(name, None)
    # The server stands for a user's Spark: no failpoints of the test harness.
    for name in ("ROTSINK_FAILPOINTS", "ROTSINK_FAILPOINTS_FILE"):
        env.pop(name, None)
    return env


def server_command(port: int, *, cores: int) -> list[str]:
    spark_submit = str(spark_home() / "bin" / "spark-submit")
    confs = {
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
        # Spark moves to the next port when one is taken; the test waits on this one, so a
        # port taken since free_port() must fail the start instead.
        "spark.port.maxRetries": "0",
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.sql.session.timeZone": "UTC",
    }
    command = die_with_parent([spark_submit, "--class", SERVER_CLASS, "--master",
                               f"local[{cores}]", "--name", "rotsink-connect-tests"])
    for key, value in confs.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "spark-internal"]  # SparkSubmit's primary resource for built-in servers


def start_connect_server(workdir: Path, *, cores: int = 2, attempts: int = 3,
                         timeout_s: float = 120.0) -> ConnectServer:
    """Start a server and return once it accepts connections; its output goes to
    ``workdir/server-<n>.log``. A start that fails (a port taken in between) is retried on
    another port; the last failure raises with the end of the server's log."""
    failure = ""
    for attempt in range(attempts):
        port = free_port()
        log = workdir / f"server-{attempt}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                server_command(port, cores=cores), env=server_environment(), cwd=workdir,
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True)  # its own process group, killed as one
        server = ConnectServer(f"sc://{LOOPBACK}:{port}", process, log)
        try:
            failure = _wait_until_listening(server, port, time.monotonic() + timeout_s)
        except BaseException:  # an interrupt while waiting leaves no server behind
            server.stop()
            raise
        if not failure:
            return server
        server.stop()
    raise RuntimeError(f"Spark Connect server did not start: {failure}")


def _wait_until_listening(server: ConnectServer, port: int, deadline: float) -> str:
    """'' once the server says it listens on ``port`` and the port accepts a connection, else
    why not (with the log's end). The log line comes first: it tells this server's listener
    from another process's that took the port in between (with ``spark.port.maxRetries=0``
    this server then fails to start, and a connection alone would wrongly pass)."""
    started = f"{STARTED_LINE}{LOOPBACK}:{port}"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return (f"exit code {server.process.returncode}; {server.log} ends:\n"
                    f"{server.log_tail()}")
        if started in server.log.read_text(errors="replace"):
            try:
                with socket.create_connection((LOOPBACK, port), timeout=1):
                    return ""
            except OSError:
                pass
        time.sleep(0.2)
    return f"no {started!r} in time; {server.log} ends:\n{server.log_tail()}"
