"""Spark's own DELETE, UPDATE and MERGE beside the stream, interleaved deterministically
(DESIGN 4.14), on the PySpark releases Spark's table jars are published for
(``tests.support.jvm.TABLE_READERS``; ``pytest -m compat``).

The other writer's statement holds in the middle: a Python UDF in it (``rotsink_pause``)
blocks its first call until released, so the statement has read table version v and not yet
committed; meanwhile rotsink commits version v+1 (one batch whose file rolls at once); then
the statement goes on and commits. Iceberg: the tables rotsink creates ask for ``snapshot``
isolation of deletes, updates and merges, so each lands on top of rotsink's append and
changes only the rows of the snapshot it read; asked for ``serializable``, the same DELETE
fails (so the test would fail if rotsink dropped the setting). Delta: rotsink's commits are
blind appends, as Delta's own streaming sink's, and open-source Delta runs DML under
Serializable: a statement whose partitions the appended file is not in lands; one whose
partitions it is in fails with ``ConcurrentAppendException``, for rotsink and for Delta's own
sink alike. Expected rows come from the input the test wrote and Spark's table reader.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.jvm import table_reader_formats
from tests.support.streams import SCHEMA, group_of, refused_at_start, write_numbered_source
from tests.support.table_spark import iceberg_catalog_options, identifier, sql_table

pytestmark = [pytest.mark.compat, pytest.mark.spark_tables]
READERS = table_reader_formats()
ROWS_PER_FILE = 20  # one input file a batch, one group a file, a part file rolls at once
WAIT_S = 120  # a deadline for each side of the interleaving, never reached when it works


@dataclass(frozen=True)
class Statement:
    """Another writer's statement: its SQL over ``{table}`` and ``{scope}`` (the partitions it
    touches), and what it does to a row of the version it read (None: deletes it)."""
    sql: str
    changed: Callable[[int], bool]
    score: float | None


STATEMENTS = {
    "delete": Statement("DELETE FROM {table} WHERE {scope} AND rotsink_pause(id) AND id % 7 = 0",
                        lambda i: i % 7 == 0, None),
    "update": Statement("UPDATE {table} SET score = -1.0 WHERE {scope} AND rotsink_pause(id) "
                        "AND id % 5 = 0", lambda i: i % 5 == 0, -1.0),
    "merge": Statement("MERGE INTO {table} AS t USING (SELECT id FROM range(0, 1000) "
                       "WHERE id % 3 = 0 AND rotsink_pause(id)) AS s "
                       "ON t.id = s.id AND {scope} WHEN MATCHED THEN UPDATE SET score = -2.0",
                       lambda i: i % 3 == 0, -2.0),
}


def pause_at(gate: Path) -> Callable[[int], bool]:
    """The UDF that holds a statement after it read the table: the first call (one task
    claims ``reached``) waits for ``go``; every other call passes."""
    reached, go = str(gate / "reached"), str(gate / "go")

    def rotsink_pause(_row_id: int) -> bool:
        try:
            os.close(os.open(reached, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return True
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.05)
        return True

    return rotsink_pause


def run_writer(spark, tmp_path: Path, table_format: str, catalog_db: Path, *,
               writer: str = "rotsink") -> None:
    """One run of the stream over the input files not yet read: rotsink (its file rolls at
    each batch, so each batch is a table version) or Delta's own streaming sink."""
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
        str(tmp_path / "in"))
    stream = df.writeStream.partitionBy("grp").option(
        "checkpointLocation", str(tmp_path / f"ck-{writer}")).trigger(availableNow=True)
    if writer == "delta":
        stream = stream.format("delta")
    else:
        stream = stream.format("rotsink").options(**{
            "format": "parquet", "table.format": table_format,
            "rotation.maxRecords": str(ROWS_PER_FILE)})
        if table_format == "iceberg":
            stream = stream.options(**iceberg_catalog_options(catalog_db),
                                    **{"table.identifier": identifier(tmp_path)})
    stream.start(str(tmp_path / "out")).awaitTermination()


def write_input(tmp_path: Path, first_file: int, files: int) -> set[int]:
    write_numbered_source(tmp_path / "in", files=files, rows_per_file=ROWS_PER_FILE,
                          start_file=first_file, group_by_file=True)
    return set(range(first_file * ROWS_PER_FILE, (first_file + files) * ROWS_PER_FILE))


def scores(spark, table_format: str, tmp_path: Path) -> dict[int, float]:
    """The table's rows as Spark's table reader reads them now: id -> score, each id once."""
    rows = spark.sql(f"SELECT id, score FROM {sql_table(table_format, tmp_path / 'out', tmp_path)}"
                     ).collect()
    found = {r.id: r.score for r in rows}
    assert len(found) == len(rows), "an id twice in the table"
    return found


def table_version(spark, table_format: str, tmp_path: Path) -> int:
    if table_format == "delta":
        return spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'out'}` LIMIT 1").first().version
    table = sql_table(table_format, tmp_path / "out", tmp_path)
    return spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").first().n


def interleave(spark, sql: str, gate: Path, commit: Callable[[], None]) -> Exception | None:
    """Runs ``sql`` in a thread, holds it at its first ``rotsink_pause``, runs ``commit``,
    releases it: returns the statement's error, if any."""
    spark.udf.register("rotsink_pause", pause_at(gate), "boolean")
    failure: list[Exception] = []

    def other_writer() -> None:
        try:
            spark.sql(sql).collect()
        except Exception as error:  # the outcome the test looks at
            failure.append(error)

    thread = threading.Thread(target=other_writer, name="other-writer")
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not (gate / "reached").exists():
        assert thread.is_alive() and time.monotonic() < deadline, \
            f"the statement never reached its pause: {failure}"
        time.sleep(0.05)
    try:
        commit()
    finally:
        (gate / "go").touch()
        thread.join(WAIT_S)
    assert not thread.is_alive(), "the statement did not finish"
    return failure[0] if failure else None


def expected_after(before: dict[int, float], new: set[int], statement: Statement,
                   scope: Callable[[int], bool]) -> dict[int, float]:
    """The rows the statement leaves: it changes the rows of the version it read in its
    scope; the rows the stream appended meanwhile are as written (score id / 4)."""
    after = {}
    for i, score in before.items():
        if not (scope(i) and statement.changed(i)):
            after[i] = score
        elif statement.score is not None:
            after[i] = statement.score
    return after | {i: i / 4 for i in new}


def started_table(spark, tmp_path: Path, table_format: str, catalog_db: Path, *,
                  writer: str = "rotsink") -> tuple[dict[int, float], int]:
    """Six batches, two in each group, all in the table: (its rows, the next input file)."""
    written = write_input(tmp_path, 0, 6)
    run_writer(spark, tmp_path, table_format, catalog_db, writer=writer)
    before = scores(spark, table_format, tmp_path)
    assert set(before) == written
    return before, 6


if "iceberg" in READERS:
    @pytest.mark.parametrize("kind", sorted(STATEMENTS))
    def test_spark_s_iceberg_dml_lands_on_top_of_the_stream_s_append(
            spark, tmp_path, iceberg_catalog_db, kind, shown):
        statement = STATEMENTS[kind]
        before, next_file = started_table(spark, tmp_path, "iceberg", iceberg_catalog_db)
        read_version = table_version(spark, "iceberg", tmp_path)
        new = write_input(tmp_path, next_file, 1)  # its rows match every statement too
        table = sql_table("iceberg", tmp_path / "out", tmp_path)
        error = interleave(
            spark, statement.sql.format(table=table, scope="true"), tmp_path,
            lambda: run_writer(spark, tmp_path, "iceberg", iceberg_catalog_db))
        assert error is None, f"{kind} failed beside the stream: {error}"
        assert table_version(spark, "iceberg", tmp_path) == read_version + 2
        newest = spark.sql(f"SELECT summary['rotsink.batch'] AS batch FROM {table}.snapshots "
                           "ORDER BY committed_at DESC LIMIT 2").collect()
        assert newest[0].batch is None and newest[1].batch is not None  # rotsink's, then its
        assert scores(spark, "iceberg", tmp_path) == expected_after(
            before, new, statement, lambda i: True)
        shown(f"Spark's Iceberg {kind.upper()} held after reading the table, rotsink "
              "committed a batch, the statement landed first try; the stream's rows stayed")

    def test_spark_s_iceberg_delete_conflicts_where_the_table_asks_for_serializable(
            spark, tmp_path, iceberg_catalog_db):
        before, next_file = started_table(spark, tmp_path, "iceberg", iceberg_catalog_db)
        table = sql_table("iceberg", tmp_path / "out", tmp_path)
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES "
                  "('write.delete.isolation-level' = 'serializable')").collect()
        new = write_input(tmp_path, next_file, 1)
        error = interleave(
            spark, STATEMENTS["delete"].sql.format(table=table, scope="true"), tmp_path,
            lambda: run_writer(spark, tmp_path, "iceberg", iceberg_catalog_db))
        assert error is not None and "Found conflicting files" in str(error), error
        assert scores(spark, "iceberg", tmp_path) == before | {i: i / 4 for i in new}


    def test_a_format_version_3_table_spark_made_is_refused_at_start(
            spark, tmp_path, iceberg_catalog_db):
        """Spark's Iceberg makes v3 tables (row lineage); pyiceberg 0.12, which commits
        rotsink's, cannot write them: refused when the query starts, naming the version,
        with nothing written (found at the first table commit instead, after the batch's
        log commit, every batch would fail there)."""
        table = sql_table("iceberg", tmp_path / "out", tmp_path)
        spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING, grp STRING, score DOUBLE) "
                  "USING iceberg PARTITIONED BY (grp) "
                  "TBLPROPERTIES ('format-version' = '3')").collect()
        write_input(tmp_path, 0, 1)
        with refused_at_start("is format version 3, which pyiceberg .* cannot write yet"):
            run_writer(spark, tmp_path, "iceberg", iceberg_catalog_db)
        assert not (tmp_path / "out").exists()
        assert spark.sql(f"SELECT count(*) AS n FROM {table}").first().n == 0


if "delta" in READERS:
    @pytest.mark.parametrize("kind", sorted(STATEMENTS))
    def test_spark_s_delta_dml_of_other_partitions_lands_on_top_of_the_stream_s_append(
            spark, tmp_path, kind, shown):
        statement = STATEMENTS[kind]
        before, next_file = started_table(spark, tmp_path, "delta", Path())
        read_version = table_version(spark, "delta", tmp_path)
        new = write_input(tmp_path, next_file, 1)
        appended = group_of(min(new), rows_per_file=ROWS_PER_FILE)
        other = next(f"g{g}" for g in range(3) if f"g{g}" != appended)
        column = "t.grp" if kind == "merge" else "grp"
        sql = statement.sql.format(table=sql_table("delta", tmp_path / "out", tmp_path),
                                   scope=f"{column} = '{other}'")
        error = interleave(spark, sql, tmp_path,
                           lambda: run_writer(spark, tmp_path, "delta", Path()))
        assert error is None, f"{kind} failed beside the stream: {error}"
        assert table_version(spark, "delta", tmp_path) == read_version + 2
        history = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'out'}` LIMIT 2").collect()
        assert history[1].isBlindAppend is True
        assert scores(spark, "delta", tmp_path) == expected_after(
            before, new, statement,
            lambda i: group_of(i, rows_per_file=ROWS_PER_FILE) == other)
        shown(f"Spark's Delta {kind.upper()} of partition {other} held after reading the "
              f"table, rotsink appended to {appended}, the statement landed first try")

    @pytest.mark.parametrize("writer", ["rotsink", "delta"])
    def test_spark_s_delta_delete_of_the_appended_partition_conflicts_as_for_delta_s_own_sink(
            spark, tmp_path, writer, shown):
        """Open-source Delta's Serializable: a DELETE that read the partition a blind append
        then added a file to fails, whichever sink appended (Delta's own for comparison)."""
        before, next_file = started_table(spark, tmp_path, "delta", Path(), writer=writer)
        new = write_input(tmp_path, next_file, 1)
        appended = group_of(min(new), rows_per_file=ROWS_PER_FILE)
        sql = STATEMENTS["delete"].sql.format(
            table=sql_table("delta", tmp_path / "out", tmp_path), scope=f"grp = '{appended}'")
        error = interleave(spark, sql, tmp_path,
                           lambda: run_writer(spark, tmp_path, "delta", Path(), writer=writer))
        assert error is not None and "ConcurrentAppendException" in str(error), error
        assert scores(spark, "delta", tmp_path) == before | {i: i / 4 for i in new}
        shown(f"Delta's Serializable refuses a DELETE of the partition {writer}'s sink "
              "appended to meanwhile, the same for both sinks")

    def test_a_stream_joins_a_delta_table_spark_s_own_sql_made(spark, tmp_path, shown):
        """A table as a team has it: made by Spark's Delta SQL, NOT NULL id, deletion vectors
        and the change data feed on, rows of its own and a column the stream lacks. The
        stream joins it; Spark's Delta reader reads every row once, its change feed the
        stream's rows as inserts; a null id fails the query before anything is committed."""
        out = tmp_path / "out"
        table = f"delta.`{out}`"
        spark.sql(f"CREATE TABLE {table} (id BIGINT NOT NULL, name STRING, grp STRING, "
                  "score DOUBLE, note STRING) USING delta PARTITIONED BY (grp) TBLPROPERTIES "
                  "('delta.enableDeletionVectors' = 'true', "
                  "'delta.enableChangeDataFeed' = 'true')").collect()
        spark.sql(f"INSERT INTO {table} VALUES (5000, 'x', 'g0', 1.0, 'theirs'), "
                  "(5001, 'y', 'g9', 2.0, 'theirs')").collect()
        joined_at = table_version(spark, "delta", tmp_path)
        written = write_input(tmp_path, 0, 3)
        run_writer(spark, tmp_path, "delta", Path())
        rows = spark.sql(f"SELECT id, note FROM {table}").collect()
        assert sorted(r.id for r in rows) == sorted(written | {5000, 5001})
        assert {r.id for r in rows if r.note is None} == written
        properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
        assert properties["delta.enableDeletionVectors"] == "true"
        changes = spark.read.format("delta").option("readChangeFeed", "true").option(
            "startingVersion", joined_at + 1).load(str(out)).collect()
        assert sorted(r.id for r in changes) == sorted(written)
        assert {r._change_type for r in changes} == {"insert"}

        (tmp_path / "in" / "z-null.json").write_text(
            '{"id": null, "name": "n", "grp": "g1", "score": 0.5}\n')
        version = table_version(spark, "delta", tmp_path)
        with pytest.raises(Exception, match="is NOT NULL in the delta table"):
            run_writer(spark, tmp_path, "delta", Path())
        assert table_version(spark, "delta", tmp_path) == version
        assert sorted(r.id for r in spark.sql(f"SELECT id FROM {table}").collect()) == \
            sorted(written | {5000, 5001})
        shown("rotsink joined a Delta table Spark's SQL made (NOT NULL, deletion vectors, "
              "change feed, a column of its own); a null id failed the query, nothing "
              "committed")

    def test_a_stream_joins_a_delta_table_spark_s_sql_turned_column_mapping_on(
            spark, tmp_path, shown):
        """Column mapping as Spark turns it on for a table that exists (``ALTER TABLE ...
        SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')``, to allow renames and
        drops): the stream joins it, its files carry the ids of Spark's schema, Spark's Delta
        reader reads every row once; after Spark renames a column, a restart is refused
        naming it, before anything is written."""
        import json

        import pyarrow.parquet as pq

        out = tmp_path / "out"
        table = f"delta.`{out}`"
        spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING, grp STRING, score DOUBLE) "
                  "USING delta PARTITIONED BY (grp)").collect()
        spark.sql(f"INSERT INTO {table} VALUES (5000, 'x', 'g0', 1.0)").collect()
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES "
                  "('delta.columnMapping.mode' = 'name')").collect()
        before = {r.path for r in spark.sql(f"SELECT input_file_name() AS path FROM {table}")
                  .collect()}
        written = write_input(tmp_path, 0, 3)
        run_writer(spark, tmp_path, "delta", Path())
        assert sorted(r.id for r in spark.sql(f"SELECT id FROM {table}").collect()) == \
            sorted(written | {5000})
        from deltalake import DeltaTable

        schema = json.loads(DeltaTable(str(out)).schema().to_json())  # as Spark committed it
        ids = {f["name"]: f["metadata"]["delta.columnMapping.id"] for f in schema["fields"]}
        ours = {r.path for r in spark.sql(f"SELECT input_file_name() AS path FROM {table}")
                .collect()} - before
        assert ours
        for path in ours:  # each column of rotsink's files under Spark's id for it
            file_schema = pq.read_schema(path.removeprefix("file:"))
            assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in file_schema} == \
                {name: ids[name] for name in file_schema.names}, path

        spark.sql(f"ALTER TABLE {table} RENAME COLUMN name TO title").collect()
        version = table_version(spark, "delta", tmp_path)
        write_input(tmp_path, 3, 1)
        with refused_at_start(r"its column\(s\) title have physical names other than"):
            run_writer(spark, tmp_path, "delta", Path())
        assert table_version(spark, "delta", tmp_path) == version
        shown("rotsink joined a Delta table Spark turned column mapping on for, its files "
              "under Spark's column ids; refused after a rename, naming the column")

    def test_a_stream_fills_the_generated_day_of_a_delta_table_spark_s_sql_made(
            spark, tmp_path, shown):
        """The usual way to partition a Delta table by day: ``day DATE GENERATED ALWAYS AS
        (CAST(ts AS DATE))``. The stream gives ``ts`` only and no partitionBy: rotsink
        computes each row's day in the session's time zone, as Spark's own Delta writer does
        (the expected days are Spark's CAST of the input, in the same zone)."""
        out = tmp_path / "out"
        table = f"delta.`{out}`"
        zone = spark.conf.get("spark.sql.session.timeZone")
        spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
        try:
            spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING, grp STRING, score "
                      "DOUBLE, ts TIMESTAMP, day DATE GENERATED ALWAYS AS (CAST(ts AS DATE))) "
                      "USING delta PARTITIONED BY (day)").collect()
            write_input(tmp_path, 0, 3)
            timed = "timestamp_seconds(1796068800 + id * 25000) AS ts"  # 2026-12-01T04:00Z
            (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
             .json(str(tmp_path / "in")).selectExpr("*", timed)
             .writeStream.format("rotsink").options(**{
                 "format": "parquet", "table.format": "delta", "rotation.maxBatches": "1"})
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start(str(out)).awaitTermination())
            expected = {r.id: r.day for r in spark.read.schema(SCHEMA).json(
                str(tmp_path / "in")).selectExpr("id", f"CAST({timed.split(' AS ')[0]} AS "
                                                 "DATE) AS day").collect()}
            found = {r.id: r.day for r in spark.sql(f"SELECT id, day FROM {table}").collect()}
        finally:
            spark.conf.set("spark.sql.session.timeZone", zone)
        assert found == expected
        assert len(set(expected.values())) > 1
        assert sorted(p.name for p in out.glob("day=*")) == sorted(
            f"day={d}" for d in set(expected.values()))
        shown(f"rotsink filled a generated day column of a Delta table Spark's SQL made: "
              f"{len(found)} rows over {len(set(found.values()))} days, each Spark's day")

    def test_spark_s_delta_reader_reads_a_timestamp_partition_as_its_instant(
            spark, tmp_path, shown):
        """partitionBy a timestamp in a session of another zone than UTC: Spark's Delta
        reader reads each row's instant from the table's partition values (rotsink records
        them in UTC), in that session and in a UTC one."""
        write_input(tmp_path, 0, 2)
        zone = spark.conf.get("spark.sql.session.timeZone")
        timed = "timestamp_seconds(1796068800 + id * 10000) AS ts"
        spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
        try:
            (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
             .json(str(tmp_path / "in")).selectExpr("id", timed)
             .writeStream.format("rotsink").options(**{
                 "format": "parquet", "table.format": "delta", "partitionBy": "ts",
                 "rotation.maxBatches": "1"})
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start(str(tmp_path / "out")).awaitTermination())
            expected = {r.id: r.seconds for r in spark.read.schema(SCHEMA).json(
                str(tmp_path / "in")).selectExpr("id", f"unix_seconds({timed.split(' AS ')[0]})"
                                                 " AS seconds").collect()}
            there = {r.id: r.seconds for r in spark.read.format("delta").load(
                str(tmp_path / "out")).selectExpr("id", "unix_seconds(ts) AS seconds").collect()}
            spark.conf.set("spark.sql.session.timeZone", "UTC")
            utc = {r.id: r.seconds for r in spark.read.format("delta").load(
                str(tmp_path / "out")).selectExpr("id", "unix_seconds(ts) AS seconds").collect()}
        finally:
            spark.conf.set("spark.sql.session.timeZone", zone)
        assert there == utc == expected
        shown(f"Spark's Delta reader read {len(expected)} timestamp partition values as the "
              "input's instants, in a Los Angeles session and a UTC one")
