"""Kafka in, rotsink out, exactly once: a local KRaft broker (``tests/support/kafka.py``),
Spark's Kafka source, and the driver killed at random and at failpoints, in JSON lines and
Parquet, partitioned (``tests/kafka_crashloop.py``). Every (partition, offset) of the topic
must be in the output exactly once, with the row its record carried.

The size is a parameter: ``ROTSINK_CRASH_KILLS=60 pytest tests/spark/test_kafka_pipeline.py``
(or ``python -m tests.kafka_crashloop --random-kills 60``) runs a long version on demand.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from tests.kafka_crashloop import CI_POINTS, POINTS, kafka_loop, run, spark_producer

KILLS = int(os.environ.get("ROTSINK_CRASH_KILLS", "6"))
SEED = int(os.environ.get("ROTSINK_CRASH_SEED", "7"))


@pytest.fixture(scope="module")
def kafka_broker():
    from tests.support.kafka import start_kafka_broker

    broker = start_kafka_broker()
    yield broker
    broker.stop()


# At CI size a staged bulk format and Avro, a row format whose files span micro-batches like
# JSON lines' (whose every failpoint the main crash loop kills), each killed at its points
# (a random kill per 12 of ROTSINK_CRASH_KILLS); JSON lines too on demand.
KAFKA_FORMATS = ["parquet", "avro"] + (["jsonl"] if KILLS > 6 else [])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", KAFKA_FORMATS)
def test_kafka_to_rotsink_exactly_once_through_driver_kills(spark, tmp_path, shown,
                                                            kafka_broker, fmt):
    points = CI_POINTS[fmt] if KILLS <= 6 else POINTS[fmt]
    topic = f"events-{fmt}"
    loop = kafka_loop(tmp_path, fmt, bootstrap=kafka_broker.bootstrap, seed=SEED,
                      produce=spark_producer(spark, kafka_broker.bootstrap, topic))
    with shown.live():
        print()
        outcome, kafka, report = run(spark, loop, random_kills=KILLS // 12, points=points)
    shown(report)
    assert loop.tally.problems == [] and loop.reads.reads > 0, report
    assert loop.tally.random_kills >= KILLS // 12, report
    assert loop.tally.driver_kills == len(points), report
    assert kafka.records == loop.produced and kafka.partitions == 3, report
    assert kafka.exact, report
    assert outcome.exact, report


def readme_pipeline(spark, bootstrap: str, topic: str):
    """The README's pipeline, as written there: Kafka records parsed, a day column added."""
    from pyspark.sql import functions as F

    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 200)
            .load()
            .select(F.from_json(F.col("value").cast("string"),
                                "id LONG, kind STRING, ts TIMESTAMP").alias("e"),
                    "partition", "offset")
            .select("e.*", F.to_date("e.ts").alias("day"), "partition", "offset"))


def produce_events(spark, bootstrap: str, topic: str, ids: range) -> None:
    records = [(f"key-{i}", json.dumps({"id": i, "kind": "click" if i % 2 else "view",
                                        "ts": f"2026-11-{1 + i % 3:02d}T10:00:00Z"}))
               for i in ids]
    spark_producer(spark, bootstrap, topic)(records)


@pytest.mark.parametrize("s3_server", ["seaweedfs"], indirect=True)
def test_the_readme_pipeline_kafka_to_parquet_on_s3(spark, tmp_path, kafka_broker, s3_server):
    """Kafka -> rotsink Parquet on S3 (given as s3://, Spark's checkpoint on s3a://), two
    runs; Spark's s3a reader sees exactly the finalized rows, rotsink's every record once."""
    from tests.support.s3server import new_bucket

    bucket, topic = new_bucket(spark, s3_server), "readme-events"
    out, checkpoint = f"s3://{bucket}/events", f"s3a://{bucket}/_checkpoints/events"
    for ids in (range(0, 600), range(600, 900)):
        produce_events(spark, kafka_broker.bootstrap, topic, ids)
        (readme_pipeline(spark, kafka_broker.bootstrap, topic).writeStream.format("rotsink")
         .option("checkpointLocation", checkpoint)
         .option("format", "parquet")
         .option("rotation.maxRecords", "40")    # some files finish, some stay in progress
         .option("partitionBy", "day")
         .options(**s3_server.options)
         .trigger(availableNow=True)
         .start(out).awaitTermination())
    topic_records = Counter((r.partition, r.offset) for r in (
        spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("subscribe", topic).load().select("partition", "offset").collect()))

    def rows(df) -> Counter:
        return Counter((r.partition, r.offset, r.id, str(r.day)) for r in
                       df.select("partition", "offset", "id", "day").collect())

    rotsink = spark.read.format("rotsink").options(**s3_server.options)
    everything, finalized = rows(rotsink.load(out)), rows(
        rotsink.option("includeInProgress", "false").load(out))
    assert Counter({(p, o): 1 for p, o, _, _ in everything}) == topic_records
    assert sum(topic_records.values()) == 900 and max(everything.values()) == 1
    assert all(day == f"2026-11-{1 + i % 3:02d}" for _, _, i, day in everything)
    by_spark = rows(spark.read.parquet(f"s3a://{bucket}/events"))
    assert by_spark == finalized and 0 < sum(finalized.values()) < 900


def evolving_pipeline(spark, bootstrap: str, topic: str, payload: str):
    """The README's pipeline over a payload schema that may have grown."""
    from pyspark.sql import functions as F

    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .select(F.from_json(F.col("value").cast("string"), payload).alias("e"),
                    "partition", "offset")
            .select("e.*", F.to_date("e.ts").alias("day"), "partition", "offset"))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_topic_whose_records_gain_a_field(spark, tmp_path, kafka_broker, fmt):
    """Records of schema v1; the query stops; the producer adds ``region``; the query
    restarts with v2 and ``schema.evolution=addColumns``: every record once, old rows with a
    null region, new rows with theirs, through rotsink's reader, a change feed and Spark's
    reader (Parquet with mergeSchema, JSON lines inferred)."""
    topic, out, ck = f"evolving-{fmt}", str(tmp_path / "out"), str(tmp_path / "ck")
    v1 = "id LONG, kind STRING, ts TIMESTAMP"
    v2 = v1 + ", region STRING"
    region = {i: f"r{i % 3}" for i in range(300, 500)}
    produce_events(spark, kafka_broker.bootstrap, topic, range(0, 300))
    for payload in (v1, v2):
        if payload == v2:  # the producer's records now carry the new field
            spark_producer(spark, kafka_broker.bootstrap, topic)(
                [(f"key-{i}", json.dumps({"id": i, "kind": "view", "region": region[i],
                                          "ts": "2026-11-02T10:00:00Z"}))
                 for i in range(300, 500)])
        (evolving_pipeline(spark, kafka_broker.bootstrap, topic, payload)
         .writeStream.format("rotsink").option("checkpointLocation", ck)
         .option("format", fmt).option("rotation.maxRecords", "40")
         .option("partitionBy", "day").option("schema.evolution", "addColumns")
         .trigger(availableNow=True).start(out).awaitTermination())
    offsets = Counter((r.partition, r.offset) for r in (
        spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("subscribe", topic).load().select("partition", "offset").collect()))

    def regions(df) -> dict[int, str | None]:
        rows = df.select("id", "region", "partition", "offset").collect()
        assert Counter((r.partition, r.offset) for r in rows) <= offsets  # once each
        return {r.id: r.region for r in rows}

    expected = {i: region.get(i) for i in range(500)}
    assert regions(spark.read.format("rotsink").load(out)) == expected
    feed = (spark.readStream.format("rotsink").load(out).writeStream.format("rotsink")
            .option("checkpointLocation", str(tmp_path / "ck-feed"))
            .trigger(availableNow=True).start(str(tmp_path / "feed")))
    feed.awaitTermination()
    assert regions(spark.read.format("rotsink").load(str(tmp_path / "feed"))) == expected
    finalized = regions(spark.read.format("rotsink").option("includeInProgress", "false")
                        .load(out))
    spark_reader = (spark.read.option("mergeSchema", "true").parquet(out) if fmt == "parquet"
                    else spark.read.json(out))
    assert regions(spark_reader) == finalized
    assert {i for i in finalized if i < 300} and {i for i in finalized if i >= 300}
