"""Files per hour: one small micro-batch per second into rotsink and into Spark's JSON sink.

    python benchmarks/files_per_hour.py --seconds 120
    python benchmarks/files_per_hour.py --seconds 60 --format parquet    # or --format orc

A feeder thread drops one small JSON file per second (the same content for every sink) into
a fresh source directory read by a ``ProcessingTime("1 second")`` query with
``maxFilesPerTrigger=1`` (one file, one task, per batch). The sinks run one after another in
one session (after a short warm-up query each), each for ``--seconds``: Spark's built-in JSON
sink, rotsink with default rotation, and (unless ``--scaled-interval 0``) rotsink with
``rotation.interval`` and ``rotation.inactivity`` scaled down so that time-based rolls happen
many times within the run. After ``--seconds`` the feeder stops and the query drains and
stops; the finalized data files are counted from each sink's ``_spark_metadata`` log (what
Spark's readers list), cross-checked against the visible files on disk.

Per-hour figures: ``measured`` is files / run seconds * 3600, which for rotsink undercounts
the steady state (no file can roll before the interval has passed once, and a file still in
progress at the end is not counted). ``steady state`` is what the rotation policy yields with
batches arriving every second: each slot rolls at the first commit at least ``interval``
after its file was opened, and the next file opens with the next batch, so one file per
``interval + 1 s`` per slot; the scaled run measures that period.

With ``--format parquet`` or ``orc`` both sinks write that format (Spark's built-in
``parquet`` or ``orc`` sink; rotsink stages the rows across batches and encodes each file at
its roll).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import feed_and_drain, median, quiet_session, ratio  # noqa: E402

SCHEMA = "id LONG, name STRING, score DOUBLE, grp STRING"
_SLOT = re.compile(r"-(\d+)-\d+[^/]*$")  # part-<slot>-<seq><suffix>


def input_row(i: int) -> dict:
    return {"id": i, "name": f"n{i}", "score": i / 7, "grp": str(i % 8)}


def start(spark, source: Path, out: Path, options: dict[str, str] | None, *, fmt: str,
          warm_up=False):
    # One file per batch: a batch that catches up after a slow one must not merge files into
    # several tasks (slots), which would change both sinks' counts.
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    writer = df.writeStream.option("checkpointLocation", f"{out}-ck")
    if options is None:
        writer = writer.format("json" if fmt == "jsonl" else fmt)
    else:
        writer = writer.format("rotsink").options(format=fmt, **options)
    trigger = {"availableNow": True} if warm_up else {"processingTime": "1 second"}
    return writer.trigger(**trigger).start(str(out))


def warm_up(spark, root: Path, sides: dict[str, dict[str, str] | None], fmt: str) -> None:
    """A few batches per sink first, so that no measured run starts with a cold batch."""
    source = root / "warm-src"
    source.mkdir()
    for n in range(3):
        (source / f"in-{n}.json").write_text(json.dumps({"id": n, "name": "w", "score": 0.5,
                                                         "grp": "0"}) + "\n")
    for name, options in sides.items():
        start(spark, source, root / f"warm-{name}", options, fmt=fmt,
              warm_up=True).awaitTermination()


def run(spark, directory: Path, options: dict[str, str] | None, args) -> float:
    """Feed one file per second for ``args.seconds`` into a fresh query; seconds it ran."""
    (directory / "src").mkdir(parents=True)
    query = start(spark, directory / "src", directory / "out", options, fmt=args.format)
    elapsed = feed_and_drain(query, directory / "src", args.rows, input_row, args.seconds)
    query.stop()
    return elapsed


def committed(out: Path) -> tuple[list[dict], int, set[str], int]:
    """From the output's metadata log (both sinks write Spark's format): the finalized data
    files it lists, the number of committed batches, and the slots (task partitions) rotsink
    wrote, and how many of its files are in progress."""
    from commit_protocol.log import MetadataLog
    from commit_protocol.storage import LocalStorage

    log = MetadataLog(LocalStorage(str(out)), compact_interval=10)
    latest = log.latest_batch_id()
    if latest is None:
        return [], 0, set(), 0
    entries = list(log.finalized_entries(latest))
    slots = {m.group(1) for e in entries if (m := _SLOT.search(e["path"]))}
    in_progress = log.read_state(latest).in_progress if (out / "_rotsink").exists() else ()
    slots |= {f"{f.partition:05d}" for f in in_progress}
    return entries, latest + 1, slots, len(in_progress)


def visible_files(out: Path) -> int:
    return sum(1 for p in out.rglob("*") if p.is_file()
               and not any(part.startswith((".", "_")) for part in p.relative_to(out).parts))


def roll_period_s(entries: list[dict]) -> float | None:
    """Median seconds between consecutive finalizations of one slot (commit times)."""
    by_slot: dict[str, list[int]] = {}
    for e in entries:
        slot = _SLOT.search(e["path"])
        by_slot.setdefault(slot.group(1) if slot else "", []).append(e["modificationTime"])
    gaps = [(b - a) / 1000 for times in by_slot.values()
            for a, b in itertools.pairwise(sorted(times))]
    return median(gaps) if gaps else None


def report(root: Path, elapsed: dict[str, float], seconds: int, rows: int, scaled_s: int,
           default_s: float, max_bytes: int) -> None:
    print(f"one input file of {rows} rows per second for {seconds} s per sink, one sink after "
          f"another; ProcessingTime('1 second'); default rotation.interval = {default_s:.0f} s")
    per_hour, periods, slots, mb_per_hour = {}, {}, {}, 0.0
    for name, took in elapsed.items():
        out = root / name / "out"
        entries, batches, slots[name], in_progress = committed(out)
        if name == "builtin":
            mb_per_hour = sum(e["size"] for e in entries) / took * 3600 / 1e6
        per_hour[name] = len(entries) / took * 3600
        periods[name] = roll_period_s(entries) if name != "builtin" else None
        print(f"{name:>15}: {batches:4d} batches in {took:.0f} s, {len(entries):4d} finalized "
              f"files (log), {visible_files(out):4d} visible on disk, {in_progress} in "
              f"progress -> measured {per_hour[name]:6.0f} files/hour"
              + (f"; median roll period {periods[name]:.1f} s per slot" if periods[name] else ""))
    n_slots = max(1, len(slots["rotsink"]))
    steady = n_slots * 3600 / (default_s + 1)
    print(f"rotsink steady state from the policy: each slot (task partition) rolls at the first "
          f"commit >= {default_s:.0f} s after its file opened, the next file opens with the next "
          f"batch: a file per ~{default_s + 1:.0f} s per slot x {n_slots} slot(s) seen = "
          f"{steady:.0f} files/hour (the data, ~{mb_per_hour:.1f} MB/hour, never reaches "
          f"rotation.maxBytes={max_bytes / 1e6:.0f} MB)")
    line = (f"ratio builtin/rotsink files per hour: measured over the run "
            f"{ratio(per_hour['builtin'], per_hour['rotsink'])} (no roll can happen before "
            f"{default_s:.0f} s and the open file is not counted, so short runs overstate it); "
            f"against the policy's steady state {ratio(per_hour['builtin'], steady)}")
    period = periods.get("rotsink-scaled")
    if period:
        scaled_steady = n_slots * 3600 / (period - scaled_s + default_s)
        print(f"rotsink-scaled measured a roll every {period:.1f} s per slot with interval "
              f"{scaled_s} s: a lag of {period - scaled_s:.1f} s; with that lag on the "
              f"{default_s:.0f} s default: {scaled_steady:.0f} files/hour")
        line += f"; against the scaled run's {ratio(per_hour['builtin'], scaled_steady)}"
    print(line + " (target >= 50x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=120, help="how long to feed input")
    parser.add_argument("--rows", type=int, default=10, help="rows per input file (batch)")
    parser.add_argument("--format", default="jsonl", choices=["jsonl", "parquet", "orc"],
                        help="the output format of both sinks (Spark's json, parquet or orc)")
    parser.add_argument("--scaled-interval", type=int, default=10,
                        help="seconds for the scaled rotsink run's interval/inactivity; 0 = off")
    args = parser.parse_args()
    from commit_protocol.records.config import RotationPolicy

    default_s = RotationPolicy().interval_ms / 1000
    root = Path(tempfile.mkdtemp(prefix="rotsink-fph-"))
    spark = quiet_session("rotsink-files-per-hour")
    sides: dict[str, dict[str, str] | None] = {"builtin": None, "rotsink": {}}
    if args.scaled_interval:
        scaled = f"{args.scaled_interval}s"
        sides["rotsink-scaled"] = {"rotation.interval": scaled, "rotation.inactivity": scaled}
    print(f"format {args.format}, {args.seconds} s of one batch per second, {args.rows} rows each")
    warm_up(spark, root, sides, args.format)
    elapsed = {name: run(spark, root / name, opts, args) for name, opts in sides.items()}
    report(root, elapsed, args.seconds, args.rows, args.scaled_interval, default_s,
           RotationPolicy().max_bytes)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
