"""Delta's column mapping on a table rotsink joins (``commit_protocol/tables/delta/mapping.py``):
a table that turned it on after it was made is written with every column's id in the files,
as the protocol asks; a column whose physical name differs, and a batch that would add a
column, are refused before anything is written. Spark's own ``ALTER TABLE`` and Delta reader
do the same in ``tests/spark/test_table_spark_writers.py``; delta-rs (1.6) cannot turn column
mapping on, so the table's commit that does is written here as Spark writes it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commit_protocol.storage import open_storage
from commit_protocol.tables.delta.format import FORMAT
from commit_protocol.vocabulary.errors import TableError
from tests.unit.test_delta_commits import GROWN_JSON, commit_batch, delta, table_config
from tests.unit.test_delta_joined_tables import (
    THEIRS,
    fresh_process_memory,  # noqa: F401 (a fixture of every test here)
    start,
    stream_ids,
    table_ids,
    their_table,
    tree,
)

MAPPING = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"}


def map_columns(cfg, *, physical: dict[str, str] | None = None,
                renamed: dict[str, str] | None = None) -> None:
    """The next commit, as Spark's ``ALTER TABLE ... SET TBLPROPERTIES
    ('delta.columnMapping.mode' = 'name')`` writes it: the protocol raised to (2, 5), every
    column given an id and its name as its physical name; ``renamed`` then renames columns
    as ``RENAME COLUMN`` does (the physical name stays)."""
    table = delta(cfg)
    metadata = table.metadata()
    schema = json.loads(table.schema().to_json())
    for column_id, field in enumerate(schema["fields"], start=1):
        name = field["name"]
        field["metadata"] = {"delta.columnMapping.id": column_id,
                             "delta.columnMapping.physicalName": (physical or {}).get(name, name)}
        field["name"] = (renamed or {}).get(name, name)
    partitions = [(renamed or {}).get(c, c) for c in metadata.partition_columns]
    actions = [
        {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}},
        {"metaData": {"id": metadata.id, "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": partitions,
                      "configuration": {**(metadata.configuration or {}), **MAPPING},
                      "createdTime": metadata.created_time}},
        {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "SET TBLPROPERTIES",
                        "operationParameters": {"properties": json.dumps(MAPPING)}}},
    ]
    log = Path(cfg.path) / "_delta_log" / f"{table.version() + 1:020d}.json"
    log.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_a_table_that_turned_column_mapping_on_is_written_with_the_columns_ids(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg)
    map_columns(cfg)
    theirs = set(delta(cfg).file_uris())
    for batch_id in range(4):
        commit_batch(cfg, batch_id)
    assert table_ids(cfg) == sorted(THEIRS + stream_ids(range(4)))
    ours = [Path(u.removeprefix("file://")) for u in set(delta(cfg).file_uris()) - theirs]
    assert ours, "the stream finalized files"
    for path in ours:  # the id the table gives each column, in every file's schema
        field = pq.read_schema(path).field("id")
        assert field.metadata[b"PARQUET:field_id"] == b"1", path
    actions = delta(cfg).get_add_actions(flatten=True)  # statistics by the physical name
    assert None not in actions.column("num_records").to_pylist()
    assert None not in actions.column("min.id").to_pylist()


def test_a_column_whose_physical_name_differs_is_refused_by_name(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg)
    map_columns(cfg, physical={"id": "col-5f422f40-de70-45b2-88ab-1d5c90e94db1"})
    before = tree(cfg)
    with pytest.raises(TableError, match=re.escape(
            "column mapping (delta.columnMapping.mode=name), which rotsink cannot honour: its "
            "column(s) id have physical names other than their names")):
        start(cfg)
    assert tree(cfg) == before


def test_a_renamed_column_is_refused_by_its_new_name(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg)
    map_columns(cfg, renamed={"id": "event_id"})
    with pytest.raises(TableError, match=r"its column\(s\) event_id have physical names"):
        start(cfg)


def test_a_batch_adding_a_column_to_a_mapped_table_is_refused_when_planned(tmp_path):
    cfg = table_config(str(tmp_path / "out"))
    their_table(cfg)
    map_columns(cfg)
    for batch_id in range(2):  # a file rolls at the second
        commit_batch(cfg, batch_id)
    storage = open_storage(cfg.path)
    with pytest.raises(TableError, match=r"adds column\(s\) \['tag'\] to a Delta table with "
                                         r"column mapping.* ALTER TABLE \.\.\. ADD COLUMNS"):
        FORMAT.planned(storage, cfg, GROWN_JSON)
    assert table_ids(cfg) == sorted(THEIRS + stream_ids(range(2)))
