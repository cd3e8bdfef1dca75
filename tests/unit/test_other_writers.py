"""No other writer's DELETE, UPDATE or MERGE fails because of the stream (DESIGN 4.14).

Deterministic: the other writer's transaction reads table version v, rotsink commits v+1 (a
batch whose files hold rows the DELETE's predicate matches), then the other writer commits.
Iceberg: it lands on its first try, because the tables rotsink creates ask for ``snapshot``
isolation of deletes, updates and merges; it removes the rows of the snapshot it read, and
the rows the stream appended meanwhile stay. Delta: rotsink's commits are blind appends
(``isBlindAppend``), as Delta's own sink's; open-source Delta runs a DELETE under
Serializable (the only level delta-spark lets a table set, delta-rs's default), under which
it conflicts only with appended files its predicate may match (their partition values and
statistics decide), and where a table asks for WriteSerializable, with none. Without
rotsink's settings the same interleavings fail (shown for each format, so that the tests
would fail if rotsink dropped them).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from tests.unit.test_delta_commits import ROWS, commit_batch, forget, table_config
from tests.unit.test_shared_tables import _iceberg, rotsink_ids, table_ids


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


def config(tmp_path, table_format: str):
    return dataclasses.replace(table_config(str(tmp_path / "out"), max_batches=1),
                               table_format=table_format)


def every_id(batches: int) -> Counter:
    return Counter(range(batches * ROWS))


def test_a_delta_delete_of_rows_the_streams_new_files_cannot_hold_lands(tmp_path):
    """Under Serializable (open-source Delta's only level, delta-rs's default) a DELETE that
    read version v conflicts with the files appended since that its predicate may match: the
    appended file's statistics (ids 36..47) rule out ``id < 20``, so it lands on its first
    try, and the stream's rows stay."""
    from deltalake import DeltaTable

    cfg = config(tmp_path, "delta")
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    other = DeltaTable(cfg.path)  # the DELETE's transaction reads version v
    read_version = other.version()
    commit_batch(cfg, 3)  # rotsink commits v+1
    other.delete("id < 20")  # commits on top of it, first try
    latest = DeltaTable(cfg.path)
    assert latest.version() == read_version + 2
    info = latest.history(2)
    assert info[0]["operation"] == "DELETE" and info[1]["isBlindAppend"] is True
    assert table_ids(cfg) == every_id(4) - Counter(range(20))
    commit_batch(cfg, 4)  # the log follows the DELETE at its next commit
    assert rotsink_ids(cfg) == table_ids(cfg) == every_id(5) - Counter(range(20))


def test_a_delta_delete_that_may_match_the_new_files_is_a_conflict_of_serializable(tmp_path):
    """Its predicate may match the file rotsink appended meanwhile: Delta's Serializable
    isolation refuses it (the DELETE would miss those rows; run again, it deletes them). A
    table that asks for WriteSerializable (delta-rs reads ``writeSerializable``) lets it land,
    because rotsink's appends say ``isBlindAppend``; rotsink sets no level of its own."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    cfg = config(tmp_path, "delta")
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    other = DeltaTable(cfg.path)
    commit_batch(cfg, 3)
    with pytest.raises(CommitFailedError, match="concurrent transactions added new data"):
        other.delete("id % 2 = 0")
    DeltaTable(cfg.path).alter.set_table_properties({"delta.isolationLevel": "writeSerializable"})
    other = DeltaTable(cfg.path)
    commit_batch(cfg, 4)
    other.delete("id % 2 = 0")  # lands: rotsink's append was blind
    assert table_ids(cfg) == every_id(5) - Counter(i for i in range(4 * ROWS) if i % 2 == 0)


def test_without_blind_appends_even_a_write_serializable_table_refuses_it(tmp_path, monkeypatch):
    """The interleaving above on a WriteSerializable table, rotsink's append not marked
    blind: the DELETE fails (what the issue saw beside a stream)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    from commit_protocol.tables.delta import table as delta

    cfg = config(tmp_path, "delta")
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    DeltaTable(cfg.path).alter.set_table_properties({"delta.isolationLevel": "writeSerializable"})
    plain = delta._properties
    monkeypatch.setattr(delta, "_properties", lambda c, blind=True: plain(c, blind=False))
    other = DeltaTable(cfg.path)
    commit_batch(cfg, 3)
    with pytest.raises(CommitFailedError, match="concurrent"):
        other.delete("id % 2 = 0")


def test_an_iceberg_delete_that_read_the_table_before_rotsinks_commit_lands(tmp_path):
    from commit_protocol.tables.iceberg.maintenance import ISOLATION

    cfg = config(tmp_path, "iceberg")
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    other = _iceberg(cfg)  # the DELETE's transaction reads snapshot v
    assert {k: other.properties[k] for k in ISOLATION} == ISOLATION
    commit_batch(cfg, 3)
    other.delete(delete_filter="id < 40")  # rows 36..39 of batch 3 match too
    assert table_ids(cfg) == every_id(4) - Counter(range(36))
    table = _iceberg(cfg)
    assert table.current_snapshot().summary.operation.value in ("overwrite", "delete")
    commit_batch(cfg, 4)
    assert rotsink_ids(cfg) == table_ids(cfg) == every_id(5) - Counter(range(36))


def test_under_serializable_isolation_the_same_iceberg_delete_fails(tmp_path):
    """A table that asks for serializable deletes (Iceberg's default: what a table rotsink
    joined may say) refuses the DELETE that read before rotsink's append of matching rows."""
    from pyiceberg.exceptions import ValidationException

    cfg = config(tmp_path, "iceberg")
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    with _iceberg(cfg).transaction() as tx:
        tx.set_properties({"write.delete.isolation-level": "serializable"})
    other = _iceberg(cfg)
    commit_batch(cfg, 3)
    with pytest.raises(ValidationException, match="Added data files were found"):
        other.delete(delete_filter="id < 40")
