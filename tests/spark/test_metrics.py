"""rotsink's metrics as operators read them: Prometheus scraped over HTTP from Spark's UI, JMX
from the JVM's own MBean server, through a driver kill, two queries apart by name.

The application is a driver of its own (:mod:`tests.metrics_job`): Spark's metrics sinks are
configured when its context starts, which the session the other tests share is not. Every
expected value comes from the input this test wrote.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.streams import write_numbered_source

ROWS_PER_FILE = 40
DEADLINE_S = 180


class Application:
    """One life of :mod:`tests.metrics_job`."""

    def __init__(self, work: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.metrics_job", str(work), str(ROWS_PER_FILE)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            cwd=Path(__file__).resolve().parents[2])
        assert self.process.stdout is not None
        started = json.loads(self.process.stdout.readline())
        self.ui, self.app = started["ui"], started["app"]

    def scrape(self) -> dict[str, dict[str, int]]:
        """Each rotsink query's gauges, as Spark's ``PrometheusServlet`` shows them."""
        with urllib.request.urlopen(f"{self.ui}/metrics/prometheus", timeout=30) as response:
            body = response.read().decode()
        assert self.ui.startswith("http://127.0.0.1:")
        found: dict[str, dict[str, int]] = {}
        for line in body.splitlines():
            match = re.match(r"metrics_\w+?_driver_rotsink_(alpha|beta)_(\w+)_Value\{[^}]*\} "
                             r"(-?\d+)$", line)
            if match:
                found.setdefault(match[1], {})[match[2]] = int(match[3])
        return found

    def jmx(self, query: str, metric: str) -> int | None:
        return self.ask(f"jmx {query} {metric}")

    def ask(self, line: str):
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{line}\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("stop\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=120) == 0

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)  # the driver, its JVM and its workers
        self.process.wait()


def prometheus_name(metric: str) -> str:
    return re.sub("[^a-zA-Z0-9]", "_", metric)


def wait_for(app: Application, expected: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Scrape until every query shows the ``expected`` values (Prometheus names)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        found = app.scrape()
        if all(found.get(q, {}).get(prometheus_name(m)) == v
               for q, values in expected.items() for m, v in values.items()):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"expected {expected}, scraped {found}")
        time.sleep(0.3)


@pytest.mark.compat
def test_prometheus_and_jmx_show_each_query_and_a_restart_goes_on_from_the_log(tmp_path):
    work = tmp_path
    alpha = write_numbered_source(work / "input" / "alpha", files=3, rows_per_file=ROWS_PER_FILE)
    beta = write_numbered_source(work / "input" / "beta", files=2, rows_per_file=ROWS_PER_FILE,
                                 start_file=100)
    app = Application(work)
    try:
        found = wait_for(app, {
            "alpha": {"rows-total": alpha, "batches-total": 3, "filesFinalized-total": 3,
                      "filesCreated-total": 3, "filesInProgress": 0, "batchesIdle-total": 0,
                      "rows-lastBatch": ROWS_PER_FILE, "files-lastBatch": 1,
                      "filesFinalized-lastBatch": 1, "batchId": 2, "failures_total": 0},
            "beta": {"rows-total": beta, "batches-total": 2, "filesFinalized-total": 2}})
        for query in ("alpha", "beta"):
            shown = found[query]
            assert shown["commit_ms"] >= shown["commitLog_ms"] > 0
            assert shown["lastCommit_timestampMs"] > time.time() * 1000 - 600_000
        assert found["alpha"]["bytes_total"] == sum(  # JSON lines: the bytes are the files'
            f.stat().st_size for f in (work / "out" / "alpha").glob("part-*"))
        assert found["beta"]["tableVersion"] == delta_version(work / "out" / "beta") > 0
        before_kill = found
        assert app.jmx("alpha", "rows-total") == alpha
        assert app.jmx("beta", "batches-total") == 2
        assert app.jmx("gamma", "rows-total") is None
    except BaseException:
        app.kill()
        raise
    app.kill()

    app = Application(work)  # a new driver: the totals come from the log before any batch
    try:
        found = wait_for(app, {"alpha": {"rows-total": alpha, "batches-total": 3,
                                         "filesFinalized-total": 3}})
        # and so does every gauge the log and the table give (an alert on the time since the
        # last commit must not fire at a restart); beta gets no new input after the kill
        for query in ("alpha", "beta"):
            shown, before = found[query], before_kill[query]
            assert shown["batchId"] == before["batchId"]
            assert shown["filesInProgress"] == before["filesInProgress"] == 0
            assert before["lastCommit_timestampMs"] - 60_000 < shown["lastCommit_timestampMs"] \
                <= before["lastCommit_timestampMs"]
        assert found["beta"]["tableVersion"] == before_kill["beta"]["tableVersion"]
        write_numbered_source(work / "input" / "alpha", files=1, rows_per_file=ROWS_PER_FILE,
                              start_file=3)
        wait_for(app, {"alpha": {"rows-total": alpha + ROWS_PER_FILE, "batches-total": 4,
                                 "filesFinalized-total": 4, "rows-lastBatch": ROWS_PER_FILE},
                       "beta": {"rows-total": beta, "batches-total": 2}})
        assert app.jmx("alpha", "rows-total") == alpha + ROWS_PER_FILE
        assert app.ask("end alpha") == "ended"  # its source goes, as Spark's own does
        deadline = time.monotonic() + DEADLINE_S
        while "alpha" in app.scrape():
            assert time.monotonic() < deadline, "alpha's metrics outlived the query"
            time.sleep(0.3)
        assert app.jmx("alpha", "rows-total") is None
        assert app.scrape()["beta"]["rows_total"] == beta
    except BaseException:
        app.kill()
        raise
    app.stop()


def delta_version(table: Path) -> int:
    """The newest version in the table's ``_delta_log``, as a file listing shows it."""
    return max(int(p.name.split(".")[0]) for p in (table / "_delta_log").glob("*.json"))
