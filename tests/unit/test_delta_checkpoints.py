"""Checkpoints and the clean-up of the Delta log without Spark: at the table's own
``delta.checkpointInterval`` (set through delta-rs, changed while the query runs, invalid),
expired log files removed at rotsink's checkpoints and at least once a period between them,
read from ``_delta_log`` on disk."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import open_storage
from commit_protocol.tables.delta import snapshots as delta_snapshots
from commit_protocol.tables.delta.storage import delta_location
from tests.unit.test_delta_commits import QUERY, ROWS, commit_batch, delta, forget, table_config

HOUR_S = 3600


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


def log_dir(cfg: SinkConfig) -> Path:
    return Path(cfg.path) / "_delta_log"


def checkpoints(cfg: SinkConfig) -> list[int]:
    """The versions of the checkpoints in the table's log, from its files."""
    return sorted(int(p.name.split(".")[0]) for p in log_dir(cfg).glob("*.checkpoint.parquet"))


def commit_files(cfg: SinkConfig) -> list[int]:
    """The versions of the commit files in the table's log."""
    return sorted(int(p.name.split(".")[0]) for p in log_dir(cfg).glob("*.json"))


def set_properties(cfg: SinkConfig, properties: dict[str, str]) -> int:
    """Another writer (delta-rs) sets table properties: one commit; returns its version."""
    from deltalake.transaction import PostCommitHookProperties

    table = delta(cfg)
    # its own hook would checkpoint where (version + 1) % interval == 0: not what is tested
    table.alter.set_table_properties(properties, post_commithook_properties=(
        PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)))
    table.update_incremental()
    return table.version()


def age_log(cfg: SinkConfig, seconds: float) -> None:
    """Every file in the log made ``seconds`` ago, as delta-rs's clean-up reads its age
    (the file's modification time): a retention passes without waiting for it."""
    then = time.time() - seconds
    for path in log_dir(cfg).iterdir():
        os.utime(path, (then, then))


def commit_batches(cfg: SinkConfig, batches: range) -> None:
    """One driver's commits, and the background refresh after the last (its checkpoint,
    its clean-up) waited for; the driver's snapshot is kept."""
    for batch_id in batches:
        commit_batch(cfg, batch_id)
    uri, options = delta_location(open_storage(cfg.path, cfg.fs_options).root_uri, cfg)
    known = delta_snapshots.snapshot(uri, options, fresh=False)
    assert known is not None
    known.ready()


def assert_table_reads_all(cfg: SinkConfig, batches: int) -> None:
    """The table opens at its newest version (from what its log keeps) with every row."""
    table = delta(cfg)
    assert table.transaction_version(f"rotsink-{QUERY}") == batches - 1
    assert table.to_pyarrow_table(columns=["id"]).num_rows == batches * ROWS


def one_version_a_batch(tmp_path: Path) -> SinkConfig:
    """Files roll at every batch: each batch after the first is one table version."""
    return table_config(str(tmp_path / "out"), max_batches=1)


def test_checkpoints_come_at_the_tables_interval_as_it_changes(tmp_path):
    """Delta's rule, at the interval another writer set and then changed while the query
    runs: a checkpoint at each of rotsink's versions that is a multiple of it."""
    cfg = one_version_a_batch(tmp_path)
    commit_batch(cfg, 0)  # creates the table: version 0
    assert set_properties(cfg, {"delta.checkpointInterval": "10"}) == 1
    commit_batches(cfg, range(1, 25))  # versions 2 to 25
    assert delta(cfg).version() == 25
    assert checkpoints(cfg) == [10, 20]
    assert set_properties(cfg, {"delta.checkpointInterval": "4"}) == 26
    commit_batches(cfg, range(25, 32))  # versions 27 to 33
    assert checkpoints(cfg) == [10, 20, 28, 32]
    assert_table_reads_all(cfg, 32)


def test_expired_log_files_are_removed_at_the_checkpoint(tmp_path, monkeypatch):
    """The log files past ``delta.logRetentionDuration`` go at the checkpoint that makes
    them unneeded, with no clean-up due by time."""
    monkeypatch.setattr(delta_snapshots, "CLEANUP_EVERY_S", 1000 * HOUR_S)
    cfg = one_version_a_batch(tmp_path)
    commit_batch(cfg, 0)
    set_properties(cfg, {"delta.checkpointInterval": "5",
                         "delta.logRetentionDuration": "interval 1 hour"})
    commit_batches(cfg, range(1, 4))  # versions 2 to 4; cleaned at 2 (its first refresh)
    age_log(cfg, 2 * HOUR_S)
    assert commit_files(cfg) == [0, 1, 2, 3, 4] and checkpoints(cfg) == []
    commit_batches(cfg, range(4, 5))  # version 5, checkpointed
    assert checkpoints(cfg) == [5]
    assert commit_files(cfg) == [5]
    commit_batches(cfg, range(5, 6))  # version 6
    assert checkpoints(cfg) == [5] and commit_files(cfg) == [5, 6]
    assert_table_reads_all(cfg, 6)


@pytest.mark.parametrize("due, properties, cleaned", [
    ("period", {}, True),  # CLEANUP_EVERY_S passed since the last clean-up
    ("new-driver", {}, True),  # a new process cleans at its first refresh
    ("period", {"delta.enableExpiredLogCleanup": "false"}, False),  # the table keeps its log
], ids=["the period passed", "a new driver", "clean-up turned off"])
def test_the_log_is_cleaned_between_checkpoints(tmp_path, monkeypatch, due, properties, cleaned):
    """No checkpoint of rotsink's is due (interval 100), but another writer checkpointed and
    the files before it expired: they go once the clean-up comes due, and not before."""
    cfg = one_version_a_batch(tmp_path)
    commit_batch(cfg, 0)
    set_properties(cfg, {"delta.logRetentionDuration": "interval 1 hour", **properties})
    commit_batches(cfg, range(1, 3))  # versions 2 and 3: this process cleaned at version 2
    table = delta(cfg)
    table.create_checkpoint()  # another writer's checkpoint, at version 3
    age_log(cfg, 2 * HOUR_S)
    commit_batches(cfg, range(3, 4))  # version 4: within the period, no checkpoint due
    assert commit_files(cfg) == [0, 1, 2, 3, 4]
    if due == "period":
        monkeypatch.setattr(delta_snapshots, "CLEANUP_EVERY_S", 0)
    else:
        forget()
    commit_batches(cfg, range(4, 5))  # version 5
    assert checkpoints(cfg) == [3]
    assert commit_files(cfg) == ([3, 4, 5] if cleaned else [0, 1, 2, 3, 4, 5])
    assert_table_reads_all(cfg, 5)


@pytest.mark.parametrize("value", ["ten", "0", "-5", "1.5", " 10"],
                         ids=["a word", "zero", "negative", "a fraction", "spaces"])
def test_an_invalid_interval_falls_back_to_the_default_with_one_warning(
        tmp_path, monkeypatch, caplog, value):
    """The commit goes on; checkpoints come at the default interval (made 4 here to keep
    the test short: it is 100); the warning names the property and the value, once."""
    assert delta_snapshots.CHECKPOINT_EVERY == 100
    monkeypatch.setattr(delta_snapshots, "CHECKPOINT_EVERY", 4)
    cfg = one_version_a_batch(tmp_path)
    commit_batch(cfg, 0)
    set_properties(cfg, {"delta.checkpointInterval": value})
    with caplog.at_level(logging.WARNING, logger="rotsink"):
        commit_batches(cfg, range(1, 10))  # versions 2 to 10
    assert checkpoints(cfg) == [4, 8]
    (record,) = caplog.records
    assert f"delta.checkpointInterval={value!r} is not a positive integer" in \
        record.getMessage()
    assert "checkpoints every 4 versions (the default)" in record.getMessage()
    assert_table_reads_all(cfg, 10)
