"""Kafka in, rotsink out, exactly once: a local KRaft broker (``tests/support/kafka.py``),
Spark's Kafka source, and the driver killed at random and at failpoints, in JSON lines and
Parquet, partitioned (``tests/kafka_crashloop.py``). Every (partition, offset) of the topic
must be in the output exactly once, with the row its record carried.

The size is a parameter: ``ROTSINK_CRASH_KILLS=60 pytest tests/spark/test_kafka_pipeline.py``
(or ``python -m tests.kafka_crashloop --random-kills 60``) runs a long version on demand.
"""

from __future__ import annotations

import os

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


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_kafka_to_rotsink_exactly_once_through_driver_kills(spark, tmp_path, capsys,
                                                            kafka_broker, fmt):
    points = CI_POINTS[fmt] if KILLS <= 6 else POINTS[fmt]
    topic = f"events-{fmt}"
    loop = kafka_loop(tmp_path, fmt, bootstrap=kafka_broker.bootstrap, seed=SEED,
                      produce=spark_producer(spark, kafka_broker.bootstrap, topic))
    with capsys.disabled():
        print()
        outcome, kafka, report = run(spark, loop, random_kills=max(1, KILLS // 6),
                                     points=points)
        print(report)
    assert loop.tally.problems == [] and loop.reads.reads > 0, report
    assert loop.tally.random_kills >= 1 and loop.tally.driver_kills == len(points), report
    assert kafka.records == loop.produced and kafka.partitions == 3, report
    assert kafka.exact, report
    assert outcome.exact, report
