"""Partition directories named exactly as Spark's own file sink names them, for every type a
user partitions by, in a session time zone that is not UTC; and read back as the same typed
values by Spark's reader and by rotsink's."""

from __future__ import annotations

from pathlib import Path

import pytest

TIME_ZONE = "America/Los_Angeles"

# (column type, SQL values, why the case is here)
CASES = [
    ("timestamp", ["timestamp'2024-01-01 10:00:00'", "timestamp'2024-01-01 10:00:00.5'",
                   "timestamp'2024-01-01 10:00:00.000001'", "timestamp'1969-12-31 23:59:59.999999'",
                   "timestamp'2024-03-10 02:30:00'", "null"],
     "microseconds without trailing zeros, session time zone, a daylight-saving gap"),
    ("timestamp_ntz",
     ["timestamp_ntz'2024-01-01 10:00:00.25'", "timestamp_ntz'2024-01-01 10:00:00'"],
     "no time zone"),
    ("date", ["date'2024-02-29'", "date'0001-01-01'", "null"], "leap day, year one"),
    ("decimal(10,2)", ["1.5", "-0.01", "0", "12345678.9", "null"], "scale kept: 1.50"),
    ("decimal(38,18)", ["0", "1.5", "0.000000001"], "plain, never 0E-18"),
    ("double", ["1.0", "0.1", "1e10", "1e-5", "1e7", "123456.789", "0.001", "-2.5",
                "double('-0.0')", "double('NaN')", "double('Infinity')", "double('-Infinity')",
                "5e-324", "1.7976931348623157e308", "null"],
     "Java's Double.toString: 1.0E10, NaN, Infinity, 4.9E-324"),
    ("float", ["1.1", "0.1", "1e10", "3.4e38", "1e-5", "float('NaN')", "null"],
     "the 32-bit value's shortest decimal: 1.1, not 1.100000023841858"),
    ("boolean", ["true", "false", "null"], "true/false"),
    ("string", ["'a/b'", "'x=y'", "'100%'", "'ü é'", "'#:?*'", "''", "null", "'..'",
                "'a\\\\b'", "'tab\\there'", "'{[]}^'", "'\"q\"'", "' lead'", "'+'"],
     "escaped characters; empty and null share the default partition"),
    ("int", ["-1", "0", "2147483647", "null"], "integers"),
]


@pytest.fixture(scope="module")
def session_time_zone(spark):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", TIME_ZONE)
    yield TIME_ZONE
    spark.conf.set("spark.sql.session.timeZone", before)


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def written(request, spark, tmp_path_factory, session_time_zone):
    """(kind, values, why, schema, outputs): the case's rows written partitioned by ``p`` by
    Spark's own sink (``builtin``) and by rotsink (``rotsink``, every file finalized)."""
    kind, values, why = request.param
    tmp_path = tmp_path_factory.mktemp(kind.split("(")[0])
    rows = " UNION ALL ".join(f"SELECT {i} AS id, CAST({v} AS {kind}) AS p"
                              for i, v in enumerate(values))
    expected = spark.sql(rows)
    source = str(tmp_path / "src")
    expected.write.parquet(source)
    outs = {sink: tmp_path / sink for sink in ("builtin", "rotsink")}
    for sink, out in outs.items():
        stream(spark, source, expected.schema, out, tmp_path / f"ck-{sink}", sink)
    return kind, values, why, expected.schema, outs


def stream(spark, source: str, schema, out: Path, checkpoint: Path, sink: str) -> None:
    writer = (spark.readStream.schema(schema).parquet(source).writeStream
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    if sink == "builtin":
        writer = writer.format("parquet").partitionBy("p")
    else:
        writer = (writer.format("rotsink").option("format", "parquet")
                  .option("partitionBy", "p").option("rotation.maxBatches", "1"))
    writer.start(str(out)).awaitTermination()


def directories(out: Path) -> set[str]:
    return {p.name for p in out.iterdir() if p.is_dir() and p.name.startswith("p=")}


def as_text(rows) -> list[tuple[int, str]]:
    """(id, value) pairs comparable across readers (NaN included)."""
    return sorted((r.id, repr(r.p)) for r in rows)


def test_directory_names_and_values_match_spark(spark, written):
    kind, values, why, schema, outs = written
    assert directories(outs["rotsink"]) == directories(outs["builtin"]), why
    # Spark's reader infers the partition column from the names: the same names, the same
    # typed values.
    spark_builtin = as_text(spark.read.parquet(str(outs["builtin"])).collect())
    assert as_text(spark.read.parquet(str(outs["rotsink"])).collect()) == spark_builtin
    # rotsink's reader knows the column's type: the values Spark's sink put into the names.
    typed_builtin = as_text(spark.read.schema(schema).parquet(str(outs["builtin"])).collect())
    assert as_text(spark.read.format("rotsink").load(str(outs["rotsink"])).collect()) == \
        typed_builtin


def filters(kind: str, values: list[str]) -> list[str]:
    """Every filter rotsink evaluates on partition values, on column ``p`` of type ``kind``:
    comparisons around a middle value of the case, lists with and without a null, the null
    tests, negations, and for strings the three LIKE shapes Spark pushes."""
    typed = [v for v in values if v != "null"]
    pivot = f"CAST({typed[len(typed) // 2]} AS {kind})"
    other = f"CAST({typed[0]} AS {kind})"
    cases = [f"p = {pivot}", f"p <=> {pivot}", "p <=> NULL", f"p IN ({pivot}, {other})",
             f"p IN ({pivot}, NULL)", f"p NOT IN ({pivot})", f"p < {pivot}", f"p <= {pivot}",
             f"p > {pivot}", f"p >= {pivot}", "p IS NULL", "p IS NOT NULL",
             f"NOT (p = {pivot})", f"p = {pivot} AND p IS NOT NULL"]
    if kind == "string":
        cases += ["p LIKE 'a%'", "p LIKE '10%'", "p LIKE '%e'", "p LIKE '%/%'"]
    return cases


def ids_per_filter(df_for, cases: list[str]) -> dict[str, list[int]]:
    """The ids each filter returns, all filters in one Spark job (one scan per filter, each
    planned with its own pushed filters)."""
    from functools import reduce

    from pyspark.sql import functions as F

    scans = [df_for().where(case).select(F.lit(i).alias("case"), "id")
             for i, case in enumerate(cases)]
    found: dict[str, list[int]] = {case: [] for case in cases}
    for row in reduce(lambda a, b: a.unionByName(b), scans).collect():
        found[cases[row.case]].append(row.id)
    return {case: sorted(ids) for case, ids in found.items()}


def test_every_pushed_filter_returns_what_spark_returns(spark, written, pushdown):
    """rotsink's reader with the filters pushed (partition pruning, exact), against Spark's
    own reader of the same files with the same filters, for every partition column type."""
    kind, values, why, schema, outs = written
    cases = filters(kind, values)
    ours = ids_per_filter(lambda: spark.read.format("rotsink").load(str(outs["rotsink"])),
                          cases)
    theirs = ids_per_filter(lambda: spark.read.schema(schema).parquet(str(outs["rotsink"])),
                            cases)
    assert ours == theirs, why
    assert len({tuple(ids) for ids in ours.values()}) > 3, "the filters tell rows apart"
    # pruned when planned: one directory's file (timestamp directories are read in the
    # session time zone, known only to tasks: they are skipped there, not at planning)
    everything = spark.read.format("rotsink").option("numPartitions", "1000")  # a task a file
    planned = everything.load(str(outs["rotsink"])).where(cases[0])
    everything = everything.load(str(outs["rotsink"]))
    if kind != "timestamp":
        assert planned.rdd.getNumPartitions() == 1 < everything.rdd.getNumPartitions()
