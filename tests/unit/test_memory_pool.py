"""The process that commits uses jemalloc for Arrow's buffers unless the application chose a
pool (``datasource/spark/memory_pool.py`` says why: pyarrow's default mimalloc keeps what it
freed, and the committing process lives as long as the query)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from datasource.spark import memory_pool

SHOW = ("from datasource.spark import memory_pool; import pyarrow as pa; "
        "print(memory_pool.use_for_commits(), pa.default_memory_pool().backend_name)")


def pool_of_a_fresh_process(**env: str) -> list[str]:
    """What a new process (as PySpark's sink runner is) commits with, and its default pool."""
    environment = {k: v for k, v in os.environ.items() if k != memory_pool.ENV_VAR} | env
    done = subprocess.run([sys.executable, "-c", SHOW], env=environment, capture_output=True,
                          text=True, check=True)
    return done.stdout.split()


def test_the_committing_process_uses_jemalloc():
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow has no jemalloc: the default pool stays")
    assert pool_of_a_fresh_process() == ["jemalloc", "jemalloc"]


@pytest.mark.parametrize("chosen", ["mimalloc", "system"])
def test_a_pool_the_application_chose_is_kept(chosen):
    assert pool_of_a_fresh_process(**{memory_pool.ENV_VAR: chosen}) == [chosen, chosen]
