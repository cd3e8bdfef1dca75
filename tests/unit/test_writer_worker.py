"""What a task leaves in its Python worker: its modules loaded and out of the collector's way."""

from __future__ import annotations

import subprocess
import sys

import pytest

from commit_protocol.formats import FORMATS, OUTPUT_FORMATS

# Runs in a fresh interpreter: gc.freeze() is process-wide, and pytest's own process must keep
# its collector as it is.
CHECK = """
import gc, sys
from datasource.writing.writer import freeze_task_modules
freeze_task_modules({fmt!r})
missing = [m for m in {modules!r} if m not in sys.modules]
assert not missing, missing
frozen = gc.get_freeze_count()
assert len(gc.get_objects()) < frozen // 20, (
    len(gc.get_objects()), frozen)
later = [[i] for i in range(1000)]  # a later task's objects: the collector keeps them
freeze_task_modules({fmt!r})
assert gc.get_freeze_count() == frozen, "froze twice"
print(frozen)
"""


@pytest.mark.parametrize("fmt", sorted(OUTPUT_FORMATS))
def test_first_task_loads_its_modules_and_freezes_them_once(fmt):
    modules = ["commit_protocol.task.task_writer", FORMATS[fmt].module, *FORMATS[fmt].preload]
    done = subprocess.run([sys.executable, "-c", CHECK.format(fmt=fmt, modules=modules)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 10_000  # pyarrow alone brings more


# A cluster node with pyarrow and numpy but no pandas (docs/cluster.md): importing it fails as
# it does where it is not installed.
WITHOUT_PANDAS = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from datasource.writing.writer import freeze_task_modules
freeze_task_modules({fmt!r})
assert "pandas" not in sys.modules
"""


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_a_task_on_a_node_without_pandas_loads_what_is_there(fmt):
    assert "pandas" in FORMATS[fmt].preload  # pyarrow's writer imports it when it can
    done = subprocess.run([sys.executable, "-c", WITHOUT_PANDAS.format(fmt=fmt)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# polars sizes its thread pool when it is imported: the check runs in a fresh interpreter.
POLARS_THREADS = """
import os, sys
import pyspark
class Context:
    def cpus(self):
        return {cpus}
if {cpus} is not None:
    pyspark.TaskContext.get = staticmethod(lambda: Context())
from datasource.writing.writer import freeze_task_modules
freeze_task_modules("jsonl")
import polars
print(polars.thread_pool_size())
"""


@pytest.mark.parametrize(("cpus", "preset", "threads"), [
    (None, None, 1),  # no task (a driver-side call): one
    (1, None, 1),     # spark.task.cpus=1, Spark's default
    (3, None, 3),
    (1, "2", 2),      # the user's POLARS_MAX_THREADS wins
])
def test_polars_runs_on_the_cores_spark_gives_the_task(cpus, preset, threads):
    import os

    env = {k: v for k, v in os.environ.items() if k != "POLARS_MAX_THREADS"}
    if preset is not None:
        env["POLARS_MAX_THREADS"] = preset
    done = subprocess.run([sys.executable, "-c", POLARS_THREADS.format(cpus=cpus)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == threads
