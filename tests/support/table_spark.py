"""Spark's own Delta Lake and Iceberg readers in the application that writes, as users run them.

delta-spark and iceberg-spark-runtime are published per Spark release, and not yet for the
newest (:data:`tests.support.jvm.TABLE_READERS`): the tests that use them run in the compat
virtualenvs of older PySpark releases (``pytest -m compat``, ``docs/development.md``), where
the session of the tests (``tests/conftest.py``) and each crash-loop driver
(``tests/crash_job.py``) start with the readers of that release on the classpath.

An Iceberg table is read through a Spark Iceberg catalog over the catalog rotsink commits to:
a JDBC catalog on the same SQLite file. Iceberg's JDBC catalog keeps a table under the name of
the Spark catalog that opens it, and pyiceberg's SQL catalog under the name rotsink opens it
with: ``rotsink`` for the embedded catalog beside an output (the crash loop's drivers name
their Spark catalog so), ``table.catalog.name`` otherwise (the session of the tests names its
Spark catalog ``lake``, and rotsink's queries give that name).
"""

from __future__ import annotations

import json
from pathlib import Path

ICEBERG_CATALOG = "rotsink"  # the embedded catalog's name (table.catalog.name's default)
SESSION_CATALOG = "lake"  # the Iceberg catalog of the tests' session
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def reader_session(formats: tuple[str, ...], *, iceberg_db: Path | None = None,
                   catalog: str = ICEBERG_CATALOG) -> tuple[tuple[Path, ...], dict[str, str]]:
    """The jars and settings of a session with Spark's readers of ``formats``: Delta as the
    session catalog's extension, Iceberg as the catalog ``catalog`` on the SQLite file
    ``iceberg_db`` (its catalog cache off, so each read sees the newest snapshot)."""
    from tests.support.jvm import table_reader_jars

    jars: list[Path] = []
    extensions: list[str] = []
    conf: dict[str, str] = {}
    if "delta" in formats:
        jars += table_reader_jars("delta")
        extensions.append(DELTA_EXTENSION)
        conf.update({"spark.sql.catalog.spark_catalog":
                     "org.apache.spark.sql.delta.catalog.DeltaCatalog",
                     # a snapshot's state is rebuilt in 50 partitions by default: seconds a
                     # read on a busy core, for a table of a few dozen commits
                     "spark.databricks.delta.snapshotPartitions": "1"})
    if "iceberg" in formats:
        assert iceberg_db is not None, "an Iceberg reader needs its catalog's SQLite file"
        jars += table_reader_jars("iceberg")
        extensions.append(ICEBERG_EXTENSION)
        conf.update(iceberg_catalog_conf(catalog, iceberg_db))
    if extensions:
        conf["spark.sql.extensions"] = ",".join(extensions)
    return tuple(jars), conf


def iceberg_catalog_conf(catalog: str, iceberg_db: Path) -> dict[str, str]:
    """A Spark Iceberg catalog ``catalog`` over the SQL catalog on ``iceberg_db``, as
    docs/tables.md writes it (``tests/unit/test_docs.py`` keeps the two the same): Iceberg's
    JDBC catalog refuses to start without a warehouse, and creates its database tables in its
    old schema, which pyiceberg warns of at every commit, unless told ``V1``."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.type": "jdbc", f"{prefix}.uri": f"jdbc:sqlite:{iceberg_db}",
            f"{prefix}.warehouse": f"file://{iceberg_db.parent}",
            f"{prefix}.jdbc.schema-version": "V1",
            f"{prefix}.cache-enabled": "false"}


def iceberg_catalog_options(iceberg_db: Path, catalog: str = SESSION_CATALOG
                            ) -> dict[str, str]:
    """rotsink's ``table.catalog.*`` options for the SQL catalog on ``iceberg_db`` that the
    session's Spark catalog ``catalog`` opens too."""
    return {"table.catalog.name": catalog, "table.catalog.type": "sql",
            "table.catalog.uri": f"sqlite:///{iceberg_db}",
            "table.catalog.warehouse": f"file://{iceberg_db.parent}"}


def identifier(tmp_path: Path) -> str:
    """A test's own Iceberg table, ``lake.<its directory's name>``: rotsink's
    ``table.identifier``, which the session's Spark catalog ``lake`` opens as
    ``lake.lake.<name>``."""
    return "lake." + "".join(c if c.isalnum() else "_" for c in tmp_path.name)


def sql_table(table_format: str, out: Path, tmp_path: Path) -> str:
    """The table in Spark SQL: Delta by path, Iceberg in the session's catalog."""
    return f"delta.`{out}`" if table_format == "delta" else \
        f"{SESSION_CATALOG}.{identifier(tmp_path)}"


def read_table(spark, table_format: str, table: str, *, catalog: str = ICEBERG_CATALOG
               ) -> tuple[int, int | None, list[int]]:
    """The newest version of ``table`` (a Delta path, an Iceberg identifier in the catalog
    ``catalog``) read by Spark as one version: ``(version, the rotsink batch it carries,
    sorted ids)``. SQL names the version (``DESCRIBE HISTORY``, Iceberg's ``snapshots``
    table) and reads Iceberg's rows (``VERSION AS OF``); the DataFrame reader Delta's."""
    if table_format == "delta":
        newest = spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").first()
        assert newest is not None, "a Delta table without a commit"
        version = newest["version"]
        rows = spark.read.format("delta").option("versionAsOf", version).load(table)
        batch = delta_batch(Path(table), version)
    else:
        return _read_iceberg(spark, f"{catalog}.{table}")
    return version, batch, sorted(r.id for r in rows.select("id").collect())


def _read_iceberg(spark, name: str, attempts: int = 5) -> tuple[int, int | None, list[int]]:
    """The newest snapshot, then its rows: two statements, between which a commit and the
    expiry after it may remove that snapshot where the table keeps snapshots for a second
    (the crash loop's ``table.snapshotRetention``). Spark then refuses the version (when the
    expiry came before it planned the read) or misses the snapshot's manifest list (when it
    came after), as any reader of an expired snapshot fails; a read that failed so, of a
    snapshot the table no longer has, is made again of the newer one. Any other failure, or
    one of a snapshot still there, is raised."""
    for attempt in range(attempts):
        version, batch = _newest_snapshot(spark, name)
        try:
            rows = spark.sql(f"SELECT id FROM {name} VERSION AS OF {version}").collect()
        except Exception:
            if attempt == attempts - 1 or _has_snapshot(spark, name, version):
                raise
            continue
        return version, None if batch is None else int(batch), sorted(r.id for r in rows)
    raise AssertionError("unreachable")


def _newest_snapshot(spark, name: str) -> tuple[int, str | None]:
    newest = spark.sql(f"SELECT snapshot_id, summary['rotsink.batch'] AS batch FROM "
                       f"{name}.snapshots ORDER BY committed_at DESC LIMIT 1").first()
    assert newest is not None, "an Iceberg table without a snapshot"
    return newest["snapshot_id"], newest["batch"]


def _has_snapshot(spark, name: str, version: int) -> bool:
    return spark.sql(f"SELECT 1 FROM {name}.snapshots WHERE snapshot_id = {version}"
                     ).first() is not None


def delta_batch(table: Path, version: int) -> int | None:
    """The rotsink batch that Delta version ``version`` carries: the ``txn`` action of its
    commit file (None for a commit without one, another writer's)."""
    commit = table / "_delta_log" / f"{version:020d}.json"
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        if "txn" in action:
            return int(action["txn"]["version"])
    return None


def table_missing(error: Exception) -> bool:
    """Whether a read failed only because the table does not exist yet."""
    text = f"{type(error).__name__}: {error}"
    return any(sign in text for sign in ("is not a Delta table", "DELTA_MISSING_DELTA_TABLE",
                                         "NoSuchTableException", "TABLE_OR_VIEW_NOT_FOUND",
                                         "PATH_NOT_FOUND", "DELTA_PATH_DOES_NOT_EXIST"))
