"""A delta-rs DELETE beside the stream, interleaved deterministically (DESIGN 4.14).

The DELETE's ``DeltaTable`` reads version v, rotsink commits v+1 through its own commit path
(a blind append), then the DELETE commits. delta-rs checks it as Serializable: it fails
(``CommitFailedError``, delta-rs's ``ConcurrentAppend``) where its predicate may match a file
the append added (by the file's partition values and statistics), and lands where it cannot.
Neither delta-rs's own retry (``max_commit_retries``) nor ``delta.isolationLevel`` spelled
as Delta spells it (``WriteSerializable``) changes that; the retry docs/tables.md gives ("A
shared table": read the table again, run the DELETE again) makes it land. Measured with
deltalake 1.6.6; a delta-rs release that lands the stale DELETE fails these tests, which then
say the page is out of date.

Expected rows come from the input the test wrote; the table is read by delta-rs, the log by
pyarrow over the files rotsink's log lists, and ``verify`` checks the output.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.commit.committer import Committer
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import open_storage
from commit_protocol.task.task_writer import TaskWriter
from tests.unit.test_delta_commits import (
    QUERY,
    SCHEMA_JSON,
    batch_rows,
    commit_batch,
    forget,
    table_config,
)
from tests.unit.test_shared_tables import rotsink_ids, table_ids

TABLES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "tables.md"
# delta-rs's CommitConflictError::ConcurrentAppend, as Python sees it
CONCURRENT_APPEND = "a concurrent transactions added new data"
STALE = 3  # batches 0..2 in the table when the DELETE reads it; rotsink's batch 3 lands between
# rotsink's batch 3: rows of partition grp=a only (the day the stream is writing), ids 36..47
APPENDED = pa.record_batch({"id": pa.array(range(36, 48), pa.int64()),
                            "grp": pa.array(["a"] * 12)})


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


@dataclass(frozen=True)
class Delete:
    """A DELETE's predicate, the same test in Python over an input row, and whether delta-rs
    refuses it after rotsink's batch 3 landed (and why)."""
    sql: str
    matches: Callable[[int, str | None], bool]
    conflicts: bool
    reason: str


DELETES = [
    pytest.param(Delete("grp = 'b'", lambda i, g: g == "b", False,
                        "the append added no file to grp=b (partition values rule it out)"),
                 id="another-partition"),
    pytest.param(Delete("id < 20", lambda i, g: i < 20, False,
                        "the appended file's statistics (ids 36..47) rule it out"),
                 id="old-rows-of-the-appended-partition"),
    pytest.param(Delete("grp = 'a'", lambda i, g: g == "a", True,
                        "the appended file is in grp=a: the DELETE did not read it"),
                 id="the-appended-partition"),
    pytest.param(Delete("id % 2 = 0", lambda i, g: i % 2 == 0, True,
                        "neither partition nor statistics rule the appended file out"),
                 id="every-partition"),
]


def commit_rows(cfg: SinkConfig, batch_id: int, rows: pa.RecordBatch) -> None:
    """One micro-batch of ``rows`` through rotsink's commit path (as ``commit_batch``)."""
    storage = open_storage(cfg.path, cfg.fs_options)
    plan = WritePlan.from_state(Committer(storage, cfg, SCHEMA_JSON).latest_state(),
                                storage.root_uri)
    report = TaskWriter(storage, cfg, plan, batch_id=batch_id, partition=0, attempt=0,
                        query_id=QUERY).write([rows])
    Committer(storage, cfg, SCHEMA_JSON).commit(batch_id, [report])


def written(batches: list[pa.RecordBatch]) -> dict[int, str | None]:
    """The input: id -> grp of every row the test wrote."""
    rows: dict[int, str | None] = {}
    for batch in batches:
        rows.update(zip(batch.column("id").to_pylist(), batch.column("grp").to_pylist(),
                        strict=True))
    return rows


def stale_delete(tmp_path: Path, properties: dict[str, str] | None = None) -> tuple[
        SinkConfig, Any, dict[int, str | None]]:
    """Batches 0..2 committed; the other writer's ``DeltaTable`` reads version v; rotsink
    commits batch 3 at v+1 (a blind append). Returns the config, the stale table, the input."""
    from deltalake import DeltaTable

    cfg = table_config(str(tmp_path / "out"), max_batches=1)  # each batch's files roll
    for batch_id in range(STALE):
        commit_batch(cfg, batch_id)
    if properties:
        DeltaTable(cfg.path).alter.set_table_properties(properties)
    stale = DeltaTable(cfg.path)
    commit_rows(cfg, STALE, APPENDED)
    newest = DeltaTable(cfg.path)
    assert newest.version() == stale.version() + 1
    info = newest.history(1)[0]
    assert info["rotsinkBatch"] == STALE and info["isBlindAppend"] is True
    return cfg, stale, written([*map(batch_rows, range(STALE)), APPENDED])


def refused(delete: Callable[[], object]) -> Exception:
    """The error delta-rs fails the stale DELETE with; the test fails when it lands."""
    from deltalake.exceptions import CommitFailedError

    try:
        delete()
    except CommitFailedError as error:
        return error
    pytest.fail("delta-rs landed a DELETE that read the table before rotsink's blind append: "
                "docs/tables.md ('A shared table') says it fails and is run again; update it")


def assert_rows_and_next_commit(cfg: SinkConfig, expected: Counter) -> None:
    """The table holds ``expected``; verify passes; rotsink's next commit lands and its log
    follows the DELETE."""
    assert table_ids(cfg) == expected
    result = verify_output(open_storage(cfg.path), commit_timeout_s=0)
    assert result.ok, result.problems
    commit_batch(cfg, STALE + 1)
    expected = expected + Counter(batch_rows(STALE + 1).column("id").to_pylist())
    assert rotsink_ids(cfg) == table_ids(cfg) == expected


@pytest.mark.parametrize("delete", DELETES)
def test_a_stale_delta_rs_delete_fails_where_the_append_may_hold_its_rows_and_its_rerun_lands(
        tmp_path, delete):
    from deltalake import DeltaTable

    cfg, stale, rows = stale_delete(tmp_path)
    read_version = stale.version()
    if delete.conflicts:
        error = refused(lambda: stale.delete(delete.sql))
        assert CONCURRENT_APPEND in str(error), (delete.reason, error)
        assert DeltaTable(cfg.path).version() == read_version + 1  # nothing committed
        stale.update_incremental()  # the retry: read the table again, run it again
    stale.delete(delete.sql)
    newest = DeltaTable(cfg.path)
    assert newest.version() == read_version + 2
    assert newest.history(1)[0]["operation"] == "DELETE"
    # a rerun read rotsink's batch too, so its matching rows went as well
    assert_rows_and_next_commit(
        cfg, Counter(i for i, g in rows.items() if not delete.matches(i, g)))


def test_delta_rs_s_own_commit_retries_do_not_rerun_a_conflicting_delete(tmp_path):
    """``max_commit_retries`` retries a commit whose version another took when nothing
    conflicts; a conflict fails at once, so user code must rerun the DELETE."""
    from deltalake import DeltaTable
    from deltalake.transaction import CommitProperties

    cfg, stale, _ = stale_delete(tmp_path)
    error = refused(lambda: stale.delete(
        "grp = 'a'", commit_properties=CommitProperties(max_commit_retries=10)))
    assert CONCURRENT_APPEND in str(error)
    assert DeltaTable(cfg.path).version() == stale.version() + 1


@pytest.mark.parametrize("level, conflicts", [
    # Delta's spelling, which delta-rs does not recognise: it checks as Serializable
    pytest.param("WriteSerializable", True, id="delta-s-spelling"),
    pytest.param("Serializable", True, id="serializable"),
    # delta-rs's spelling: a blind append is not checked (delta-spark refuses the value)
    pytest.param("writeSerializable", False, id="delta-rs-s-spelling"),
])
def test_only_delta_rs_s_spelling_of_write_serializable_lets_the_stale_delete_land(
        tmp_path, level, conflicts):
    cfg, stale, rows = stale_delete(tmp_path, {"delta.isolationLevel": level})
    if conflicts:
        assert CONCURRENT_APPEND in str(refused(lambda: stale.delete("grp = 'a'")))
        return
    read = {i for i in rows if i < STALE * 12}
    stale.delete("grp = 'a'")  # deletes the rows it read; the stream's rows stay
    assert_rows_and_next_commit(
        cfg, Counter(i for i, g in rows.items() if not (g == "a" and i in read)))


def documented_retry() -> Callable[..., Any]:
    """``delete_rows`` as docs/tables.md's 'A shared table' defines it."""
    section = TABLES_PAGE.read_text().split("\n## A shared table\n", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"```python\n(.*?)```", section, re.S)
              if "def delete_rows" in b]
    assert len(blocks) == 1, "docs/tables.md 'A shared table' lost its delta-rs retry"
    namespace: dict[str, Any] = {}
    exec(blocks[0], namespace)  # noqa: S102 - the page's own snippet, run as written
    return namespace["delete_rows"]


def test_the_documented_retry_lands_a_stale_delta_rs_delete_on_its_second_try(
        tmp_path, monkeypatch):
    from deltalake import DeltaTable

    delete_rows = documented_retry()
    cfg, stale, rows = stale_delete(tmp_path)
    read_version = stale.version()
    reads: list[int] = []
    reread = DeltaTable.update_incremental

    def counted(table: DeltaTable) -> None:
        reads.append(table.version())
        reread(table)

    monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    delete_rows(stale, "grp = 'a'")
    monkeypatch.undo()  # rotsink's own reads of the table, below, are not the retry's
    assert reads == [read_version]  # one conflict, one read of the table, one rerun that landed
    assert DeltaTable(cfg.path).history(1)[0]["operation"] == "DELETE"
    assert_rows_and_next_commit(cfg, Counter(i for i, g in rows.items() if g != "a"))
