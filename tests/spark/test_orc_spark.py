"""Spark's own ORC reader on rotsink's ORC output: the types as Spark writes them, every codec,
and values ORC cannot hold refused before anything is written."""

from __future__ import annotations

import pytest

from tests.support.streams import rotsink_ids, run_to_completion, write_numbered_source

# Values where pyarrow's ORC form and Spark's differ (commit_protocol/formats/orc.py): dates of
# the hybrid calendar, zone-less timestamps (Spark's bigint with an attribute), nested ones.
SPECIAL = """
select id,
  element_at(array(date'0001-01-01', date'1500-03-01', date'1582-10-04', date'1582-10-15',
                   date'2024-02-29', date'9999-12-31', cast(null as date)), cast(id as int)) d,
  element_at(array(timestamp_ntz'0001-01-01 00:00:00', timestamp_ntz'1900-01-01 00:00:00.123456',
                   timestamp_ntz'1969-12-31 23:59:59.5', timestamp_ntz'2024-06-01 12:00:00.000001',
                   timestamp_ntz'9999-12-31 23:59:59.999999', timestamp_ntz'1582-10-10 00:00:00',
                   cast(null as timestamp_ntz)), cast(id as int)) ntz,
  element_at(array(timestamp'1700-01-01 00:00:00', timestamp'1969-12-31 23:59:59',
                   timestamp'2024-06-01 12:00:00.000001', timestamp'2262-04-11 00:00:00',
                   timestamp'1970-01-01 00:00:00.5', cast(null as timestamp),
                   timestamp'2000-02-29 23:59:59.999999'), cast(id as int)) ts,
  cast(id * 1.25 as decimal(38, 18)) dec, cast(concat('b', id) as binary) bin,
  named_struct('x', timestamp_ntz'2000-01-01 00:00:00', 'y', date'1000-01-01') st,
  array(date'1200-05-05', date'2000-01-01') dates,
  map('k', timestamp_ntz'1999-12-31 23:59:59') m
from range(1, 8)
"""


def test_spark_reads_exactly_the_rows_with_the_types_spark_writes(spark, tmp_path):
    expected = spark.sql(SPECIAL)
    expected.write.parquet(str(tmp_path / "src"))
    stream = spark.readStream.schema(expected.schema).parquet(str(tmp_path / "src"))
    out = str(tmp_path / "out")
    (stream.writeStream.format("rotsink").option("format", "orc")
     .option("rotation.maxBatches", "1").option("checkpointLocation", str(tmp_path / "ck"))
     .trigger(availableNow=True).start(out).awaitTermination())
    spark_back = spark.read.orc(out)
    assert spark_back.schema.simpleString() == expected.schema.simpleString()
    want = sorted(map(str, expected.collect()))
    assert sorted(map(str, spark_back.collect())) == want
    assert sorted(map(str, spark.read.format("rotsink").load(out).collect())) == want
    # and Spark's own ORC files of the same rows read the same through Spark
    expected.write.orc(str(tmp_path / "spark_orc"))
    assert sorted(map(str, spark.read.orc(str(tmp_path / "spark_orc")).collect())) == want


@pytest.mark.parametrize("codec", ["zstd", "snappy", "lz4", "zlib", "none"])
def test_every_codec_is_read_by_spark(spark, tmp_path, codec):
    total = write_numbered_source(tmp_path / "in", files=2, rows_per_file=30)
    out = tmp_path / "out"
    run_to_completion(spark, tmp_path / "in", out, tmp_path / "ck", format="orc",
                      compression=codec, **{"rotation.maxBatches": "2"})
    spark_rows = spark.read.orc(str(out)).select("id", "name").collect()
    assert sorted(int(r.id) for r in spark_rows) == list(range(total))
    assert all(r.name == f'row "{r.id}", ü\\' for r in spark_rows)
    assert rotsink_ids(spark, out) == list(range(total))


def test_a_value_orc_cannot_hold_fails_the_query_naming_it_and_nothing_is_visible(spark,
                                                                                 tmp_path):
    from pyspark.errors import StreamingQueryException

    bad = spark.sql("select id, case when id = 2 then timestamp'1960-06-01 00:00:00.25' "
                    "else timestamp'2020-01-01 00:00:00' end ts from range(4)")
    bad.write.parquet(str(tmp_path / "src"))
    stream = spark.readStream.schema(bad.schema).parquet(str(tmp_path / "src"))
    out = tmp_path / "out"
    query = (stream.writeStream.format("rotsink").option("format", "orc")
             .option("rotation.maxBatches", "1").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start(str(out)))
    with pytest.raises(StreamingQueryException, match=r"column 'ts' holds 1960-06-01 "
                                                      r"00:00:00.250000\+00:00"):
        query.awaitTermination()
    assert not (out / "_spark_metadata").exists() or not any(
        p for p in (out / "_spark_metadata").iterdir() if not p.name.startswith("."))
    assert not [p for p in out.rglob("part-*") if "_rotsink" not in p.parts]
