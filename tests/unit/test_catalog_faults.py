"""Catalogs and table libraries that fail after the commit point: a REST catalog answering 503,
losing its answer to a commit it made, or answering after the client's timeout (SeaweedFS's
Iceberg REST catalog behind the failing proxy), a SQL catalog's SQLite file locked by
another process, and delta-rs's commit on S3 failing with an I/O error or losing its answer.
The table step is tried again (``commit_protocol/commit/after_commit.py``); one that keeps
failing fails the commit naming the batch and the step, the batch stays committed, and the
next commit catches the table up. The log and the table agree in the end, each file listed once.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time

import pytest

from commit_protocol.commit import after_commit
from commit_protocol.vocabulary.errors import AfterCommitError
from tests.support.faulty_proxy import FailingProxy
from tests.unit.test_delta_commits import commit_batch
from tests.unit.test_iceberg_commits import (
    assert_table_follows_the_log,
    batches_of,
    fresh_process_memory,  # noqa: F401  (a fixture: each test a new driver)
    iceberg_config,
    table_of,
)


@pytest.fixture
def no_waits(monkeypatch):
    """The retries' waits shortened (their lengths are after_commit's, tested there)."""
    monkeypatch.setattr(after_commit, "RETRY_DELAYS_S", (0.05, 0.1, 0.2, 0.4))


@pytest.fixture
def rest_output(request, tmp_path, monkeypatch):
    """An output on SeaweedFS whose Iceberg table is in its REST catalog, reached through a
    failing proxy; the proxy."""
    from tests.support.s3server import DUMMY_CREDENTIALS, create_bucket, rest_catalog_options

    endpoint, catalog = request.getfixturevalue("seaweedfs_catalog")
    proxy = FailingProxy(catalog)
    bucket = create_bucket(endpoint, f"faults-{tmp_path.name[-20:].lower().replace('_', '-')}")
    monkeypatch.setenv("ICEBERG_TEST_SECRET", DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    name = f"t_{bucket.replace('-', '_')}"
    options = rest_catalog_options(proxy.endpoint, endpoint, name)
    cfg = iceberg_config(f"s3://{bucket}/out", fs_options={"endpoint_url": endpoint},
                         table_options=options)
    yield cfg, proxy, f"/tables/{name}"
    proxy.stop()


@pytest.mark.parametrize("fault, times", [("503", 2), ("reset-after", 1)],
                         ids=["503-twice", "answer-lost"])
def test_a_table_commit_the_catalog_fails_for_a_while_is_tried_again(rest_output, no_waits,
                                                                     fault, times):
    """503 twice: the third attempt commits. The answer lost after the catalog committed: the
    retry finds the batch in the table (its mark) and adds nothing twice."""
    cfg, proxy, table_path = rest_output
    for batch_id in range(2):
        commit_batch(cfg, batch_id)
    proxy.fail("POST", table_path, times, status=503 if fault == "503" else 0,
               fault="" if fault == "503" else fault)
    commit_batch(cfg, 2)
    commit_batch(cfg, 3)  # rolls files: a table commit of its own
    assert len(proxy.failed) == times, proxy.seen[-10:]
    assert batches_of(table_of(cfg)) == ["0", "1", "3"]
    assert_table_follows_the_log(cfg)


HELD_S = 10.0


def test_a_table_commit_answered_after_the_timeout_is_tried_again_and_lands_once(rest_output,
                                                                              no_waits):
    """pyiceberg's REST client waits for ever by itself; rotsink's gives up after
    ``rest.client.socket-timeout-ms`` and tries the step again. The held commit reaches the
    catalog after the retry committed: the catalog refuses it (the table moved on), and the
    table holds the batch once."""
    cfg, proxy, table_path = rest_output
    cfg = dataclasses.replace(cfg, table_options={
        **cfg.table_options, "catalog.rest.client.socket-timeout-ms": "1000"})
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    # held ten times the timeout: the commit returns first on any machine, however slow
    proxy.fail("POST", table_path, 1, fault="slow", slow_s=HELD_S)
    commit_batch(cfg, 3)  # rolls files: its table commit is held
    held_then = [r for r in proxy.requests if r.ended - r.started >= HELD_S]
    assert held_then == [], "the commit waited for the held answer"
    deadline = time.monotonic() + 6 * HELD_S
    while not (held := [r for r in proxy.requests if r.ended - r.started >= HELD_S]):
        assert time.monotonic() < deadline, "the held commit never reached the catalog"
        time.sleep(0.1)
    assert len(proxy.failed) == 1
    assert held[0].status >= 400, \
        f"the late commit was accepted ({held[0].status}): it would add the batch twice"
    assert batches_of(table_of(cfg)) == ["0", "1", "3"]
    assert_table_follows_the_log(cfg)


def test_a_catalog_that_keeps_failing_fails_the_commit_and_the_next_catches_up(rest_output,
                                                                             no_waits):
    cfg, proxy, table_path = rest_output
    commit_batch(cfg, 0)
    proxy.fail("POST", table_path, 99)
    with pytest.raises(AfterCommitError, match=r"batch 1 is committed .* its table commit "
                                               r"\(iceberg\) failed: .*restart the query"):
        commit_batch(cfg, 1)
    proxy.clear()
    commit_batch(cfg, 2)  # the batch after it (a replay of batch 1 would do the same)
    assert batches_of(table_of(cfg)) == ["0", "1"]  # batch 2 rolls nothing
    assert_table_follows_the_log(cfg)


def test_a_sqlite_catalog_locked_by_another_writer_is_waited_for(tmp_path, no_waits,
                                                                 monkeypatch):
    """Another connection (as another process would) takes the catalog's SQLite file as the
    table step starts and holds it for longer than SQLite's own wait: the table step fails
    and is tried again until the lock is gone."""
    from commit_protocol.tables.follow import TableFollower

    cfg = iceberg_config(str(tmp_path / "out"), table_options={
        "catalog.type": "sql", "catalog.uri": f"sqlite:///{tmp_path}/catalog.db?timeout=0.2",
        "catalog.warehouse": f"file://{tmp_path}/warehouse"})
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    holder = sqlite3.connect(tmp_path / "catalog.db", isolation_level=None,
                             check_same_thread=False)
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    follow = TableFollower.follow

    def locked_first(self, *args, **kwargs):
        if not release.is_alive() and not release.finished.is_set():
            holder.execute("BEGIN EXCLUSIVE")
            release.start()
        return follow(self, *args, **kwargs)

    monkeypatch.setattr(TableFollower, "follow", locked_first)
    started = time.monotonic()
    commit_batch(cfg, 3)  # rolls files: its table commit meets the lock
    release.join()
    assert time.monotonic() - started >= 0.5  # it waited for the lock, then committed
    assert batches_of(table_of(cfg)) == ["0", "1", "3"]
    assert_table_follows_the_log(cfg)


# delta-rs's object store sends a request 11 times (10 retries, 3.4 s in all here) before
# its error reaches rotsink, which tries the table step 5 times (after_commit.RETRY_DELAYS_S)
DELTA_RS_ATTEMPTS, TABLE_STEP_ATTEMPTS = 11, 5


@pytest.mark.parametrize("times, fault, reached", [
    (1, "reset-after", 0),  # the commit's answer lost: delta-rs's retry finds its version
    (3 * DELTA_RS_ATTEMPTS, "", 0),  # past delta-rs's retries: rotsink's retry commits
    (DELTA_RS_ATTEMPTS * TABLE_STEP_ATTEMPTS, "", 1),  # past both: the restart catches up
], ids=["answer-lost", "past-delta-rs-retries", "past-every-retry"])
def test_a_delta_commit_failing_with_an_io_error_is_tried_again(seaweedfs_endpoint, tmp_path,
                                                                no_waits, times, fault,
                                                                reached):
    """delta-rs's commit (the PUT of ``_delta_log/<version>.json`` on S3) fails with an I/O
    error (503 from SeaweedFS behind the proxy), or lands with its answer lost. The batch
    stays committed; the table step is tried again, by delta-rs, then by rotsink, then by
    the query's restart; the table ends equal to the finalized files, each row once."""
    from tests.support.fault_run import run_with_faults

    outcome = run_with_faults("s3", seaweedfs_endpoint, tmp_path, table=True, batches=4,
                              share=0, arm=lambda proxy: proxy.fail(
                                  "PUT", "/_delta_log/0000", times, fault=fault))
    assert outcome.armed_faults == times, outcome.line()
    assert sum(outcome.reached.values()) == reached, outcome.examples
    if reached:
        assert "its table commit (delta) failed" in outcome.examples["AfterCommitError"]
    assert outcome.exact and outcome.table_matches, outcome.line()
