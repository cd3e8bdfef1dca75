"""An Iceberg table that stays flat (``commit_protocol.tables.iceberg.maintenance``): the tables
rotsink creates bound their metadata files and merge their manifests; snapshots expire by age
and the manifest lists and manifests only they named are deleted, never a data file nor a
mark; a table rotsink joined keeps its settings and is expired only on request; a crash in the
middle of an expiry loses and duplicates nothing."""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.tables.iceberg.maintenance import (
    BOUNDED_METADATA,
    CREATED_BY,
    ISOLATION,
    ExpiryPolicy,
)
from commit_protocol.vocabulary import failpoints
from tests.unit.test_delta_commits import ROWS, commit_batch, forget, table_config
from tests.unit.test_shared_tables import _iceberg, rotsink_ids, table_ids


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


def config(tmp_path, **table_options: str):
    return dataclasses.replace(table_config(str(tmp_path / "out"), max_batches=1),
                               table_format="iceberg",
                               table_options=dict(table_options))


def metadata_files(cfg, suffix: str) -> list[Path]:
    return sorted((Path(cfg.path) / "metadata").glob(f"*{suffix}"))


def killed_after_its_commit(cfg, batch_id: int, point: str) -> None:
    """Commit ``batch_id`` (log and table) and die at ``point`` after; a new driver follows."""
    os.environ[failpoints.ENV_VAR] = f"{point}=raise"
    try:
        with pytest.raises(failpoints.FailpointError):
            commit_batch(cfg, batch_id)
    finally:
        del os.environ[failpoints.ENV_VAR]
    forget()


def named_by_snapshots(table) -> set[str]:
    """The manifest lists and manifests the table's snapshots name, as pyiceberg reads them."""
    named = {Path(s.manifest_list).name for s in table.snapshots()}
    for snapshot in table.snapshots():
        named |= {Path(m.manifest_path).name for m in snapshot.manifests(table.io)}
    return named


def data_files(cfg) -> set[str]:
    return {p.name for p in Path(cfg.path).rglob("part-*.parquet")}


def test_a_table_rotsink_creates_asks_for_bounded_metadata_and_snapshot_isolation(tmp_path):
    cfg = config(tmp_path)
    commit_batch(cfg, 0)
    properties = _iceberg(cfg).properties
    assert {k: properties[k] for k in {**ISOLATION, **BOUNDED_METADATA}} == \
        {**ISOLATION, **BOUNDED_METADATA}
    assert properties[CREATED_BY] == "rotsink-q1"


def test_a_created_table_keeps_ten_metadata_files_behind_the_current_one(tmp_path):
    """Each ``metadata.json`` holds every snapshot kept (megabytes at a table's plateau):
    rotsink's tables keep 10 old ones, not Iceberg's default 100."""
    cfg = config(tmp_path)
    for batch_id in range(14):
        commit_batch(cfg, batch_id)
    assert len(metadata_files(cfg, ".metadata.json")) == 10 + 1
    assert table_ids(cfg) == Counter(range(14 * ROWS))


def test_metadata_files_and_manifests_stay_bounded(tmp_path):
    """Small bounds set on the table (a value anyone set is kept): 30 commits leave at most
    previous-versions-max + 1 metadata files and, merged, a handful of manifests."""
    cfg = config(tmp_path)
    commit_batch(cfg, 0)
    with _iceberg(cfg).transaction() as tx:
        tx.set_properties({"write.metadata.previous-versions-max": "5",
                           "commit.manifest.min-count-to-merge": "4"})
    for batch_id in range(1, 30):
        commit_batch(cfg, batch_id)
    table = _iceberg(cfg)
    assert len(metadata_files(cfg, ".metadata.json")) <= 6 + 1  # + the current one
    assert len(table.current_snapshot().manifests(table.io)) <= 5
    assert table.properties["write.metadata.previous-versions-max"] == "5"
    assert table_ids(cfg) == rotsink_ids(cfg) == Counter(range(30 * ROWS))


def test_a_merging_append_leaves_no_manifest_that_no_snapshot_names(tmp_path):
    """A merging append writes the batch's manifest and merges it into a new one: the first
    is deleted after the commit (pyiceberg leaves it, one file per merge for good)."""
    cfg = config(tmp_path)
    commit_batch(cfg, 0)
    with _iceberg(cfg).transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "3"})
    for batch_id in range(1, 12):
        commit_batch(cfg, batch_id)
    table = _iceberg(cfg)  # every snapshot is kept (5 days): what they name, per pyiceberg
    named = named_by_snapshots(table)
    on_storage = {p.name for p in metadata_files(cfg, ".avro")}
    assert len(table.current_snapshot().manifests(table.io)) < 3  # merges ran
    assert on_storage == named
    assert table_ids(cfg) == rotsink_ids(cfg) == Counter(range(12 * ROWS))


def test_a_crash_before_the_clean_up_of_a_merging_commit_leaves_one_manifest_behind(tmp_path):
    cfg = config(tmp_path)
    commit_batch(cfg, 0)
    with _iceberg(cfg).transaction() as tx:  # every append from here merges
        tx.set_properties({"commit.manifest.min-count-to-merge": "2"})
    killed_after_its_commit(cfg, 1, "table.after_commit")  # before its clean-up
    for batch_id in (2, 3):
        commit_batch(cfg, batch_id)
    table = _iceberg(cfg)
    named = named_by_snapshots(table)
    assert len({p.name for p in metadata_files(cfg, ".avro")} - named) == 1  # batch 1's
    assert table_ids(cfg) == rotsink_ids(cfg) == Counter(range(4 * ROWS))


def test_snapshots_expire_by_age_and_only_their_metadata_goes(tmp_path):
    cfg = config(tmp_path, snapshotRetention="1ms")
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    table = _iceberg(cfg)
    # each commit expired the snapshots before it (twice the age: at once), the newest kept
    assert len(table.snapshots()) == 1
    lists = {Path(p).name for p in (s.manifest_list for s in table.snapshots())}
    assert {p.name for p in metadata_files(cfg, ".avro") if p.name.startswith("snap-")} == lists
    named = {Path(m.manifest_path).name for m in table.current_snapshot().manifests(table.io)}
    assert {p.name for p in metadata_files(cfg, ".avro")
            if not p.name.startswith("snap-")} == named  # no manifest only expired ones named
    assert len(data_files(cfg)) == 4  # every data file stays
    assert table.properties["rotsink.batch.rotsink-q1"] == "3"  # the mark too
    assert table_ids(cfg) == rotsink_ids(cfg) == Counter(range(4 * ROWS))
    assert verify_output(_storage(cfg), commit_timeout_s=0).ok


def test_the_expiry_s_memory_of_manifest_lists_holds_only_live_snapshots(tmp_path):
    """A driver expires snapshots for months: what it remembers of them stays the snapshots
    the retention keeps, whoever expired the others."""
    from commit_protocol.tables.iceberg import maintenance as iceberg_maintenance

    cfg = config(tmp_path, snapshotRetention="1ms")
    iceberg_maintenance._MANIFESTS["s3://elsewhere/snap-expired-by-another-writer.avro"] = \
        frozenset()
    for batch_id in range(30):
        commit_batch(cfg, batch_id)
    live = {s.manifest_list for s in _iceberg(cfg).snapshots()}
    assert set(iceberg_maintenance._MANIFESTS) <= live
    assert table_ids(cfg) == Counter(range(30 * ROWS))


def _storage(cfg):
    from commit_protocol.storage import open_storage

    return open_storage(cfg.path)


def test_expiry_waits_until_enough_snapshots_are_due():
    """One metadata commit per expiry, not per batch: 20 due, or one twice the age."""
    now = 10_000_000

    class Snapshot:
        def __init__(self, i: int, age_ms: int) -> None:
            self.snapshot_id, self.timestamp_ms = i, now - age_ms

    class Table:
        def __init__(self, ages: list[int]) -> None:
            self.metadata = type("M", (), {"refs": {}})()
            self._snapshots = [Snapshot(i, age) for i, age in enumerate(ages)]

        def snapshots(self):
            return self._snapshots

    def due(policy: ExpiryPolicy, ages: list[int]) -> list[int]:
        return policy.due(Table(ages), now)  # type: ignore[arg-type]

    policy = ExpiryPolicy(max_age_ms=1000)
    assert due(policy, [0, *[1500] * 5]) == []  # 5 due: wait
    assert len(due(policy, [0, *[1500] * 20])) == 20
    assert due(policy, [0, 1500, 2500]) == [1, 2]  # one twice the age
    assert due(ExpiryPolicy(max_age_ms=None), [0, 5000]) == []


def test_a_joined_table_keeps_its_settings_and_is_expired_only_on_request(tmp_path):
    """A table another rotsink query created: this output joins it. Its properties are the
    creator's; with no table.snapshotRetention this query expires nothing."""
    creator = config(tmp_path)
    commit_batch(creator, 0)
    with _iceberg(creator).transaction() as tx:
        tx.remove_properties(*ISOLATION)
    joined = dataclasses.replace(creator, path=str(tmp_path / "second"),
                                 table_options={"identifier": "rotsink.out",
                                                "catalog.type": "sql",
                                                "catalog.uri": _catalog_uri(creator),
                                                "catalog.warehouse": str(tmp_path)})
    for batch_id in range(3):
        _commit_as(joined, batch_id, query="q2")
    table = _iceberg(creator)
    assert not set(ISOLATION) & set(table.properties)  # not set back by the joiner
    assert len(table.snapshots()) == 4
    expiring = dataclasses.replace(joined, table_options={**joined.table_options,
                                                          "snapshotRetention": "1ms"})
    _commit_as(expiring, 3, query="q2")
    assert len(_iceberg(creator).snapshots()) == 1


def _catalog_uri(cfg) -> str:
    return f"sqlite:///{cfg.path}/_iceberg/catalog.db"


def _commit_as(cfg, batch_id: int, *, query: str) -> None:
    from tests.unit import test_delta_commits

    saved = test_delta_commits.QUERY
    test_delta_commits.QUERY = query
    try:
        commit_batch(cfg, batch_id)
    finally:
        test_delta_commits.QUERY = saved


@pytest.mark.parametrize("point", ["table.before_expire", "table.after_expire"])
def test_a_crash_in_the_middle_of_an_expiry_loses_and_duplicates_nothing(tmp_path, point):
    cfg = config(tmp_path, snapshotRetention="1ms")
    commit_batch(cfg, 0)
    killed_after_its_commit(cfg, 1, point)  # in its clean-up
    time.sleep(0.01)
    for batch_id in (2, 3):
        commit_batch(cfg, batch_id)
    assert table_ids(cfg) == rotsink_ids(cfg) == Counter(range(4 * ROWS))
    assert len(data_files(cfg)) == 4
    assert len(_iceberg(cfg).snapshots()) == 1
    assert verify_output(_storage(cfg), commit_timeout_s=0).ok


def test_inspect_and_verify_name_the_tables_age_and_what_grows(tmp_path, capsys):
    """``rotsink inspect`` prints, ``verify`` notes, what the table keeps and what bounds it;
    a table nobody expires is named as growing."""
    from datasource.commands import cli

    cfg = config(tmp_path)
    for batch_id in range(3):
        commit_batch(cfg, batch_id)
    assert cli.main(["inspect", cfg.path]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("table")]
    rows = sum(pq.ParquetFile(p).metadata.num_rows  # the table's files, read by pyarrow
               for p in Path(cfg.path).rglob("part-*.parquet"))
    assert rows > 0
    assert len(lines) == 1 and lines[0].startswith(
        f"table: iceberg table: {rows} row(s); 3 snapshot(s)")
    assert "snapshots expire after 5.0 days, keeping at least 1" in lines[0]
    assert "metadata/ on storage:" in lines[0]
    with _iceberg(cfg).transaction() as tx:  # as if a table rotsink joined, nobody expiring
        tx.set_properties({CREATED_BY: "rotsink-another-query"})
        tx.remove_properties("write.metadata.delete-after-commit.enabled")
    result = verify_output(_storage(cfg), commit_timeout_s=0)
    assert result.ok and not result.notes
    grows = [n for n in result.table_health if n.startswith("table grows:")]
    assert len(grows) == 2 and "no snapshot expiry" in grows[0]
    assert "delete-after-commit.enabled is off" in grows[1]


def test_a_commit_works_out_the_table_metadata_once_per_staged_change(tmp_path, monkeypatch):
    """pyiceberg replays a transaction's updates on a deep copy of the whole metadata (every
    snapshot kept) at each read of ``table_metadata``: 27 times for a commit of 3 files, more
    with more files. rotsink's transactions do it once per staged change, copying only what
    an update changes, and leave the table's own metadata as it was."""
    from commit_protocol.tables.iceberg import transaction as iceberg_transaction

    replayed: list[int] = []
    original = iceberg_transaction._replayed

    def counted(*args):
        replayed.append(1)
        return original(*args)

    monkeypatch.setattr(iceberg_transaction, "_replayed", counted)
    cfg = config(tmp_path)
    commit_batch(cfg, 0)
    for batch_id in (1, 2):
        replayed.clear()
        commit_batch(cfg, batch_id)
        assert _iceberg(cfg).current_snapshot().summary["added-data-files"] == "3"
        assert 1 <= len(replayed) <= 6, len(replayed)

    table = _iceberg(cfg)
    before = table.metadata
    as_read = before.model_dump_json()
    tx = iceberg_transaction.transaction(table)
    first = tx.table_metadata
    assert tx.table_metadata is first  # nothing staged since: the same state
    assert first.snapshots[0] is before.snapshots[0]  # the history is shared, not copied
    tx.set_properties({"rotsink.test": "staged"})
    assert tx.table_metadata is not first
    assert tx.table_metadata.properties["rotsink.test"] == "staged"
    assert "rotsink.test" not in first.properties
    tx.commit_transaction()
    assert table.properties["rotsink.test"] == "staged"
    assert before.model_dump_json() == as_read  # the metadata read is as it was
    assert sorted(rotsink_ids(cfg)) == sorted(table_ids(cfg))
