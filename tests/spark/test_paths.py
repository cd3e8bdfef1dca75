"""Output and checkpoint paths with a space, ``%``, ``#``, ``+`` and non-ASCII letters in them.

Spark's readers open each log entry as ``new Path(new URI(path))``: the entries must be URIs
quoted exactly as Spark's own file sink quotes them. Every reader is checked on such a path
with such partition values: Spark's batch reader and file stream source, rotsink's reader,
the fast path, the change feed and ``rotsink verify --deep``; and a log an earlier version
wrote with the root unquoted keeps reading.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.support.streams import SCHEMA, numbered_row

SPECIAL = "dir %20 #1 a+b é中"  # a space, a literal %20, '#', '+' and non-ASCII letters
GROUPS = ["x y", "q#1é", "50%", "a/b"]  # partition values Spark escapes, and some it keeps


def write_source(directory: Path, *, files: int, start: int = 0, rows: int = 20) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(start, start + files):
        lines = [json.loads(numbered_row(i)) for i in range(f * rows, (f + 1) * rows)]
        text = "".join(json.dumps({**row, "grp": GROUPS[row["id"] % 4]}) + "\n" for row in lines)
        (directory / f"in-{f:03d}.json").write_text(text)
    return (start + files) * rows


def stream(spark, source: Path, out: Path, checkpoint: Path, sink: str, **options: str):
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    writer = (df.writeStream.format(sink).option("checkpointLocation", str(checkpoint))
              .trigger(availableNow=True))
    if sink == "rotsink":
        writer = writer.options(partitionBy="grp", **options)
    else:
        writer = writer.partitionBy("grp")
    writer.start(str(out)).awaitTermination()


def logged_uris(out: Path) -> list[str]:
    """Every ``path`` of every log file, the state entries' included."""
    return [json.loads(line)["path"] for log in sorted((out / "_spark_metadata").iterdir())
            if not log.name.startswith(".")  # Hadoop's .crc files beside Spark's log files
            for line in log.read_text(encoding="utf-8").splitlines()[1:]]


def ids(rows) -> Counter:
    return Counter((r.id, r.grp) for r in rows)


EXPECTED = {(i, GROUPS[i % 4]) for i in range(200)}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_every_reader_reads_a_path_with_special_characters(spark, tmp_path, fmt):
    import pyspark_rotsink
    from datasource.commands.cli import main

    out, checkpoint = tmp_path / f"out {SPECIAL}", tmp_path / f"ck {SPECIAL}"
    write_source(tmp_path / "in", files=10)
    options = {"format": fmt, "rotation.maxBatches": "3", "log.compactInterval": "4"}
    stream(spark, tmp_path / "in", out, checkpoint, "rotsink", **options)

    everything = ids(spark.read.format("rotsink").load(str(out)).collect())
    assert set(everything) == EXPECTED and set(everything.values()) == {1}
    finalized = ids(spark.read.format("rotsink").option("includeInProgress", "false")
                    .load(str(out)).collect())
    assert 0 < sum(finalized.values()) < 200  # files in progress that Spark must not see
    spark_read = spark.read.parquet if fmt == "parquet" else spark.read.json
    assert ids(spark_read(str(out)).select("id", "grp").collect()) == finalized
    assert ids(pyspark_rotsink.read(spark, str(out)).collect()) == everything
    assert main(["verify", "--deep", str(out)]) == 0

    # Spark's file stream source, which reads the log as its batch reader does
    copied = tmp_path / "copy"
    (spark.readStream.schema(spark_read(str(out)).schema).format(fmt.replace("jsonl", "json"))
     .load(str(out)).writeStream.format("parquet").option("checkpointLocation",
                                                          str(tmp_path / "ck-copy"))
     .trigger(availableNow=True).start(str(copied)).awaitTermination())
    assert ids(spark.read.parquet(str(copied)).select("id", "grp").collect()) == finalized

    # the change feed, into a second path with such characters
    down = tmp_path / f"down {SPECIAL}"
    (spark.readStream.format("rotsink").load(str(out)).writeStream.format("rotsink")
     .option("checkpointLocation", str(tmp_path / f"ck-down {SPECIAL}"))
     .trigger(availableNow=True).start(str(down)).awaitTermination())
    assert ids(spark.read.format("rotsink").load(str(down)).collect()) == everything


def test_the_log_names_files_exactly_as_spark_s_sink_does(spark, tmp_path):
    """Both sinks write the same rows to sibling paths with the same special characters:
    their log entries name the same directories (the roots differ only in the first word)."""
    write_source(tmp_path / "in", files=2)
    outs = {sink: tmp_path / f"{sink} {SPECIAL}" for sink in ("json", "rotsink")}
    for sink, out in outs.items():
        stream(spark, tmp_path / "in", out, tmp_path / f"ck {sink}", sink,
               **{"rotation.maxBatches": "1"})
    directories = {sink: {uri.rsplit("/", 1)[0].replace(sink, "SINK", 1)
                          for uri in logged_uris(out) if not uri.endswith("/_rotsink")}
                   for sink, out in outs.items()}
    assert directories["rotsink"] == directories["json"]
    assert len(directories["json"]) == len(GROUPS)
    assert any("%20%2520%20%231%20a+b%20é中/grp=50%2525" in d for d in directories["json"])


def as_written_before_quoting(out: Path) -> int:
    """Rewrite the log (and the intents) as rotsink wrote it before it quoted the output's
    root: the root as it is, the part below it quoted. Returns the entries rewritten."""
    from commit_protocol.vocabulary.uris import EntryPaths

    paths = EntryPaths(f"file://{out}")
    new, old = (json.dumps(p).encode()[:-1] for p in (paths.prefix, paths.legacy_prefix))
    rewritten = 0
    for name in [*(out / "_spark_metadata").iterdir(), *(out / "_rotsink/intent").iterdir()]:
        data = name.read_bytes()
        rewritten += data.count(b'{"path":' + new)
        name.write_bytes(data.replace(b'{"path":' + new, b'{"path":' + old))
    return rewritten


def test_a_log_written_before_paths_were_quoted_keeps_reading(spark, tmp_path):
    """rotsink's readers and ``verify`` read such a log at once; Spark's reader fails on it
    (why the entries must be quoted) until the query's next compaction rewrites them."""
    from datasource.commands.cli import main

    out, checkpoint = tmp_path / f"out {SPECIAL}", tmp_path / f"ck {SPECIAL}"
    options = {"rotation.maxBatches": "2", "log.compactInterval": "5"}
    write_source(tmp_path / "in", files=3)
    stream(spark, tmp_path / "in", out, checkpoint, "rotsink", **options)
    assert as_written_before_quoting(out) > 3
    assert set(ids(spark.read.format("rotsink").load(str(out)).collect())) == \
        {(i, GROUPS[i % 4]) for i in range(60)}
    assert main(["verify", "--deep", str(out)]) == 0
    with pytest.raises(Exception, match="URISyntaxException|Illegal character|FileNotFound"):
        spark.read.json(str(out)).collect()

    total = write_source(tmp_path / "in", files=4, start=3)  # batches 3-6: batch 4 compacts
    stream(spark, tmp_path / "in", out, checkpoint, "rotsink", **options)
    everything = ids(spark.read.format("rotsink").load(str(out)).collect())
    assert set(everything) == {(i, GROUPS[i % 4]) for i in range(total)}
    finalized = ids(spark.read.format("rotsink").option("includeInProgress", "false")
                    .load(str(out)).collect())
    assert ids(spark.read.json(str(out)).select("id", "grp").collect()) == finalized
    assert main(["verify", "--deep", str(out)]) == 0
