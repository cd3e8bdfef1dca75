"""The crash loop (``tests/crashloop.py``) at CI size: at least 10 random SIGKILLs of the whole
driver plus one kill at every failpoint, then every input row exactly once.

The size is a parameter: ``ROTSINK_CRASH_KILLS=200 pytest tests/spark/test_crash_loop.py``
(or ``python -m tests.crashloop --random-kills 200``) runs the long version on demand.
"""

from __future__ import annotations

import os
import time

import pytest

from commit_protocol.failpoints import ALL_POINTS
from tests.crashloop import CrashLoop, check_output, summary


@pytest.mark.slow
def test_crash_loop_loses_and_duplicates_nothing(spark, tmp_path, capsys):
    random_kills = int(os.environ.get("ROTSINK_CRASH_KILLS", "10"))
    started = time.monotonic()
    loop = CrashLoop(tmp_path, seed=int(os.environ.get("ROTSINK_CRASH_SEED", "7")))
    with capsys.disabled():
        print()
        loop.run(random_kills=random_kills)
    outcome = check_output(spark, loop.out, loop.rows_in)
    report = summary(loop, outcome, wall_s=time.monotonic() - started)
    with capsys.disabled():
        print(report)
    assert loop.tally.problems == [], report
    assert loop.tally.random_kills >= random_kills, report
    assert sorted(loop.tally.fired) == sorted(ALL_POINTS), report
    assert (outcome.lost, outcome.duplicated) == (0, 0), report
    assert outcome.rotsink_rows == outcome.rows_in and outcome.spark_matches_finalized, report
