"""The crash loop with Kafka in: Apache Apex's end-to-end exactly-once scenario, with Spark's
Kafka offsets in place of Apex's windows.

Each life produces the next records (unique keys, numbered JSON values) to a topic of
several partitions on the local broker (:mod:`tests.support.kafka`), then a child driver runs
``readStream.format("kafka")`` into rotsink until it is killed: at random, or at a failpoint.
Spark's checkpoint holds the Kafka offsets of each micro-batch; rotsink's log decides which
of a replayed batch's rows become visible. After the loop every (partition, offset) of the
topic must be in the output exactly once, with the row its record carried.

    python -m tests.kafka_crashloop --random-kills 50 [--format parquet]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from tests.crashloop import SINK_OPTIONS, CrashLoop, Outcome, check_output, summary
from tests.support.streams import numbered_row

# The steps a Kafka batch takes through rotsink that a file-source loop also kills; here a
# replayed batch re-reads Kafka's offsets from Spark's checkpoint instead of files.
POINTS = {
    "jsonl": ("task.mid_append", "driver.after_stage", "driver.after_rename",
              "driver.before_log_write"),
    "parquet": ("task.before_convert", "task.after_convert", "driver.after_rename",
                "driver.after_log_write"),
    "avro": ("task.mid_append", "task.before_sync", "driver.after_rename",
             "driver.after_log_write"),
}
# Two of them per format at CI size (each life starts a JVM and a Kafka consumer).
CI_POINTS = {"jsonl": ("task.mid_append", "driver.after_stage"),
             "parquet": ("task.after_convert", "driver.after_rename"),
             "avro": ("task.before_sync", "driver.after_log_write")}

Records = list[tuple[str, str]]


@dataclass
class KafkaCrashLoop(CrashLoop):
    bootstrap: str = ""
    topic: str = "events"
    produce: Callable[[Records], None] | None = None  # (key, value) records to the topic
    produced: int = field(default=0)

    @property
    def source_arg(self) -> str:
        return f"kafka://{self.bootstrap}/{self.topic}"

    @property
    def read_schema(self) -> pa.Schema:
        from tests.support.crash_reader import SCHEMA

        return SCHEMA.append(pa.field("kafka_partition", pa.int32())).append(
            pa.field("kafka_offset", pa.int64()))

    def add_input(self) -> None:
        start = self.files_written * self.rows_per_file
        count = self.files_per_life * self.rows_per_file
        assert self.produce is not None
        self.produce([(f"key-{i}", numbered_row(i)) for i in range(start, start + count)])
        self.produced += count
        # Spark's Kafka sink is at least once: a producing task that was retried (a broker
        # timeout on a busy machine) wrote its records twice, at other offsets. The output
        # must then hold them as often as the topic does (check_kafka_output checks every
        # (partition, offset) once)
        counts = getattr(self.produce, "key_counts", None)
        if counts is not None:
            self.input_counts = Counter({i: n for i, n in counts().items() if n > 1})


def kafka_loop(workdir: Path, fmt: str, *, bootstrap: str, produce: Callable[[Records], None],
               seed: int = 7) -> KafkaCrashLoop:
    # kills only: the main loop raises at every point; this one is about Kafka's offsets
    return KafkaCrashLoop(workdir, seed=seed, options={**SINK_OPTIONS, "format": fmt},
                          bootstrap=bootstrap, topic=f"events-{fmt}", produce=produce,
                          raises=False)


class SparkProducer:
    """Writes records with Spark's Kafka sink (keyed: spread over the topic's partitions),
    and reads back how often the topic holds each record's id."""

    def __init__(self, spark, bootstrap: str, topic: str) -> None:
        self.spark, self.bootstrap, self.topic = spark, bootstrap, topic

    def __call__(self, records: Records) -> None:
        (self.spark.createDataFrame(records, "key STRING, value STRING").write.format("kafka")
         .option("kafka.bootstrap.servers", self.bootstrap).option("topic", self.topic).save())

    def key_counts(self) -> Counter:
        keys = (self.spark.read.format("kafka").option("kafka.bootstrap.servers",
                                                       self.bootstrap)
                .option("subscribe", self.topic).load()
                .selectExpr("CAST(key AS STRING) AS key").collect())
        return Counter(int(r.key.removeprefix("key-")) for r in keys)


def spark_producer(spark, bootstrap: str, topic: str) -> Callable[[Records], None]:
    return SparkProducer(spark, bootstrap, topic)


@dataclass(frozen=True)
class KafkaOutcome:
    """Every record of the topic against the output, by (partition, offset)."""

    records: int
    partitions: int
    lost: int
    duplicated: int
    wrong_rows: int  # an output row whose id is not the one its (partition, offset) carried

    @property
    def exact(self) -> bool:
        return self.lost == self.duplicated == self.wrong_rows == 0

    def line(self) -> str:
        return (f"kafka: {self.records} records in {self.partitions} partitions; by (partition, "
                f"offset): lost {self.lost}, duplicated {self.duplicated}, "
                f"wrong rows {self.wrong_rows}")


def check_kafka_output(spark, loop: KafkaCrashLoop) -> KafkaOutcome:
    topic = (spark.read.format("kafka").option("kafka.bootstrap.servers", loop.bootstrap)
             .option("subscribe", loop.topic).load()
             .selectExpr("partition", "offset", "CAST(key AS STRING) AS key").collect())
    expected = {(r.partition, r.offset): int(r.key.removeprefix("key-")) for r in topic}
    output = (spark.read.format("rotsink").options(**loop.read_options).load(loop.out_url)
              .select("kafka_partition", "kafka_offset", "id").collect())
    seen = Counter((r.kafka_partition, r.kafka_offset) for r in output)
    return KafkaOutcome(
        records=len(expected), partitions=len({p for p, _ in expected}),
        lost=len(expected.keys() - seen.keys()),
        duplicated=sum(n - 1 for n in seen.values()) + len(seen.keys() - expected.keys()),
        wrong_rows=sum(1 for r in output
                       if expected.get((r.kafka_partition, r.kafka_offset)) != r.id))


def run(spark, loop: KafkaCrashLoop, *, random_kills: int,
        points: tuple[str, ...]) -> tuple[Outcome, KafkaOutcome, str]:
    started = time.monotonic()
    loop.run(random_kills=random_kills, points=points)
    outcome, kafka = check_output(spark, loop), check_kafka_output(spark, loop)
    report = summary(loop, outcome, wall_s=time.monotonic() - started) + "\n" + kafka.line()
    return outcome, kafka, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka_crashloop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--random-kills", type=int, default=50)
    parser.add_argument("--format", choices=sorted(POINTS), default="jsonl")
    parser.add_argument("--workdir", help="default: a new temp directory")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    import tempfile

    from datasource.commands.session import local_session
    from tests.support.jvm import spark_packages
    from tests.support.kafka import start_kafka_broker

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rotsink-kafka-loop-"))
    broker = start_kafka_broker()
    spark = local_session(app_name="rotsink-kafka-loop", extra_jars=spark_packages().jars)
    try:
        topic = f"events-{args.format}"
        loop = kafka_loop(workdir, args.format, bootstrap=broker.bootstrap, seed=args.seed,
                          produce=spark_producer(spark, broker.bootstrap, topic))
        outcome, kafka, report = run(spark, loop, random_kills=args.random_kills,
                                     points=POINTS[args.format])
    finally:
        spark.stop()  # before the broker: its Kafka clients would retry a stopped broker
        broker.stop()
    print(report)
    return 0 if outcome.exact and kafka.exact and not loop.tally.problems else 1


if __name__ == "__main__":
    sys.exit(main())
