"""Spark's own Delta Lake and Iceberg readers in the application that writes the table, on the
PySpark releases they are published for (``tests.support.jvm.TABLE_READERS``: none yet for
the newest, so these tests run in the compat virtualenvs, ``pytest -m compat``).

One session streams into rotsink with ``table.format`` and, after each run of the query,
reads the table through Spark's reader (Delta by path with ``DESCRIBE HISTORY``; Iceberg
through a Spark Iceberg catalog over the SQL catalog rotsink commits to, with
``spark.table``): each read is one table version and returns exactly the rows of the files
Spark's log listed as finalized at the batch that version carries (read from
``_spark_metadata`` and the files by the tests' own code). Then the table's own maintenance
through Spark SQL (Delta's VACUUM with no retention, Iceberg's snapshot expiry and orphan
removal) takes nothing rotsink owns, and the query goes on exactly once. The same readers
read the table while the query commits, and across driver kills, in every life of
``tests/spark/test_crash_loop.py``'s table loop.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.jvm import table_reader_formats
from tests.support.spark_log import finalized_ids
from tests.support.streams import SCHEMA, rotsink_ids, write_numbered_source
from tests.support.table_spark import (
    SESSION_CATALOG,
    iceberg_catalog_options,
    identifier,
    read_table,
    sql_table,
)

pytestmark = [pytest.mark.compat, pytest.mark.spark_tables]
READERS = table_reader_formats()  # the formats whose Spark reader this PySpark has
RUNS, FILES_PER_RUN = 3, 3


def start_query(spark, tmp_path: Path, table_format: str, catalog_db: Path):
    options = {"format": "parquet", "table.format": table_format, "partitionBy": "grp",
               "rotation.maxBatches": "2", "rotation.maxRecords": "30",
               "log.compactInterval": "3", "log.cleanupDelay": "10m"}
    if table_format == "iceberg":
        options.update(iceberg_catalog_options(catalog_db),
                       **{"table.identifier": identifier(tmp_path)})
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
        str(tmp_path / "in"))
    return (df.writeStream.format("rotsink").options(**options)
            .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
            .start(str(tmp_path / "out")))


def table_rows(spark, table_format: str, out: Path, tmp_path: Path) -> Counter:
    """The table as Spark reads it now: ``spark.read.format("delta")`` or ``spark.table``."""
    rows = (spark.read.format("delta").load(str(out)) if table_format == "delta"
            else spark.table(f"{SESSION_CATALOG}.{identifier(tmp_path)}"))
    return Counter(r.id for r in rows.select("id").collect())


def maintain(spark, table_format: str, out: Path, tmp_path: Path) -> list[str]:
    """The table's own maintenance through Spark, as aggressive as it goes: Delta's VACUUM
    keeping nothing it no longer lists; Iceberg's snapshot expiry to the last one and orphan
    removal of every file not listed, after all files were made 10 days old and a stray
    file put among rotsink's. Returns the files orphan removal deleted."""
    if table_format == "delta":
        # VACUUM lists the table's directories in as many tasks as the parallelism says
        # (10,000 by default: 35 s for this small table on two cores, 1.6 s with 4)
        settings = {"spark.databricks.delta.retentionDurationCheck.enabled": "false",
                    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4"}
        before = {key: spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            spark.sql(f"VACUUM delta.`{out}` RETAIN 0 HOURS").collect()
        finally:  # the session is shared with other tests
            for key, value in before.items():
                spark.conf.unset(key) if value is None else spark.conf.set(key, value)
        return []
    table = f"{SESSION_CATALOG}.{identifier(tmp_path)}"
    now = dt.datetime.now(dt.timezone.utc)
    spark.sql(f"CALL {SESSION_CATALOG}.system.expire_snapshots(table => '{table}', "
              f"older_than => TIMESTAMP '{now:%Y-%m-%d %H:%M:%S}', retain_last => 1)").collect()
    (out / "grp=g0" / "stray.parquet").write_bytes(b"not rotsink's")
    ten_days_ago = time.time() - 10 * 86400
    for path in out.rglob("*"):
        os.utime(path, (ten_days_ago, ten_days_ago))
    cutoff = now - dt.timedelta(hours=25)
    rows = spark.sql(f"CALL {SESSION_CATALOG}.system.remove_orphan_files(table => '{table}', "
                     f"older_than => TIMESTAMP '{cutoff:%Y-%m-%d %H:%M:%S}')").collect()
    return sorted(r[0] for r in rows)


if READERS:  # no test where this PySpark has no Spark table reader
    @pytest.mark.parametrize("table_format", READERS)
    def test_spark_reads_the_table_as_the_query_commits_and_maintains_it(
            spark, tmp_path, iceberg_catalog_db, table_format, shown):
        out = tmp_path / "out"
        table = str(out) if table_format == "delta" else identifier(tmp_path)

        def run(first_file: int, files: int) -> None:
            write_numbered_source(tmp_path / "in", files=files, rows_per_file=20,
                                  start_file=first_file)
            start_query(spark, tmp_path, table_format, iceberg_catalog_db).awaitTermination()

        versions = {}
        for i in range(RUNS):
            run(i * FILES_PER_RUN, FILES_PER_RUN)
            version, batch, ids = read_table(spark, table_format, table,
                                             catalog=SESSION_CATALOG)
            assert batch is not None, f"table version {version} carries no rotsink batch"
            assert Counter(ids) == finalized_ids(out, batch), (version, batch)
            versions[version] = batch
        assert len(set(versions.values())) == RUNS, "each run moves the table"
        total = RUNS * FILES_PER_RUN * 20
        parquet = Counter(r.id for r in spark.read.parquet(str(out)).select("id").collect())
        assert table_rows(spark, table_format, out, tmp_path) == parquet
        assert sum(parquet.values()) > 0 and set(parquet) <= set(range(total))

        deleted = maintain(spark, table_format, out, tmp_path)
        if table_format == "iceberg":
            assert deleted == [f"file:{out}/grp=g0/stray.parquet"]
        assert rotsink_ids(spark, out) == list(range(total))  # nothing rotsink reads went
        run(RUNS * FILES_PER_RUN, FILES_PER_RUN)  # and the query goes on, exactly once
        total += FILES_PER_RUN * 20
        parquet = Counter(r.id for r in spark.read.parquet(str(out)).select("id").collect())
        assert table_rows(spark, table_format, out, tmp_path) == parquet
        assert rotsink_ids(spark, out) == list(range(total))
        shown(f"Spark's {table_format} reader in the writing application: {len(versions)} "
              "table versions read, each equal to the log's finalized files at its batch; "
              "after Spark's maintenance the query went on exactly once")


def _compact(spark, table_format: str, out: Path, tmp_path: Path, **options: str) -> None:
    """Spark's own compaction: Delta's OPTIMIZE, Iceberg's rewrite_data_files."""
    if table_format == "delta":
        spark.sql(f"OPTIMIZE delta.`{out}`").collect()
        return
    given = ", ".join(f"'{k}', '{v}'" for k, v in {"min-input-files": "2", **options}.items())
    spark.sql(f"CALL {SESSION_CATALOG}.system.rewrite_data_files(table => "
              f"'{SESSION_CATALOG}.{identifier(tmp_path)}', options => map({given}))").collect()


if READERS:
    @pytest.mark.parametrize("table_format", READERS)
    def test_spark_s_own_delete_update_and_compaction_share_the_table(
            spark, tmp_path, iceberg_catalog_db, table_format, shown):
        """Spark's DELETE, UPDATE and OPTIMIZE / rewrite_data_files between runs of the
        query: the query goes on exactly once; rotsink's reader returns the table's rows (as
        Spark's table reader reads them) and the rows still in progress, none deleted, and
        ``spark.read.parquet`` the table's rows once a compaction of the log followed. Rows
        deleted in place (Delta's deletion vectors, Iceberg's position deletes) are left out
        by rotsink's reader."""
        from datasource.commands.inspect import verify

        out = tmp_path / "out"
        table = sql_table(table_format, out, tmp_path)
        written = 0

        def run(files: int) -> None:
            nonlocal written
            write_numbered_source(tmp_path / "in", files=files, rows_per_file=20,
                                  start_file=written // 20)
            written += files * 20
            start_query(spark, tmp_path, table_format, iceberg_catalog_db).awaitTermination()

        def parquet_ids() -> Counter:
            return Counter(r.id for r in spark.read.parquet(str(out)).select("id").collect())

        run(4)
        # rows a DELETE removes: those of the table then (rows still in progress are not)
        deleted = {i for i in table_rows(spark, table_format, out, tmp_path) if i % 7 == 0}
        spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0").collect()
        spark.sql(f"UPDATE {table} SET score = -1.0 WHERE id % 5 = 0").collect()
        _compact(spark, table_format, out, tmp_path)
        changed = table_rows(spark, table_format, out, tmp_path)
        assert changed and not any(i % 7 == 0 for i in changed) and max(changed.values()) == 1
        assert parquet_ids() != changed  # Spark's path readers: until a log compaction
        run(4)  # four batches: the log compacts, following every change
        expected = table_rows(spark, table_format, out, tmp_path)
        assert set(changed) <= set(expected)
        assert parquet_ids() == expected
        ours = Counter(rotsink_ids(spark, out))
        assert max(ours.values()) == 1 and set(expected) <= set(ours)
        assert not deleted & set(ours) and not deleted & set(expected)
        updated = spark.read.format("rotsink").load(str(out)).where("id % 5 = 0 AND id < 80")
        assert {r.score for r in updated.select("score").collect()} == {-1.0}
        result = verify(str(out))
        assert result.ok, result.problems

        # rows deleted in place (deletion vectors, position delete files)
        _rows_deleted_in_place_are_left_out(spark, table_format, out, tmp_path, run)
        expected = table_rows(spark, table_format, out, tmp_path)
        shown(f"Spark's {table_format} DELETE, UPDATE and compaction beside the query: "
              f"{sum(expected.values())} rows in the table, the same through rotsink's reader "
              "and, once the log compacted, spark.read.parquet; rows deleted in place left "
              "out by rotsink's reader")


IN_PLACE = {"delta": "('delta.enableDeletionVectors' = 'true')",
            "iceberg": "('write.delete.mode' = 'merge-on-read', "
                       "'write.update.mode' = 'merge-on-read')"}


def _rows_deleted_in_place_are_left_out(spark, table_format: str, out: Path, tmp_path: Path,
                                        run) -> None:
    """Spark's DELETE and UPDATE in place (Delta's deletion vectors, Iceberg's position
    delete files): once the query's next commit follows the table, rotsink's reader (and
    ``pyspark_rotsink.read``) return the table's rows, none of the deleted, each updated row
    once with its new value, and the rows in progress; verify is clean and notes them;
    ``spark.read.parquet(path)`` returns them, as documented (it cannot see them)."""
    from datasource.commands.inspect import verify
    from pyspark_rotsink import read

    table = sql_table(table_format, out, tmp_path)
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES {IN_PLACE[table_format]}").collect()
    deleted = {i for i in table_rows(spark, table_format, out, tmp_path) if i % 11 == 0}
    spark.sql(f"DELETE FROM {table} WHERE id % 11 = 0").collect()
    spark.sql(f"UPDATE {table} SET score = -2.0 WHERE id % 13 = 0").collect()
    if table_format == "delta":
        metrics = [r.operationMetrics for r in
                   spark.sql(f"DESCRIBE HISTORY {table} LIMIT 2").collect()]
        assert all(m.get("numDeletionVectorsAdded", "0") != "0" for m in metrics), metrics
    else:
        assert spark.sql(f"SELECT count(*) AS n FROM {table}.delete_files").first().n > 0
    run(1)  # the query's next commit follows the table
    expected = table_rows(spark, table_format, out, tmp_path)
    ours = Counter(rotsink_ids(spark, out))
    fast = Counter(r.id for r in read(spark, str(out)).select("id").collect())
    assert deleted and not deleted & set(expected) and not deleted & set(ours)
    assert set(expected) <= set(ours) and max(ours.values()) == 1 and fast == ours
    updated = spark.read.format("rotsink").load(str(out)).where(
        f"id % 13 = 0 AND id IN ({', '.join(map(str, expected))})")
    assert {r.score for r in updated.select("score").collect()} == {-2.0}
    result = verify(str(out))
    assert result.ok, result.problems
    assert any("rotsink's reader and the table's readers leave them out" in n
               for n in result.notes), result.notes
    parquet = Counter(r.id for r in spark.read.parquet(str(out)).select("id").collect())
    assert deleted & set(parquet)

if "iceberg" in READERS:
    def test_the_iceberg_catalog_as_the_docs_set_it_up(spark, tmp_path, iceberg_catalog_db):
        """docs/tables.md's Spark Iceberg catalog (the session's, ``tests/support/
        table_spark.py``): a read before rotsink's first commit says the table is not there
        (not "initialized without view support"), and the catalog's database tables are in
        the schema pyiceberg writes (with ``iceberg_type``: no "v0 schema" warning at each of
        rotsink's commits); then the query commits and Spark reads the table."""
        import sqlite3

        from pyspark.errors import AnalysisException

        name = f"{SESSION_CATALOG}.{identifier(tmp_path)}"
        with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
            spark.table(name).collect()
        with sqlite3.connect(iceberg_catalog_db) as db:
            columns = {row[1] for row in db.execute("PRAGMA table_info(iceberg_tables)")}
        assert "iceberg_type" in columns, sorted(columns)
        write_numbered_source(tmp_path / "in", files=3, rows_per_file=20)
        start_query(spark, tmp_path, "iceberg", iceberg_catalog_db).awaitTermination()
        assert table_rows(spark, "iceberg", tmp_path / "out", tmp_path) == \
            Counter(r.id for r in spark.read.parquet(str(tmp_path / "out")).collect())


IDS = range(-20, 100)  # the hidden-partitioning test's rows (negative ids: their buckets)


if "iceberg" in READERS:  # Spark's Iceberg writer, where published for this PySpark
    def test_hidden_partitions_are_those_spark_s_iceberg_writer_computes(spark, tmp_path,
                                                                         iceberg_catalog_db):
        """The same rows into two tables ``PARTITIONED BY (days(ts), bucket(4, id),
        truncate(2, name))``: one by rotsink's stream, one by Spark's own Iceberg writer
        (``INSERT INTO``). Spark's Iceberg reader gives every row the same partition tuple
        (``_partition``) in both, and the same spec; the tables hold the same rows. Then a
        stream with no partitionBy joins Spark's table: it takes the table's partitioning,
        and Iceberg's own functions in Spark (``system.days``, ``bucket``, ``truncate``) give
        every row of both writers its tuple."""
        import json

        source = tmp_path / "in"
        source.mkdir()
        start = dt.datetime(1969, 12, 30, 21, tzinfo=dt.timezone.utc)  # across 1970, floored
        rows: list[dict[str, Any]] = [
            {"id": i, "name": None if i % 11 == 0 else f"n{i:03d}",
             "ts": None if i % 13 == 0 else (start + dt.timedelta(hours=7 * i)).isoformat()}
            for i in IDS]
        for f in range(3):
            (source / f"in-{f}.json").write_text(
                "".join(json.dumps(r) + "\n" for r in rows[f * 40:(f + 1) * 40]))
        schema = "id LONG, ts TIMESTAMP, name STRING"
        terms = "days(ts), bucket(4, id), truncate(2, name)"
        ours = identifier(tmp_path)

        def stream_ours() -> None:  # the stream into rotsink's table, run to the input's end
            (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
             .writeStream.format("rotsink")
             .options(**{"format": "parquet", "table.format": "iceberg", "partitionBy": terms,
                         "rotation.maxBatches": "1", "table.identifier": ours,
                         **iceberg_catalog_options(iceberg_catalog_db)})
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start(str(tmp_path / "out")).awaitTermination())

        stream_ours()
        theirs = f"{ours}_by_spark"
        spark.sql(f"CREATE TABLE {SESSION_CATALOG}.{theirs} ({schema.replace(' LONG', ' BIGINT')}) "
                  f"USING iceberg PARTITIONED BY ({terms})")
        spark.read.schema(schema).json(str(source)).writeTo(f"{SESSION_CATALOG}.{theirs}").append()

        def partitions(table: str) -> dict[int, tuple]:
            read = spark.sql(f"SELECT id, _partition FROM {SESSION_CATALOG}.{table}").collect()
            assert len(read) == len({r.id for r in read}), f"{table}: a row twice"
            return {r.id: tuple(r["_partition"]) for r in read}

        by_spark = partitions(theirs)
        assert set(by_spark) == set(IDS)  # Spark's writer took every input row
        assert partitions(ours) == by_spark

        def spec(table: str) -> list[tuple[str, str]]:  # DESCRIBE's "# Partitioning" rows
            return [(r.col_name, r.data_type) for r in
                    spark.sql(f"DESCRIBE TABLE {SESSION_CATALOG}.{table}").collect()
                    if r.col_name.startswith("Part ")]

        assert spec(ours) == spec(theirs) and len(spec(theirs)) == 3

        # Spark's table, joined by a stream with no partitionBy: its partitioning is taken
        more = tmp_path / "more"
        more.mkdir()
        for f in range(2):
            part = zip(IDS[f * 40:(f + 1) * 40], rows[f * 40:(f + 1) * 40], strict=True)
            (more / f"in-{f}.json").write_text(
                "".join(json.dumps({**r, "id": i + 1000}) + "\n" for i, r in part))
        query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
                 .json(str(more)).writeStream.format("rotsink")
                 .options(**{"format": "parquet", "table.format": "iceberg",
                             "rotation.maxBatches": "1", "table.identifier": theirs,
                             **iceberg_catalog_options(iceberg_catalog_db)})
                 .option("checkpointLocation", str(tmp_path / "ck-join"))
                 .trigger(availableNow=True).start(str(tmp_path / "joined")))
        query.awaitTermination()
        joined = spark.sql(
            f"SELECT id, _partition, {SESSION_CATALOG}.system.days(ts) AS day, "
            f"{SESSION_CATALOG}.system.bucket(4, id) AS bucket, "
            f"{SESSION_CATALOG}.system.truncate(2, name) AS trunc "
            f"FROM {SESSION_CATALOG}.{theirs}").collect()
        assert sorted(r.id for r in joined) == sorted([*IDS, *(i + 1000 for i in IDS[:80])])
        for r in joined:  # Iceberg's own functions, in Spark, give each row its tuple
            assert tuple(r["_partition"]) == (r.day, r.bucket, r.trunc), r

        # Spark SQL evolves rotsink's table (hours, not days); the first query's restart
        # goes on adding its files under the spec they are laid out by, which Spark reads
        spark.sql(f"ALTER TABLE {SESSION_CATALOG}.{ours} REPLACE PARTITION FIELD days(ts) "
                  "WITH hours(ts)")
        before = {r.file_path for r in spark.sql(
            f"SELECT file_path FROM {SESSION_CATALOG}.{ours}.files").collect()}
        spark.sql(f"ALTER TABLE {SESSION_CATALOG}.{ours} WRITE ORDERED BY id DESC")
        (source / "in-3.json").write_text("".join(
            json.dumps({**r, "id": r["id"] + 2000}) + "\n" for r in rows[:40]))
        stream_ours()  # the query's restart
        table = f"{SESSION_CATALOG}.{ours}"
        assert sorted(r.id for r in spark.table(table).collect()) == \
            sorted([*IDS, *(i + 2000 for i in IDS[:40])])
        by_spec = {r.spec_id: r.n for r in spark.sql(
            f"SELECT spec_id, count(*) AS n FROM {table}.files GROUP BY spec_id").collect()}
        assert set(by_spec) == {0}, by_spec  # the new files under the output's spec
        # ... and in the order Spark SQL gave the table, which their entries name
        import pyarrow.parquet as pq

        new_files = [r for r in spark.sql(f"SELECT file_path, sort_order_id FROM {table}.files")
                     .collect() if r.file_path not in before]
        assert new_files and {r.sort_order_id for r in new_files} == {1}, new_files
        for r in new_files:
            ids = pq.read_table(r.file_path.removeprefix("file:")).column("id").to_pylist()
            assert ids == sorted(ids, reverse=True), r.file_path
        assert [t for _, t in spec(ours) if "(ts)" in t] == ["hours(ts)"], spec(ours)
        day = start + dt.timedelta(days=2)
        window = spark.sql(f"SELECT id FROM {table} WHERE ts >= TIMESTAMP '{day.isoformat()}' "
                           f"AND ts < TIMESTAMP '{(day + dt.timedelta(days=1)).isoformat()}'")
        assert sorted(r.id for r in window.collect()) == sorted(
            i + offset for offset in (0, 2000) for i, r in zip(IDS, rows, strict=True)
            if (offset == 0 or i in IDS[:40]) and r["ts"] is not None
            and day <= dt.datetime.fromisoformat(r["ts"]) < day + dt.timedelta(days=1))


if "iceberg" in READERS:
    @pytest.mark.parametrize("server", ["iceberg-rest", "postgres", "hive-metastore", "glue"])
    def test_spark_reads_through_the_catalog_server_the_stream_commits_to(
            spark, tmp_path, request, server, shown):
        """A catalog server between rotsink and Spark, Apache Iceberg's own REST catalog
        server, a SQL catalog on PostgreSQL (Spark's Iceberg JDBC catalog over the same
        database), Hive's metastore (through Spark's own Hive client) or AWS Glue (moto's,
        the output and the table in its S3; Spark's GlueCatalog and S3FileIO): the stream
        creates its table there (at the output, no warehouse named) and commits each batch; a
        Spark Iceberg catalog over the same server reads exactly the rows of the files the log
        lists as finalized at the batch the table carries, run after run."""
        catalog = server.replace("-", "_") + "_" + \
            "".join(c for c in tmp_path.name if c.isalnum())[-12:]
        address = request.getfixturevalue(server.replace("-", "_").replace("glue", "s3_endpoint"))
        out: Path | str = tmp_path / "out"
        fs_options: dict[str, str] = {}
        if server == "glue":  # the credentials: the environment's, in every process
            from tests.support.s3server import create_bucket

            out = f"s3://{create_bucket(address, f'lake-{catalog[-12:].lower()}')}/out"
            fs_options = {"endpoint_url": address}
            theirs = {".type": "glue", ".glue.endpoint": address, ".client.region": "us-east-1",
                      ".s3.endpoint": address, ".s3.path-style-access": "true"}
            ours = {"table.catalog.type": "glue", "table.catalog.glue.endpoint": address,
                    "table.catalog.glue.region": "us-east-1", "fs.endpoint_url": address}
        elif server in ("iceberg-rest", "hive-metastore"):
            kind = server.split("-")[0].replace("iceberg", "rest")
            theirs = {".type": kind, ".uri": address}
            ours = {"table.catalog.type": kind, "table.catalog.uri": address}
        else:  # the same rows of the database, under the same catalog name
            theirs = {".type": "jdbc", ".uri": "jdbc:postgresql://" + address.split("@")[1],
                      ".jdbc.user": "rotsink", ".jdbc.schema-version": "V1",
                      ".warehouse": f"file://{tmp_path}/warehouse"}
            ours = {"table.catalog.type": "sql", "table.catalog.uri": address,
                    "table.catalog.name": catalog}
        for key, value in {"": "org.apache.iceberg.spark.SparkCatalog",
                           ".cache-enabled": "false", **theirs}.items():
            spark.conf.set(f"spark.sql.catalog.{catalog}{key}", value)
        table = identifier(tmp_path)
        options = {"format": "parquet", "table.format": "iceberg", "partitionBy": "grp",
                   "rotation.maxBatches": "2", "table.identifier": table, **ours}
        batches = set()
        for run in range(RUNS):
            write_numbered_source(tmp_path / "in", files=FILES_PER_RUN, rows_per_file=20,
                                  start_file=run * FILES_PER_RUN)
            df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
                str(tmp_path / "in"))
            (df.writeStream.format("rotsink").options(**options)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start(str(out)).awaitTermination())
            version, batch, ids = read_table(spark, "iceberg", table, catalog=catalog)
            assert batch is not None, f"table version {version} carries no rotsink batch"
            assert Counter(ids) == finalized_ids(out, batch, fs_options), (version, batch)
            batches.add(batch)
        assert len(batches) == RUNS, "each run moves the table"
        location = spark.sql(f"DESCRIBE TABLE EXTENDED {catalog}.{table}").where(
            "col_name = 'Location'").first()
        assert location is not None and location.data_type.rstrip("/").endswith(str(out))
        shown(f"Spark's Iceberg reader through {server}: {RUNS} runs, each read equal to the "
              "log's finalized files at its batch")


if "delta" in READERS:
    def test_spark_with_hive_support_finds_the_delta_table_by_its_name(
            spark, tmp_path, hive_metastore, shown):
        """A stream into a Delta table named in Hive's metastore (``table.catalog.type=
        hive``, ``table.identifier``): Spark with Hive support, in a process of its own as a
        platform runs it, finds ``spark.table(name)`` a Delta table at the output and reads
        exactly the rows of the files the log lists as finalized."""
        import json
        import subprocess
        import sys
        import uuid

        from tests.support.spark_log import latest_batch

        out, name = tmp_path / "out", f"db_{uuid.uuid4().hex[:8]}.events"
        options = {"format": "parquet", "table.format": "delta", "partitionBy": "grp",
                   "rotation.maxBatches": "2", "table.catalog.type": "hive",
                   "table.catalog.uri": hive_metastore, "table.identifier": name}
        write_numbered_source(tmp_path / "in", files=FILES_PER_RUN, rows_per_file=20)
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
            str(tmp_path / "in"))
        (df.writeStream.format("rotsink").options(**options)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
         .start(str(out)).awaitTermination())
        found = subprocess.run(
            [sys.executable, "-m", "tests.support.hive_spark", hive_metastore, name,
             str(tmp_path / "warehouse")], capture_output=True, text=True, timeout=300,
            cwd=Path(__file__).resolve().parents[2], check=False)
        assert found.returncode == 0, found.stderr[-3000:]
        table = json.loads(found.stdout.strip().splitlines()[-1])
        batch = latest_batch(out)
        assert batch is not None
        expected = finalized_ids(out, batch)
        assert expected and Counter(table["ids"]) == expected
        assert (table["provider"], table["type"]) == ("delta", "EXTERNAL"), table
        assert table["location"].removeprefix("file:").rstrip("/") == str(out), table
        shown(f"Spark with Hive support read the Delta table {name} by its name: "
              f"{len(table['ids'])} rows, the log's finalized files")
