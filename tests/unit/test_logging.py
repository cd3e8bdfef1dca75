"""What an operator sees in ``logging.getLogger("rotsink")``: one INFO line per committed
batch, a WARNING whenever the protocol repairs or defends something, never a key byte."""

from __future__ import annotations

import base64
import logging
import os
import time

import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.naming import INPROGRESS_DIR, partition_claim
from tests.unit.test_task_writer import SCHEMA_JSON, commit, config, rows, run_task, storage_of


def test_each_committed_batch_is_one_info_line(tmp_path, caplog):
    cfg = config(tmp_path, rotation={"max_records": 3})
    with caplog.at_level(logging.INFO, logger="rotsink"):
        commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 4)]))
    (line,) = [r for r in caplog.records if r.name == "rotsink.commit"]
    assert line.levelno == logging.INFO
    assert line.getMessage().startswith("batch 0 committed in ")
    assert ("1 task(s), 4 row(s)" in line.getMessage()
            and "1 file(s) finalized (1 by maxRecords); 1 in progress" in line.getMessage())
    # Spark drops writeStream.partitionBy(...) for Python sinks: the line says the layout
    assert "byte(s) appended (not partitioned);" in line.getMessage()


def test_the_commit_line_names_the_partition_columns(tmp_path, caplog):
    cfg = config(tmp_path, partition_by=("g",))
    with caplog.at_level(logging.INFO, logger="rotsink"):
        commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 2, g=["a", "b"])]))
    (line,) = [r for r in caplog.records if r.name == "rotsink.commit"]
    assert "appended (partitioned by g);" in line.getMessage()


def test_repairs_and_fences_are_warnings(tmp_path, caplog, monkeypatch):
    cfg = config(tmp_path, rotation={"max_records": 3})  # batch 1 finishes a file: an intent
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 2)]))
    monkeypatch.setenv(failpoints.ENV_VAR, "driver.before_log_write=raise")
    with pytest.raises(failpoints.FailpointError):
        commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(2, 2)]))
    monkeypatch.delenv(failpoints.ENV_VAR)
    storage_of(cfg).create_marker(partition_claim(2, 0))  # a zombie holds batch 2's claim
    with caplog.at_level(logging.WARNING, logger="rotsink"):
        Committer(storage_of(cfg), cfg, SCHEMA_JSON).recover()
        run_task(tmp_path, cfg, 2, [rows(4, 2)])
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("batch 1: finishing the commit an earlier driver decided" in m
               for m in messages)
    assert any("continues from a fresh copy of its" in m for m in messages)


def test_no_key_byte_ever_reaches_the_log(tmp_path, caplog, monkeypatch):
    key = os.urandom(32)
    monkeypatch.setenv("LOG_KEY", base64.b64encode(key).decode())
    cfg = config(tmp_path, compression="zstd", keys=KeyRefs("env:LOG_KEY"),
                 rotation={"max_records": 2})
    with caplog.at_level(logging.DEBUG, logger="rotsink"):
        for batch in range(3):
            commit(tmp_path, cfg, batch, run_task(tmp_path, cfg, batch, [rows(batch * 3, 3)]))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert text and base64.b64encode(key).decode() not in text and key.hex() not in text


def test_spark_started_processes_get_a_handler_at_the_chosen_level(monkeypatch):
    from datasource.spark import logs

    logger = logging.getLogger("rotsink")
    saved = logger.handlers[:], logger.level, logger.propagate
    try:
        logger.handlers.clear()
        monkeypatch.setenv(logs.ENV_VAR, "info")
        logs.configure()
        assert len(logger.handlers) == 1 and logger.level == logging.INFO
        logs.configure()  # once per process
        assert len(logger.handlers) == 1
        logger.handlers.clear()
        monkeypatch.setenv(logs.ENV_VAR, "loud")  # not a level: the default
        logs.configure()
        assert logger.level == logging.WARNING
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved


def test_a_named_query_is_named_in_its_lines_and_in_its_log(tmp_path, caplog):
    """``.queryName("events")`` reaches the sink as the option ``queryName``: every line of its
    commits names it (an unnamed query's lines are as above), and the log keeps it for
    ``rotsink inspect`` and the message that refuses a second query."""
    from datasource.commands.inspect import schema_lines
    from datasource.writing.writer import RotSinkStreamWriter, TaskCommitMessage

    cfg = config(tmp_path, rotation={"max_records": 3}, query_name="events")
    writer = RotSinkStreamWriter(cfg, SCHEMA_JSON)
    report = run_task(tmp_path, cfg, 0, [rows(0, 4)])
    # the writer gives the rotsink logger a handler of its own (datasource.spark.logs), as in the
    # Python processes Spark starts: the test's goes beside it
    logging.getLogger("rotsink").addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="rotsink"):
            writer.commit([TaskCommitMessage(report)], 0)
    finally:
        logging.getLogger("rotsink").removeHandler(caplog.handler)
    (line,) = {r.getMessage() for r in caplog.records if r.name == "rotsink.commit"}
    assert line.startswith("query events: batch 0 committed in ")
    assert schema_lines(str(tmp_path))[0] == "query: events (id q)"
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rotsink"):  # the name is the call's, not the
        commit(tmp_path, config(tmp_path), 1, run_task(tmp_path, cfg, 1, [rows(4, 1)]))
    (line,) = [r for r in caplog.records if r.name == "rotsink.commit"]  # process's
    assert line.getMessage().startswith("batch 1 committed in ")
    assert schema_lines(str(tmp_path))[0] == "query: unnamed (id q)"  # the newest name


def test_the_staged_rows_of_finished_files_go_without_a_warning(tmp_path, caplog):
    """A Parquet file stages its rows while in progress and is encoded to a fresh temp when it
    rolls; the clean-up deletes the staged rows after ``log.cleanupDelay``. That is routine:
    one INFO line, no WARNING (an operator's warnings mean something happened)."""
    cfg = config(tmp_path, format="parquet", file_suffix=".parquet", compact_interval=2,
                 cleanup_delay_ms=0, rotation={"max_batches": 2})  # files span two batches
    later = int(time.time() * 1000) + 60_000  # every temp is older than the delay
    with caplog.at_level(logging.INFO, logger="rotsink"):
        for batch in range(4):
            report = run_task(tmp_path, cfg, batch, [rows(batch * 2, 2)])
            Committer(storage_of(cfg), cfg, SCHEMA_JSON).commit(batch, [report], now_ms=later)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    deleted = [r.getMessage() for r in caplog.records if "temp file(s) no committed" in
               r.getMessage()]
    assert deleted == ["batch 1: deleted 1 temp file(s) no committed state names, older than "
                       "log.cleanupDelay (staged rows of files finished since, replaced copies, "
                       "failed attempts)", "batch 3: deleted 1 temp file(s) no committed state "
                       "names, older than log.cleanupDelay (staged rows of files finished since, "
                       "replaced copies, failed attempts)"]
    assert sorted(p.name for p in (tmp_path / INPROGRESS_DIR).iterdir()) == []  # none left
    assert len(list(tmp_path.glob("part-*.parquet"))) == 2  # two batches' rows each
