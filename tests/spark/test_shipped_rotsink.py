"""rotsink on a standalone cluster whose nodes' Python has no rotsink: the job ships it.

A Master on 127.0.0.1 and a Worker bound to 127.0.0.2 (``tests/support/standalone.py``). The
Worker's ``python3`` is a fresh venv with only pyarrow and numpy: what PySpark's Arrow path to
Python data sources needs (pyarrow) and what rotsink's task modules import (numpy); no pandas.
The driver is this interpreter, which has rotsink, in client mode (``tests/shipped_job.py``),
started without ``PYSPARK_DRIVER_PYTHON``: the automatic lookup would otherwise give executors
the driver's interpreter. Two ways of shipping, as ``docs/cluster.md`` describes them:

- ``spark.archives``: a venv with rotsink's wheel and its dependencies, PySpark left out,
  packed by venv-pack; ``PYSPARK_PYTHON=./environment/bin/python``.
- ``spark.submit.pyFiles`` (``--py-files``): rotsink's wheel as a zip, ``PYSPARK_PYTHON=python3``.

The pack is built while the py-files job runs; everything lives in the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.python_envs import (
    build_wheel,
    constraints,
    make_venv,
    pack,
    runtime_requirements,
)
from tests.support.standalone import MASTER_HOST, StandaloneCluster, start_cluster

NODE_PACKAGES = ("pyarrow", "numpy")
# What the driver's environment must not pass on: with PYSPARK_DRIVER_PYTHON set, Spark's
# automatic lookup of Python data sources hands that interpreter to the executors.
NOT_FOR_THE_DRIVER = ("PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "SPARK_HOME",
                      "ROTSINK_FAILPOINTS", "ROTSINK_FAILPOINTS_FILE")


@pytest.fixture
def environments_removed(tmp_path):
    """Once the test is over, its venvs, pack and unpacked copies (2 GB together) go from
    tmp_path; the logs stay."""
    yield
    unpacked = [*tmp_path.glob("cluster/work/*/*/environment"),
                *tmp_path.glob("archives/local/*/userFiles-*/environment")]
    for directory in (tmp_path / "node", tmp_path / "pack", *unpacked):
        shutil.rmtree(directory, ignore_errors=True)
    (tmp_path / "rotsink_env.tar.gz").unlink(missing_ok=True)


@pytest.mark.slow
@pytest.mark.usefixtures("environments_removed")
def test_a_job_ships_rotsink_to_nodes_that_lack_it(tmp_path, shown):
    started = time.monotonic()
    pinned = constraints(tmp_path / "constraints.txt")
    with ThreadPoolExecutor(max_workers=2) as pool:
        wheel_built = pool.submit(build_wheel, tmp_path / "dist")
        node_built = pool.submit(make_venv, tmp_path / "node", NODE_PACKAGES, pinned=pinned)
        # The Worker's PATH names the node's venv before it exists: executors look for
        # python3 only when a job runs.
        cluster = start_cluster(tmp_path / "cluster", worker_path=[tmp_path / "node" / "bin"])
        try:
            wheel = wheel_built.result()
            packed = pool.submit(pack_environment, tmp_path, wheel, pinned)
            node_built.result()
            ready = time.monotonic()
            zip_path = shutil.copyfile(wheel, tmp_path / "rotsink.zip")  # a wheel is a zip
            by_pyfiles = run_job(cluster, tmp_path / "pyfiles", "pyfiles", str(zip_path),
                                 python="python3")
            pyfiles_done = time.monotonic()
            archive = packed.result()
            by_archives = run_job(cluster, tmp_path / "archives", "archives", str(archive),
                                  python="./environment/bin/python")
        finally:
            cluster.stop()
    done = time.monotonic()
    shown(f"built wheel, node venv, cluster {ready - started:.1f} s; py-files job "
          f"{pyfiles_done - ready:.1f} s (pack built meanwhile) {by_pyfiles['seconds']}; "
          f"archives job {done - pyfiles_done:.1f} s {by_archives['seconds']}; "
          f"total {done - started:.1f} s")

    work = str(tmp_path / "cluster" / "work")
    expected = list(range(by_pyfiles["total"]))
    # py-files: executors run the node's python3 and import rotsink from the shipped zip
    assert {python for python, _ in by_pyfiles["executors"]} == {
        str(tmp_path / "node" / "bin" / "python3")}
    assert all(origin.startswith(work) and "/rotsink.zip/" in origin
               for _, origin in by_pyfiles["executors"])
    # the automatic lookup's registration carries no py-files; register's does
    assert by_pyfiles["automatic"] == "ModuleNotFoundError: No module named 'datasource'"
    assert by_pyfiles["parquet"] == ""
    assert by_pyfiles["spark"] == by_pyfiles["rotsink"] == by_pyfiles["fast_path"] == expected
    # JSON lines encodes with polars, compiled: a zip cannot carry it
    assert by_pyfiles["jsonl"] == "ModuleNotFoundError: No module named 'polars'"

    expected = list(range(by_archives["total"]))
    # archives: executors run the unpacked environment, rotsink included (PySpark is not in it)
    assert all(python.startswith(work) and python.endswith("/environment/bin/python")
               for python, _ in by_archives["executors"])
    assert all(origin.startswith(work) and "/environment/lib/" in origin
               for _, origin in by_archives["executors"])
    assert by_archives["sources"] == 2  # the heartbeat beside the file source
    assert by_archives["rotsink"] == by_archives["fast_path"] == by_archives["feed"] == expected
    # Spark's reader: exactly the finalized files, some of the rows (the last files are open)
    assert by_archives["spark"] == by_archives["finalized"]
    assert 0 < len(by_archives["finalized"]) < len(expected)


def pack_environment(tmp_path: Path, wheel: Path, pinned: Path) -> Path:
    """rotsink's wheel and its dependencies but PySpark in a venv, packed for spark.archives."""
    make_venv(tmp_path / "pack", runtime_requirements(wheel), pinned=pinned, no_deps=[wheel])
    assert not list((tmp_path / "pack").glob("lib/python*/site-packages/pyspark"))
    return pack(tmp_path / "pack", tmp_path / "rotsink_env.tar.gz")


def run_job(cluster: StandaloneCluster, workdir: Path, mode: str, shipped: str, *,
            python: str) -> dict:
    """``tests.shipped_job`` as a client-mode driver in ``workdir``; what it found."""
    workdir.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in NOT_FOR_THE_DRIVER}
    env["PYSPARK_PYTHON"] = python
    env["SPARK_LOCAL_IP"] = MASTER_HOST
    env["SPARK_LOCAL_DIRS"] = str(workdir / "local")
    # the driver's own python3 (py-files' PYSPARK_PYTHON) is this venv's, which has rotsink
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    result = subprocess.run([sys.executable, "-m", "tests.shipped_job", mode, cluster.url,
                             str(workdir), shipped], capture_output=True, text=True, env=env,
                            cwd=workdir, timeout=300, stdin=subprocess.DEVNULL)
    (workdir / "driver.log").write_text(result.stderr)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0 and lines, (
        f"{mode}: {result.stderr[-4000:]}\n{cluster.log_tail()}")
    return json.loads(lines[-1])
