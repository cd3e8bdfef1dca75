"""The metrics a query's commits leave in its mailbox (commit_protocol.metrics): counted from
the input the test wrote and the files on disk, carried by the log across a restart, failures
counted by kind, nothing recorded when off."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from commit_protocol import metrics
from commit_protocol.log.metadata_log import open_committed
from commit_protocol.metrics import mailbox
from commit_protocol.metrics.totals import TOTALS
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import FailpointError
from tests.unit.test_delta_commits import ROWS, commit_batch, forget, table_config
from tests.unit.test_roll_on_idle import rows_of
from tests.unit.test_task_writer import commit, config, run_task, storage_of


def committed(box: Path, cfg, batch_id: int, *reports):
    with metrics.recording(str(box), batch_id) as recorded:
        result = commit(None, cfg, batch_id, *reports)
        recorded.committed(result.state, compacted=result.compacted)
    return mailbox.read(str(box))


def finished_files(cfg) -> list[Path]:
    return [p for p in Path(cfg.path).rglob("part-*") if "_rotsink" not in p.parts]


def test_the_totals_count_the_input_and_go_on_from_the_log_after_a_restart(tmp_path):
    cfg = config(tmp_path / "out", partition_by=("g",), rotation={"max_records": 10})
    box = tmp_path / "box"
    box.mkdir()
    written = 0
    for batch_id, (n, group) in enumerate([(6, "a"), (7, "a"), (4, "b")]):
        shown = committed(box, cfg, batch_id,
                          run_task(tmp_path, cfg, batch_id, [rows_of(written, n, group)]))
        written += n
    # group a: a file finished at its 10th row (6 + 4) and one holding the other 3; group b:
    # one file of 4. commit() commits batch n at the time n (ms).
    finished = finished_files(cfg)
    assert [len(p.read_text().splitlines()) for p in finished] == [10]
    assert shown["rows-total"] == written == 17
    assert shown["batches-total"] == 3 and shown["batchId"] == 2
    assert shown["filesFinalized-total"] == 1 and shown["filesCreated-total"] == 3
    assert shown["filesInProgress"] == 2 and shown["filesInProgress-rows"] == 7
    assert shown["rows-lastBatch"] == 4 and shown["files-lastBatch"] == 1
    assert shown["filesFinalized-lastBatch"] == 0
    assert shown["oldestInvisibleRow-timestampMs"] == 1  # the 3 rows committed by batch 1
    assert shown["lastCommit-timestampMs"] > 0 and shown["commit-ms"] >= 0
    assert "failures-total" not in shown

    restarted = tmp_path / "box-after-restart"  # a new driver: a new, empty mailbox
    restarted.mkdir()
    shown = committed(restarted, cfg, 3, run_task(tmp_path, cfg, 3, [rows_of(written, 5, "b")]))
    assert shown["rows-total"] == written + 5 and shown["batches-total"] == 4
    assert shown["filesFinalized-total"] == len(finished_files(cfg))
    log = open_committed(storage_of(cfg))
    assert log is not None
    from_log = metrics.gauges_of(log[2])  # what a restarted driver shows before its commit
    assert from_log.pop("lastCommit-timestampMs") == 3  # batch 3's commit, on its own clock
    assert {k: shown[k] for k in from_log} == from_log
    assert from_log["rowsFinalized-total"] == sum(
        len(p.read_text().splitlines()) for p in finished_files(cfg))
    assert from_log["batchesUncounted-total"] == 0


def test_an_idle_batch_counts_as_one_and_the_byte_totals_are_the_tasks(tmp_path):
    cfg = config(tmp_path / "out")
    box = tmp_path / "box"
    box.mkdir()
    first = run_task(tmp_path, cfg, 0, [rows_of(0, 5, "a")])
    committed(box, cfg, 0, first)
    shown = committed(box, cfg, 1, run_task(tmp_path, cfg, 1, []))
    assert shown["batchesIdle-total"] == 1 and shown["batches-total"] == 2
    assert shown["bytes-total"] == sum(f.end - f.start for f in first.files) > 0
    assert shown["filesInProgress-bytes"] == shown["bytes-total"]  # the file still open
    assert shown["rows-lastBatch"] == shown["bytes-lastBatch"] == 0


def test_failures_count_by_kind_and_keep_the_last_values(tmp_path, monkeypatch):
    cfg = config(tmp_path / "out")
    box = tmp_path / "box"
    box.mkdir()
    before = committed(box, cfg, 0, run_task(tmp_path, cfg, 0, [rows_of(0, 5, "a")]))
    report = run_task(tmp_path, cfg, 1, [rows_of(5, 5, "a")])
    monkeypatch.setenv(failpoints.ENV_VAR, "driver.before_stage=raise")
    with pytest.raises(FailpointError):
        committed(box, cfg, 1, report)
    shown = mailbox.read(str(box))
    assert shown["failures-total"] == 1 and shown["failures-other-total"] == 1
    assert shown["rows-total"] == before["rows-total"] == 5  # the failed batch is not counted
    monkeypatch.delenv(failpoints.ENV_VAR)
    from commit_protocol.commit.committer import Committer
    from tests.unit.test_task_writer import SCHEMA_JSON

    with metrics.recording(str(box), 1) as recorded:
        recorded.aborted()
        Committer(storage_of(cfg), cfg, SCHEMA_JSON).abort(1, [report])
    assert mailbox.read(str(box))["batchesAborted-total"] == 1
    shown = committed(box, cfg, 1, run_task(tmp_path, cfg, 1, [rows_of(5, 5, "a")]))
    assert shown["rows-total"] == 10 and shown["failures-total"] == 1


def test_off_records_nothing_and_the_steps_run_as_before(tmp_path):
    cfg = config(tmp_path / "out")
    with metrics.recording(None, 0) as recorded:
        result = commit(None, cfg, 0, run_task(tmp_path, cfg, 0, [rows_of(0, 5, "a")]))
        recorded.committed(result.state, compacted=result.compacted)
    assert result.committed and list(tmp_path.iterdir()) == [tmp_path / "out"]


@pytest.fixture
def fresh_tables():
    forget()
    yield
    forget()


def test_a_tables_version_retries_and_followed_files_are_counted(tmp_path, monkeypatch,
                                                                 fresh_tables):
    """Against the table's own library: its version after each commit, a commit that lost a
    race to another writer once, a DELETE of another writer followed."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    from commit_protocol.tables.delta import table as delta

    cfg = dataclasses.replace(table_config(str(tmp_path / "out"), max_batches=1),
                              table_format="delta")
    box = tmp_path / "box"
    box.mkdir()

    def batch(batch_id: int) -> dict[str, int]:
        with metrics.recording(str(box), batch_id) as recorded:
            result = commit_batch(cfg, batch_id)
            recorded.committed(result.state, compacted=result.compacted)
        return mailbox.read(str(box))

    for batch_id in range(3):
        shown = batch(batch_id)
        assert shown["tableVersion"] == DeltaTable(cfg.path).version()
    assert shown["commitTable-ms"] >= 0 and "tableCommitRetries-total" not in shown
    append, lost = delta.DeltaFollowedTable._append, list[int]()

    def loses_once(self, known, commit):
        if not lost:
            lost.append(commit.batch_id)
            raise CommitFailedError("a concurrent transaction landed first")
        return append(self, known, commit)

    monkeypatch.setattr(delta.DeltaFollowedTable, "_append", loses_once)
    shown = batch(3)
    assert lost == [3] and shown["tableCommitRetries-total"] == 1
    assert shown["tableVersion"] == DeltaTable(cfg.path).version()
    before = set(DeltaTable(cfg.path).file_uris())
    DeltaTable(cfg.path).delete(f"id < {ROWS}")  # another writer: batch 0's rows
    removed = before - set(DeltaTable(cfg.path).file_uris())
    shown = batch(4)
    assert shown["tableFollowed-total"] == 1
    assert shown["tableFilesFollowed-total"] == len(removed) > 0


def _earlier_release(extra, **_):
    """How a release that keeps no totals commits: it copies the fields it does not know."""
    return {key: value for key, value in extra.items()}


def _no_release_kept_totals(extra, **_):
    return {key: value for key, value in extra.items() if key != TOTALS}


@pytest.mark.parametrize("earlier, batches, uncounted", [
    (_no_release_kept_totals, [0, 1], 2),  # an upgrade: the first two batches had none
    (_earlier_release, [1, 2], 2),  # a downgrade and back: the totals copied, not moved on
], ids=["upgraded", "downgraded-and-back"])
def test_totals_say_which_batches_an_earlier_release_left_uncounted(
        tmp_path, monkeypatch, capsys, earlier, batches, uncounted):
    from datasource.commands.cli import main

    cfg = config(tmp_path / "out")
    box = tmp_path / "box"
    box.mkdir()
    for batch_id in range(4):
        with monkeypatch.context() as patch:
            if batch_id in batches:
                patch.setattr("commit_protocol.commit.committer.advanced", earlier)
            shown = committed(box, cfg, batch_id,
                              run_task(tmp_path, cfg, batch_id, [rows_of(5 * batch_id, 5, "a")]))
    assert shown["batches-total"] == 4
    assert shown["batchesUncounted-total"] == uncounted
    assert shown["rows-total"] == 5 * (4 - uncounted)  # the counted batches', and no more
    assert main(["inspect", cfg.path]) == 0
    out = capsys.readouterr().out
    assert (f"(partial: {uncounted} of the batches were committed by an earlier release that "
            "counted nothing, and are not in these counts)") in out
    assert "rows: at least " in out
