"""Spark's Python workers import the installed, compiled PySpark instead of ``pyspark.zip``,
and only where the zip is the one shipped inside that same installed PySpark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from datasource.spark import worker_path
from datasource.spark.worker_path import KEEP_ZIP_ENV, prefer_installed_pyspark

INSTALLED_ROOT = Path(pyspark.__file__).resolve().parent.parent
SHIPPED_ZIP = INSTALLED_ROOT / "pyspark" / "python" / "lib" / "pyspark.zip"
PY4J_ZIP = next(SHIPPED_ZIP.parent.glob("py4j-*-src.zip"))


def fake_install(tmp_path: Path, *, package: bool = True) -> tuple[str, str]:
    """A site directory holding ``pyspark/python/lib/pyspark.zip``; (root, zip path)."""
    lib = tmp_path / "site" / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (lib / "pyspark.zip").write_bytes(b"")
    if package:
        (tmp_path / "site" / "pyspark" / "__init__.py").write_text("")
    return str(tmp_path / "site"), str(lib / "pyspark.zip")


@pytest.mark.parametrize("case, moved", [
    ("shipped zip, package on the path", True),
    ("shipped zip, package root not on the path", False),
    ("zip under a root with no pyspark package", False),
    ("a cluster's SPARK_HOME zip", False),
])
def test_only_the_zip_shipped_in_the_installed_package_moves(tmp_path, case, moved):
    root, shipped = fake_install(tmp_path, package=case != "zip under a root with no pyspark "
                                                           "package")
    if case == "a cluster's SPARK_HOME zip":
        shipped = "/opt/spark/python/lib/pyspark.zip"
    path = [shipped, "/lib/py4j-src.zip", "", "/user/code"]
    if case != "shipped zip, package root not on the path":
        path.append(root)
    expected = ([p for p in path if p != shipped] + [shipped]) if moved else path
    assert prefer_installed_pyspark(path) == expected


def test_apply_keeps_the_zip_when_told_or_when_pyspark_is_imported(tmp_path, monkeypatch):
    root, shipped = fake_install(tmp_path)
    monkeypatch.setattr(sys, "path", [shipped, root])
    monkeypatch.setenv(KEEP_ZIP_ENV, "1")
    worker_path.apply()
    assert sys.path == [shipped, root]
    monkeypatch.delenv(KEEP_ZIP_ENV)
    worker_path.apply()  # this test process imported pyspark: its modules stay where they are
    assert sys.path == [shipped, root]
    monkeypatch.delitem(sys.modules, "pyspark")
    worker_path.apply()
    assert sys.path == [root, shipped]


@pytest.mark.parametrize("keep_zip, expected", [
    pytest.param(False, INSTALLED_ROOT / "pyspark" / "__init__.py", id="installed-compiled"),
    pytest.param(True, SHIPPED_ZIP / "pyspark" / "__init__.py", id="opted-out-zip"),
])
def test_installed_hook_runs_at_interpreter_start(keep_zip, expected):
    """What every Spark daemon sees: ``PYTHONPATH`` starting with the shipped zip. The
    ``rotsink_workers.pth`` hook installed with rotsink reorders it before any import."""
    env = {k: v for k, v in os.environ.items() if k != KEEP_ZIP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(SHIPPED_ZIP), str(PY4J_ZIP)])
    if keep_zip:
        env[KEEP_ZIP_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
                          env=env, capture_output=True, text=True, check=True)
    assert Path(done.stdout.strip()) == expected
