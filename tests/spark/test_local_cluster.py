"""rotsink on Spark's ``local-cluster`` master: two executor JVMs, writing to local S3."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest


@pytest.mark.slow
def test_two_executor_jvms_write_to_s3_exactly_once(tmp_path, s3_endpoint):
    import s3fs

    bucket = f"rotsink-cluster-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(endpoint_url=s3_endpoint).mkdir(bucket)
    result = subprocess.run([sys.executable, "-m", "tests.cluster_job", s3_endpoint, bucket,
                             str(tmp_path)], capture_output=True, text=True, timeout=600,
                            stdin=subprocess.DEVNULL, cwd=Path(__file__).parents[2])
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    found = json.loads(lines[-1])
    assert found["executors"] == 2
    assert found["ids"] == list(range(found["total"]))
