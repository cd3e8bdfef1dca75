"""The README's first command: ``rotsink demo`` as a user runs it (the installed console
script, its own Spark session), at a small size."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_demo_streams_and_reads_back_every_row_exactly_once(tmp_path):
    script = Path(sys.executable).with_name("rotsink")
    command = str(script) if script.exists() else shutil.which("rotsink")
    assert command, "the rotsink console script is not installed (pip install -e .)"
    env = {**os.environ, "ROTSINK_LOG_LEVEL": "INFO"}  # the operator's per-batch lines
    done = subprocess.run([command, "demo", "--batches", "4", "--rows", "300",
                           "--dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "OK: every row exactly once" in lines
    assert "rotsink reader: 1200 rows (1200 distinct ids; 1200 streamed)" in lines
    assert sum(line.startswith("batch ") for line in lines) == 4
    # Spark's commit process logs each batch through the rotsink logger to stderr
    committed = [line for line in done.stderr.splitlines()
                 if " INFO rotsink.commit: batch " in line and " committed in " in line]
    assert len(committed) == 4, done.stderr[-2000:]


@pytest.mark.parametrize("table, summary", [
    ("delta", "Delta table (delta-rs): version 1, 7 files, 1200 rows"),
    ("iceberg", "Iceberg table rotsink.output (pyiceberg, embedded catalog"),
])
def test_demo_with_a_table_reads_it_back_with_the_table_s_reader(tmp_path, table, summary):
    script = Path(sys.executable).with_name("rotsink")
    command = str(script) if script.exists() else shutil.which("rotsink")
    assert command, "the rotsink console script is not installed (pip install -e .)"
    done = subprocess.run([command, "demo", "--table", table, "--batches", "6", "--rows",
                           "300", "--dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "OK: the table lists exactly the finalized files, every row once" in lines
    assert any(line.startswith(summary) and line.endswith("1200 rows") for line in lines), \
        lines
