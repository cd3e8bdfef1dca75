"""Rows another writer deleted in place in a table (Delta's deletion vectors, Iceberg's
position deletes) are left out by rotsink's reader, as of the table version the output's log
followed, and noted by ``verify``.

delta-rs and pyiceberg cannot delete rows in place; Spark's ``DELETE`` does: the deletes read
here are Spark's (``tests/fixtures/make_delta_deletion_vectors.py``,
``make_iceberg_position_deletes.py``), and the whole way, a stream into a table Spark deletes
from, runs with Spark's Delta and Iceberg in ``tests/spark/test_table_spark_readers.py``.
Expected rows come from the predicates of those deletes and from pyarrow over the files, never
from rotsink's reader."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commit_protocol.checks.verification import verify_output
from commit_protocol.reading import (
    CommittedFile,
    ReadLayout,
    TaskFilters,
    committed_files,
    open_committed,
    read_batches,
)
from commit_protocol.reading.files import packed
from commit_protocol.reading.predicates import Predicate
from commit_protocol.reading.splits import FileSplit
from commit_protocol.storage import open_storage
from commit_protocol.tables.delta import deletion_vectors
from commit_protocol.tables.delta.table import DeltaFollowedTable
from tests.unit.test_delta_commits import commit_batch, forget, table_config
from tests.unit.test_shared_tables import delete_where, table_ids

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "delta_deletion_vectors"
ICEBERG_FIXTURE = FIXTURE.parent / "iceberg_position_deletes"
ICEBERG_ROOT = Path("/tmp/rotsink-fixture-iceberg-position-deletes")  # where Spark made it


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    yield
    forget()


def ids_of(path: Path) -> list[int]:
    return pq.read_table(path, columns=["id"]).column("id").to_pylist()


@pytest.mark.parametrize(("version", "deleted"), [
    (1, lambda i: False),
    (2, lambda i: i % 7 == 0),
    (3, lambda i: i % 7 == 0 or i % 5 == 0),
])
def test_the_deletion_vectors_spark_wrote_are_read_as_of_a_version(tmp_path, version, deleted):
    """Spark's two DELETEs (ids divisible by 7, then by 5): at each version, each file's
    vector deletes the positions of exactly those ids, and files are named as the log names
    them (below the root, the partition's space decoded)."""
    table = tmp_path / "table"
    shutil.copytree(FIXTURE, table)
    storage = open_storage(str(table))
    found = deletion_vectors.deleted_rows(storage, table_config(str(table)), version)
    expected = {}
    for data in sorted(table.glob("grp=*/*.parquet")):
        positions = [n for n, i in enumerate(ids_of(data)) if deleted(i)]
        if positions:
            expected[data.relative_to(table).as_posix()] = positions
    assert found == expected
    if version > 1:
        assert {path.split("/")[0] for path in found} == {"grp=g a0", "grp=g a1"}


def test_a_finished_file_s_deleted_rows_are_left_out_in_every_split(tmp_path):
    """A file of 100 rows in row groups of 10, rows deleted at the edges of groups: every
    split of it (the groups whose middle byte it holds), with and without a filter that skips
    groups, returns the rows at the other positions, each once."""
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.table({"id": pa.array(range(100), pa.int64())}), path,
                   row_group_size=10)
    deleted = (0, 9, 10, 11, 55, 98, 99)
    f = CommittedFile(path.name, path.stat().st_size, "", False, deleted=packed(deleted))
    storage = open_storage(str(tmp_path))
    layout = ReadLayout("parquet", "none", False, ())
    schema = pa.schema([("id", pa.int64())])
    step = f.length // 4
    splits = [FileSplit(f, start, min(start + step, f.length))
              for start in range(0, f.length, step)]
    read = [i for split in splits for batch in read_batches(storage, split, state=layout,
                                                              schema=schema)
            for i in batch.column("id").to_pylist()]
    assert sorted(read) == [i for i in range(100) if i not in deleted]
    skipping = TaskFilters(data=(Predicate(">=", "id", 50),))  # groups 0-4 skipped
    kept = [i for batch in read_batches(storage, f, state=layout, schema=schema,
                                        filters=skipping)
            for i in batch.column("id").to_pylist()]
    assert sorted(kept) == [i for i in range(50, 100) if i not in deleted]


def test_rotsink_s_reader_leaves_out_what_the_table_deletes_in_place(tmp_path, monkeypatch):
    """A table whose files another writer deletes rows of in place (the vectors as delta-rs
    reads them, given here: the read itself is tested above): the query's next commit follows
    the table, and from then on rotsink's reader returns every row but those, ``verify`` is
    clean and notes them, and Spark's own reader of the files is not used for such a
    snapshot (it would return them)."""
    from commit_protocol.tables.sharing import Followed
    from datasource.reading.fast_read import spark_reads_exactly

    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    delete_where(cfg, 0, 2)  # another writer's change: the next commit follows the table
    storage = open_storage(cfg.path)
    table = DeltaFollowedTable(str(tmp_path / "out"), {}, storage)
    victim = sorted(table.files())[0]
    victim_ids = ids_of(Path(cfg.path) / victim)
    gone = (0, len(victim_ids) - 1)
    asked = []

    def vectors(storage, config, version):
        asked.append(version)
        return {victim: list(gone)}

    monkeypatch.setattr(DeltaFollowedTable, "row_deletes", lambda self: 1)
    monkeypatch.setattr(deletion_vectors, "deleted_rows", vectors)
    commit_batch(cfg, 4)
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    followed = Followed.of(state.extra)
    assert followed.row_deletes == 1
    layout, schema = ReadLayout.of(state), pa.schema([("id", pa.int64()), ("grp", pa.string())])
    read = [i for f in committed_files(log, latest, state, include_in_progress=False)
            for batch in read_batches(storage, f, state=layout, schema=schema)
            for i in batch.column("id").to_pylist()]
    assert asked == [followed.version]  # the version the listing is as of
    expected = table_ids(cfg)  # delta-rs's reader of the table: no vector there
    for position in gone:
        expected[victim_ids[position]] -= 1
    assert sorted(read) == sorted(expected.elements())
    result = verify_output(storage, commit_timeout_s=0)
    assert result.ok, result.problems
    assert any("rows deleted in place in 1 file(s) (deletion vectors): rotsink's reader" in n
               for n in result.notes), result.notes
    assert not spark_reads_exactly(state, None)


def test_deletes_rotsink_s_reader_cannot_read_are_a_problem_for_verify(tmp_path, monkeypatch):
    """Deletes the reader refuses (Iceberg's equality deletes, a followed snapshot expired
    since: the table library's refusal, given here) make ``verify`` name the refusal, and
    the reader refuse the output rather than return the rows."""
    from commit_protocol.vocabulary.errors import TableError

    cfg = table_config(str(tmp_path / "out"))
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    delete_where(cfg, 0, 2)

    def refused(storage, config, version):
        raise TableError("an equality delete file: rotsink's reader applies position deletes")

    monkeypatch.setattr(DeltaFollowedTable, "row_deletes", lambda self: 1)
    monkeypatch.setattr(deletion_vectors, "deleted_rows", refused)
    commit_batch(cfg, 4)
    storage = open_storage(cfg.path)
    problems = verify_output(storage, commit_timeout_s=0).problems
    assert any("rotsink's reader refuses the output: an equality delete" in p
               for p in problems), problems
    committed = open_committed(storage)
    assert committed is not None
    with pytest.raises(TableError, match="equality delete"):
        committed_files(*committed, include_in_progress=False)


def test_the_position_deletes_spark_wrote_are_read_as_of_a_snapshot():
    """Spark's two merge-on-read DELETEs (ids divisible by 7, then by 5) on an Iceberg table:
    as of each snapshot (by sequence number), each data file loses exactly the positions of
    those ids (read by pyarrow), applied by Iceberg's sequence-number rules; a snapshot the
    table no longer has is said, not guessed."""
    from commit_protocol.tables.iceberg import deletes
    from commit_protocol.vocabulary.errors import TableError
    from tests.unit.test_iceberg_commits import iceberg_config

    shutil.rmtree(ICEBERG_ROOT, ignore_errors=True)
    shutil.copytree(ICEBERG_FIXTURE, ICEBERG_ROOT)  # its metadata names files by absolute path
    try:
        cfg = iceberg_config(str(ICEBERG_ROOT / "events"), table_options={
            "catalog.name": "lake", "catalog.type": "sql",
            "catalog.uri": f"sqlite:///{ICEBERG_ROOT}/catalog.db", "identifier": "lake.events"})
        storage = open_storage(cfg.path)
        data = sorted(p for p in (ICEBERG_ROOT / "events").rglob("*.parquet")
                      if not p.name.endswith("-deletes.parquet"))
        for version, deleted in [(1, lambda i: False), (2, lambda i: i % 7 == 0),
                                 (3, lambda i: i % 7 == 0 or i % 5 == 0)]:
            expected = {}
            for path in data:
                positions = [n for n, i in enumerate(ids_of(path)) if deleted(i)]
                if positions:
                    expected[path.relative_to(ICEBERG_ROOT / "events").as_posix()] = positions
            assert deletes.deleted_rows(storage, cfg, version) == expected, version
        with pytest.raises(TableError, match="sequence number 9.*has expired"):
            deletes.deleted_rows(storage, cfg, 9)
    finally:
        shutil.rmtree(ICEBERG_ROOT, ignore_errors=True)
