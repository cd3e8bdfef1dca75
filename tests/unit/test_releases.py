"""Releases continue each other's outputs: the previous release (0.1.0, its last commit
:data:`PREVIOUS`, taken from this repository's history) commits batches of an output this
one started, into its Delta table, and this one goes on after it, as a downgrade and an
upgrade back leave an output. No row is lost or doubled (expected rows: the ids the batches
wrote), the table holds every finalized file once, the totals stay whole (0.1.0 counts its
batches), and ``rotsink inspect`` and the table's history say which release committed what.
Releases that kept no totals are played in tests/unit/test_commit_metrics.py. A state version
this release does not know is refused, naming the log file and the version."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.metrics.totals import gauges_of
from commit_protocol.reading import committed_files, open_committed
from commit_protocol.storage import open_storage
from commit_protocol.vocabulary.release import RELEASE
from datasource.commands.cli import main
from tests.unit.test_delta_commits import ROWS, commit_batch, delta, forget, table_config

pytestmark = pytest.mark.compat
ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = "9bc99cf"  # release 0.1.0's last commit (every commit before it said 0.1.0)
EARLIER_BATCHES = (3, 4)  # what the previous release commits, between this one's


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory) -> Path:
    """The previous release's packages and test helpers, from git (a clone has its history:
    CI runs on one)."""
    tree = tmp_path_factory.mktemp("rotsink-0.1.0")
    archived = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS,
                               "commit_protocol", "datasource", "tests"],
                              capture_output=True, check=False)
    assert archived.returncode == 0, (
        f"release 0.1.0 ({PREVIOUS}) is not in this checkout's history: "
        f"{archived.stderr.decode()} (a shallow clone? fetch with --unshallow)")
    with tarfile.open(fileobj=io.BytesIO(archived.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def commit_with_previous_release(tree: Path, out: str, batches: tuple[int, ...]) -> None:
    """The previous release's driver commits ``batches`` (its own code, a process of its own)."""
    script = ("import sys\n"
              "from tests.unit.test_delta_commits import commit_batch, forget, table_config\n"
              "cfg = table_config(sys.argv[1], max_batches=1)\n"
              "for b in sys.argv[2:]:\n"
              "    commit_batch(cfg, int(b))\n"
              "forget()\n"
              "import commit_protocol; print(commit_protocol.__file__)\n")
    done = subprocess.run([sys.executable, "-c", script, out, *map(str, batches)], cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(tree)), "the previous release's code must run"


def finalized_ids(out: str) -> list[int]:
    """The ids of the files the log lists, read by pyarrow (every file rolls at its batch's
    end: ``rotation.maxBatches=1``)."""
    log, latest, state = open_committed(open_storage(out))  # type: ignore[misc]
    return sorted(i for f in committed_files(log, latest, state, include_in_progress=False)
                  for i in pq.read_table(Path(out) / f.path).column("id").to_pylist())


def test_the_previous_release_and_this_one_continue_each_others_output(
        tmp_path, previous_release, capsys):
    cfg = table_config(str(tmp_path / "out"), max_batches=1)
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    forget()
    commit_with_previous_release(previous_release, cfg.path, EARLIER_BATCHES)
    state = open_committed(open_storage(cfg.path))[2]  # type: ignore[index]
    # 0.1.0 moves the totals on (with the keys it knows) and copies this release's marks
    assert state.batch_id == 4 and gauges_of(state)["batchesUncounted-total"] == 0
    assert gauges_of(state)["rows-total"] == 5 * ROWS
    assert main(["inspect", cfg.path]) == 0
    assert f"written by: rotsink {RELEASE} up to batch 2, batches 3-4 by an earlier release" \
        in capsys.readouterr().out

    for batch_id in (5, 6):  # upgraded again
        commit_batch(cfg, batch_id)
    forget()
    finalized = finalized_ids(cfg.path)
    assert finalized == list(range(7 * ROWS))  # the seven batches' ids: none lost, none twice
    table = delta(cfg)
    assert sorted(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == finalized
    assert verify_output(open_storage(cfg.path), commit_timeout_s=0).ok
    gauges = gauges_of(open_committed(open_storage(cfg.path))[2])  # type: ignore[index]
    assert gauges["batchesUncounted-total"] == 0
    assert gauges["rows-total"] == 7 * ROWS and gauges["rowsFinalized-total"] == 7 * ROWS
    releases = [c.get("rotsinkRelease") for c in table.history()
                if c.get("rotsinkBatch") is not None]
    assert RELEASE in releases and None in releases  # each table commit says which wrote it
    assert main(["inspect", cfg.path]) == 0
    out = capsys.readouterr().out
    # every release's batches, not only the newest's (an upgrade, a downgrade and back)
    assert (f"written by: rotsink {RELEASE} since batch 5; batches 3-4 by an earlier release; "
            f"0-2 by rotsink {RELEASE}\n") in out
    assert "partial" not in out


def test_a_state_version_this_release_does_not_know_is_refused_by_name(tmp_path, capsys):
    cfg = table_config(str(tmp_path / "out"))
    commit_batch(cfg, 0)
    forget()
    log_file = tmp_path / "out" / "_spark_metadata" / "0"
    text = log_file.read_text()
    assert text.count('"rotsink":{"version":2,') == 1  # the state rides in the isDir entry
    log_file.write_text(text.replace('"rotsink":{"version":2,', '"rotsink":{"version":3,'))
    assert main(["verify", cfg.path]) == 1
    out = capsys.readouterr().out
    assert "_spark_metadata/0" in out and "found 3" in out
