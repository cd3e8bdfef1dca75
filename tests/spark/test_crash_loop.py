"""The crash loop (``tests/crashloop.py``) at CI size: at least 2 random SIGKILLs of the whole
driver plus one kill and one error (the query restarted after it) at every failpoint, then
every input row exactly once, across a schema change (a column added with
``schema.evolution``) in the middle of the lives; a loop in Parquet that kills (and fails) at
every step of encoding staged rows (in tasks and on the driver), one in ORC; a Delta and an
Iceberg table loop (every table step); and smaller loops on SeaweedFS (a local S3 server)
with zstd and encryption, on the emulators of Cloud Storage and Azure (there with a Delta and
an Iceberg table), and with a change-feed follower.

At CI size the random kills are the main loop's, and the smaller loops (ORC's too) kill at
the one step only they add (:func:`sized`); their points and random kills grow with the
size, a parameter:
``ROTSINK_CRASH_KILLS=200 pytest tests/spark/test_crash_loop.py``
(or ``python -m tests.crashloop --random-kills 200 [--s3 | --store azure | --bulk orc]``)
runs the long version on demand.
"""

from __future__ import annotations

import os
import time

import pytest

from commit_protocol.vocabulary.failpoints import ALL_POINTS, QUARANTINE_POINTS
from tests.crashloop import (
    CONVERT_POINTS,
    SCHEMA_POINTS,
    TABLE_POINTS,
    CrashLoop,
    Outcome,
    bulk_loop,
    catalog_table_loop,
    check_output,
    cloud_table_loop,
    encrypted_s3_output,
    quarantine_loop,
    summary,
    table_loop,
    table_points,
)

KILLS = int(os.environ.get("ROTSINK_CRASH_KILLS", "2"))
SEED = int(os.environ.get("ROTSINK_CRASH_SEED", "7"))
# On S3 the steps whose storage operations differ from local disk: segment writes, the
# server-side compose of a publish (the conditional PUT of the log file follows it), the
# multipart upload of a compaction.
S3_POINTS = ("task.mid_append", "driver.after_rename", "log.during_compaction")


def sized(points: tuple[str, ...], ci_points: tuple[str, ...]) -> tuple[str, ...]:
    """A loop's points: at CI size (``ROTSINK_CRASH_KILLS`` up to 6) the step that only it
    kills at (its store's, format's or reader's; the main loop, the Parquet loop and the
    table loops kill and fail at every step of the protocol), all on demand."""
    return ci_points if KILLS <= 6 else points


def run_loop(spark, loop: CrashLoop, shown, *, random_kills: int, points) -> Outcome:
    started = time.monotonic()
    with shown.live():
        print()
        loop.run(random_kills=random_kills, points=points)
    outcome = check_output(spark, loop)
    report = summary(loop, outcome, wall_s=time.monotonic() - started)
    shown(report)
    assert loop.tally.problems == [], report
    assert loop.tally.random_kills >= random_kills, report
    assert set(points) <= set(loop.tally.killed_at), report
    if loop.raises:  # an error there too, not only a kill (see raise_lives)
        assert set(points) - set(SCHEMA_POINTS) <= set(loop.tally.raised_at), report
    assert (outcome.lost, outcome.duplicated) == (0, 0), report
    assert outcome.rotsink_rows == outcome.rows_in, report
    assert loop.reads.reads >= loop.tally.lives, report  # the reader ran beside the lives
    if loop.schema_change:  # rows before the change without the column, after it with it
        assert loop.evolved and outcome.tags is not None, report
        with_tag, without, wrong = outcome.tags
        assert with_tag > 0 and without > 0 and wrong == 0, report
    return outcome


@pytest.mark.slow
def test_crash_loop_loses_and_duplicates_nothing(spark, tmp_path, shown):
    loop = CrashLoop(tmp_path, seed=SEED, schema_change=True)
    # Parquet's and the table's points: below
    row_points = tuple(p for p in ALL_POINTS
                       if p not in CONVERT_POINTS + TABLE_POINTS + QUARANTINE_POINTS)
    outcome = run_loop(spark, loop, shown, random_kills=KILLS, points=row_points)
    assert outcome.spark_matches_finalized, "Spark's reader must see exactly the finalized rows"


@pytest.mark.slow
@pytest.mark.parametrize("fmt, extra_points", [
    ("parquet", sized(("driver.after_rename", "task.after_append", "driver.schema_change"),
                      ("driver.schema_change",))),
    ("orc", ()),  # the steps ORC shares with Parquet are killed in the Parquet loop
])
def test_crash_loop_in_bulk_formats(spark, tmp_path, shown, fmt, extra_points):
    """Staged rows encoded at the roll: kills at every conversion step, in a task and on
    the driver, beside random kills. In Parquet the reader beside the lives reads through
    the fast path (``pyspark_rotsink.read`` on this session: Spark's Parquet reader for the
    finalized files, rotsink's for the staged rows)."""
    loop = bulk_loop(tmp_path, fmt, seed=SEED, schema_change=True)
    if fmt == "parquet":
        loop.fast_path_spark = spark
    # ORC encodes in a task and on the driver as Parquet does, with its own writer
    points = CONVERT_POINTS + extra_points if fmt == "parquet" else sized(
        CONVERT_POINTS, ("task.after_convert",))
    outcome = run_loop(spark, loop, shown, random_kills=KILLS // (3 if extra_points else 6),
                       points=points)
    assert outcome.spark_matches_finalized, "Spark's reader must see exactly the finalized rows"


@pytest.mark.slow
@pytest.mark.compat
@pytest.mark.spark_tables
@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_crash_loop_with_a_table(spark, tmp_path, shown, table_format):
    """Parquet into a Delta or Iceberg table: kills between the log file and the table commit,
    (Delta) between an added column and the files, after the table commit, and at random;
    after every life (and its ``verify --repair``) the table's own reader (delta-rs,
    pyiceberg) reads exactly the finalized rows. Where this PySpark has Spark's own reader of
    the format, every life's application also reads the table with it while its query
    commits (after a kill, the restarted driver's), and after a run to its end equal to
    ``spark.read.parquet(out)``. ``ROTSINK_CRASH_KILLS=0``, the size of the compat run on every
    older release (``.ci/run``), kills the driver once, between the log file and the table
    commit."""
    from tests.support.jvm import table_reader_formats

    loop = table_loop(tmp_path, table_format, seed=SEED, schema_change=KILLS > 0)
    if table_format == "iceberg":
        loop.options["table.identifier"] = "lake.events"
    loop.spark_table_reads = table_format in table_reader_formats()
    loop.rewrites = True  # a maintenance job shares the table: the log follows it
    points: tuple[str, ...] = ("table.before_commit",)
    if KILLS:
        points = table_points(table_format)
        points += ("driver.after_rename",)
    else:  # two lives: building a class-data archive costs more than it saves
        loop.class_archives = False
        loop.raises = False  # the older releases' errors: test_failures.py's compat tests
    outcome = run_loop(spark, loop, shown, random_kills=KILLS // 4, points=points)
    assert outcome.spark_matches_finalized, "Spark's reader must see exactly the finalized rows"
    assert loop.tally.table_checks == loop.tally.lives
    assert loop.tally.own_run_table_checks >= 1  # the final run, as its driver left the table
    assert loop.tally.table_rows == outcome.finalized_rows > 0
    if loop.spark_table_reads:
        assert loop.tally.spark_table_reads > 0 and loop.tally.spark_final_checks > 0


@pytest.mark.slow
def test_crash_loop_with_rows_the_table_refuses(spark, tmp_path, shown):
    """``errors.mode=quarantine`` into a Delta table another writer made with ``name`` NOT
    NULL, every eleventh input row's name null: the driver killed, and the step raising,
    before the quarantine's commit and between it and the output's (on demand also around
    the output's commit point), and at random. After every life both outputs pass
    ``verify``; at the end every input row is in the table's output or in the quarantine
    once, and the quarantine holds exactly the rows with a null name."""
    from tests.support.streams import has_null_name

    loop = quarantine_loop(tmp_path, seed=SEED)
    # at CI size the quarantine's own steps, each killed and raising (every other step
    # raising, without Spark: tests/unit/test_quarantine.py)
    points = sized(QUARANTINE_POINTS + ("driver.after_stage", "driver.before_log_write",
                                        "task.before_report"), QUARANTINE_POINTS)
    outcome = run_loop(spark, loop, shown, random_kills=KILLS // 4, points=points)
    assert outcome.quarantined == sum(has_null_name(i) for i in range(outcome.rows_in)) > 0
    assert outcome.quarantined_wrongly == 0
    assert loop.tally.table_rows == outcome.finalized_rows > 0


@pytest.mark.slow
def test_crash_loop_on_s3_with_encryption(spark, tmp_path, shown, seaweedfs_endpoint):
    """On SeaweedFS, not moto: its requests run concurrently, as S3's do (moto's pass through
    one lock), so the tasks, the reader beside the lives and ``verify --repair`` really race
    on the store."""
    url, options = encrypted_s3_output(tmp_path, seaweedfs_endpoint)
    loop = CrashLoop(tmp_path, seed=SEED, out_url=url, options=options)
    loop.raises = False  # a store's errors: tests/unit/test_store_faults.py
    run_loop(spark, loop, shown, random_kills=KILLS // 10,
             points=sized(S3_POINTS, ("driver.after_rename",)))


@pytest.mark.slow
def test_crash_loop_with_an_iceberg_table_on_cloud_storage(spark, tmp_path, shown,
                                                           gcs_endpoint):
    """Parquet into an Iceberg table on Cloud Storage's emulator, pyiceberg's files on it
    through gcsfs. Kills at the steps whose storage operations differ there (segment uploads,
    the publish's compose before the log file's conditional upload, a compaction's upload)
    and around the table commit (at CI size: between the log file and the table commit). After
    every life the table's own reader holds exactly the finalized rows."""
    loop = cloud_table_loop(tmp_path, "gcs", gcs_endpoint, "iceberg", seed=SEED)
    loop.raises = False  # a store's errors: tests/unit/test_store_faults.py
    run_loop(spark, loop, shown, random_kills=KILLS // 10,
             points=sized((*S3_POINTS, "table.before_commit", "table.after_commit"),
                          ("table.before_commit",)))
    assert loop.tally.table_checks == loop.tally.lives


@pytest.mark.slow
@pytest.mark.parametrize("catalog", ["glue", "iceberg-rest", "postgres", "hive"])
def test_crash_loop_with_an_iceberg_table_in_a_catalog(spark, tmp_path, shown, request,
                                                       catalog):
    """Parquet into an Iceberg table in AWS Glue (moto's, with its S3), in Apache Iceberg's
    own REST catalog server, in a SQL catalog on PostgreSQL or in Hive's metastore: kills
    between the log file and the table commit, after it and at random; after every life
    the table, read through the catalog by pyiceberg, holds exactly the finalized rows. At
    CI size: between the log file and the table commit."""
    server = request.getfixturevalue({"glue": "s3_endpoint", "iceberg-rest": "iceberg_rest",
                                      "postgres": "postgres",
                                      "hive": "hive_metastore"}[catalog])
    loop = catalog_table_loop(tmp_path, catalog, server, seed=SEED)
    loop.raises = False  # a catalog's errors: tests/unit/test_catalogs.py
    outcome = run_loop(spark, loop, shown, random_kills=KILLS // 10,
                       points=sized(("table.before_commit", "table.after_commit",
                                     "driver.after_rename"), ("table.before_commit",)))
    assert loop.tally.table_checks == loop.tally.lives
    assert outcome.finalized_rows > 0  # the table's commits added files, not only snapshots


@pytest.mark.slow
@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_crash_loop_with_a_table_on_azure(spark, tmp_path, shown, azure_endpoint,
                                          table_format):
    """Parquet into a table on Azure (Azurite): Delta committed by delta-rs with Azure's
    conditional create, Iceberg by pyiceberg through a SQL catalog with its files on Azure.
    Kills between the log file and the table commit and after it, and, between the two
    loops, at Azure's own steps: a task's segment upload, the publish's Put Block From URL
    and block list (before the log file's conditional Put Blob), a compaction's upload.
    After every life the table's own reader holds exactly the finalized rows. At CI size:
    Azure's own step only."""
    loop = cloud_table_loop(tmp_path, "azure", azure_endpoint, table_format, seed=SEED)
    loop.raises = False  # the table loops raise at these points; a store's errors:
    # tests/unit/test_store_faults.py
    storage_point = {"delta": "task.mid_append", "iceberg": "log.during_compaction"}
    points = (storage_point[table_format], "table.before_commit", "table.after_commit",
              "driver.after_rename")
    run_loop(spark, loop, shown, random_kills=KILLS // 10,
             points=sized(points, (storage_point[table_format],)))
    assert loop.tally.table_checks == loop.tally.lives


@pytest.mark.slow
def test_crash_loop_with_a_change_feed_follower(spark, tmp_path, shown):
    """A downstream query follows the output through the change feed and is killed with
    every life of the upstream driver (random and failpoint kills, including mid-commit,
    and in the clean-up that keeps the states it reads): at the end it holds every upstream
    row exactly once."""
    from tests.support.feed_follower import Follower

    # the loop's log files are cleaned up a second after each compaction: the follower,
    # killed with every upstream life, reads the states of the batches it missed from the
    # change-feed segments the clean-up keeps (feed.retention)
    loop = CrashLoop(tmp_path, seed=SEED)
    assert loop.options["log.cleanupDelay"] == "1s" and loop.options["feed.retention"]
    loop.follower = Follower(tmp_path, loop.out_url)
    loop.raises = False  # the main loop raises at these points; this one is about the feed
    run_loop(spark, loop, shown, random_kills=KILLS // 6,
             points=sized(("driver.after_stage", "driver.after_rename", "task.after_append",
                           "cleanup.after_feed_keep"),
                          ("cleanup.after_feed_keep",)))
    assert loop.follower.finish() == 0
    seen = loop.follower.ids(spark)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    lost = set(range(loop.rows_in)) - set(seen)
    shown(f"follower: killed {loop.follower.kills} times, {sum(seen.values())} rows, "
          f"lost {len(lost)}, duplicated {duplicated}")
    assert (len(lost), duplicated) == (0, 0)
    assert set(seen) == set(range(loop.rows_in))
