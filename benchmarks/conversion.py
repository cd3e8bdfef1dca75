"""Staging and converting Parquet without Spark: memory, file size and time against pyarrow.

    python benchmarks/conversion.py                  # 2,000,000 rows; row groups of 8 and 64 MB
    python benchmarks/conversion.py --rows 200000 --row-group-mb 8 --repeats 1
    python benchmarks/conversion.py --sorted         # also with an Iceberg table's sort order

rotsink stages a Parquet slot's in-progress rows as Arrow IPC streams and encodes them into
the finished file when the slot rolls (``commit_protocol/task/conversion.py``). This measures that
path through rotsink's own code and its anchor, pyarrow writing the same rows in one call.
The rows: id long, a derived long (distinct, hash-like), a string of 1,024 distinct values,
a timestamp and a double.

* **staging**: a real task (``TaskWriter``) writes ``--rows`` rows, handed over in 10,000-row
  Arrow batches as Spark hands them, into one staged file (rotation off: nothing rolls), and
  the driver's ``Committer`` commits them (not timed).
* **conversion**: ``convert_staged`` encodes the committed staged rows into the finished file,
  once per ``--row-group-mb`` (``parquet.rowGroupBytes``). It reads one staged stream at a
  time and buffers one row group, so its peak memory should be about two row groups however
  large the file: printed as ``peak / row group bytes``.
* **pyarrow**: ``pq.write_table`` of the same rows (already in memory) in one call, with the
  same codec, the same dictionary columns (``parquet_dictionary_columns``) and row groups of
  the same byte size. The finished file should be within 5% of its size; staging plus
  conversion is compared with its time.
* **sorted** (``--sorted``): the conversion with an Iceberg table's sort order
  (``commit_protocol/task/sorting.py``), which holds the whole file's rows, against the same
  conversion unsorted and against pyarrow sorting the rows and writing them in one call.
* **reading**: ``commit_protocol.reading.read_batches``, what each task of
  ``spark.read.format("rotsink")`` runs, over the committed staged rows and over each
  finished file (``read_throughput.py --staged`` measures the same through Spark).

Every measurement runs in a fresh Python process, so no step reuses memory an earlier one
freed and each starts from the same allocator state. Its peak memory is the process's
``VmHWM`` after the step minus its resident set just before (the mark reset through
``/proc/self/clear_refs``; Linux only), with the modules the step uses imported beforehand, as
a Spark worker has them. Prints rows/s, MB/s (Arrow bytes of the rows, or bytes read), peak
memory and the ratios, medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import own_memory_mb, reset_own_peak  # noqa: E402

# Spark hands a Python task its rows in Arrow batches of this many (maxRecordsPerBatch).
SPARK_BATCH_ROWS = 10_000
SCHEMA_JSON = '{"type":"struct","fields":[]}'  # the log's copy of Spark's schema: unread here
EPOCH_2026_US = 1_767_225_600_000_000
T = TypeVar("T")
# --sorted: an Iceberg table's sort order, by the hash-like key (the rows come in id order)
SORT_ORDER = (("key", "identity", True, False),)


def make_rows(n: int) -> pa.Table:
    """``n`` rows of a realistic event table, the same for every process that builds them."""
    ids = pa.array(range(n), pa.int64())
    key = pc.bit_wise_and(pc.multiply(ids, 2_654_435_761), (1 << 31) - 1)
    name = pc.binary_join_element_wise(
        "event-", pc.cast(pc.bit_wise_and(key, 1023), pa.string()), "")
    ts = pc.cast(pc.add(pc.multiply(ids, 1000), EPOCH_2026_US), pa.timestamp("us", tz="UTC"))
    score = pc.divide(pc.cast(ids, pa.float64()), 7.0)
    return pa.table({"id": ids, "key": key, "name": name, "ts": ts, "score": score})


def sink_config(spec: dict):
    """The sink's configuration for ``spec``: Parquet, rotation off (a file rolls only when
    this benchmark converts it)."""
    from commit_protocol.records.config import RotationPolicy, SinkConfig

    return SinkConfig(path=spec["out"], format="parquet", compression=spec["compression"],
                      file_suffix=".parquet",
                      row_group_bytes=spec.get("row_group_bytes", 128 << 20),
                      rotation=RotationPolicy(max_bytes=0, interval_ms=0, inactivity_ms=0),
                      sort_order=SORT_ORDER if spec.get("sorted") else (), sort_order_id=1)


def storage_for(spec: dict):
    from commit_protocol.storage import open_storage

    return open_storage(spec["out"], {})


def warm_up() -> dict:
    """Write and read back a few rows as Parquet and as IPC, so the measured step pays no
    one-off cost of a fresh process: pyarrow imports pandas on its first timestamp cast or
    Parquet write (about 0.2 s and 60-70 MB here), and loads codecs. A Spark worker pays
    that once, at its first task; its seconds and MB are returned to be shown apart."""
    import io

    import pyarrow.parquet as pq

    from commit_protocol.formats import ipc

    def round_trip() -> None:
        rows = make_rows(16)
        parquet = io.BytesIO()
        pq.write_table(rows, parquet, compression="snappy")
        pq.read_table(pa.BufferReader(parquet.getvalue()))
        ipc.decode(ipc.encode(rows), rows.schema)

    _, seconds, peak = measured(round_trip)
    return {"warm_up_seconds": seconds, "warm_up_mb": peak}


def measured(step: Callable[[], T]) -> tuple[T, float, float]:
    """``step()``'s result, its wall seconds and the peak resident memory it added in MB."""
    base = reset_own_peak()
    started = time.perf_counter()
    result = step()
    seconds = time.perf_counter() - started
    return result, seconds, own_memory_mb()["hwm"] - base


# -- the child processes: one measurement each, a JSON line on stdout ----------------------

def child_stage(spec: dict) -> dict:
    """One task stages every row into one file; then the driver commits it."""
    import commit_protocol.formats.ipc  # noqa: F401  loaded once per worker, as in Spark
    import commit_protocol.formats.parquet  # noqa: F401
    from commit_protocol.commit.committer import Committer
    from commit_protocol.records.plan import WritePlan
    from commit_protocol.task.task_writer import TaskWriter

    first = warm_up()
    batches = make_rows(spec["rows"]).to_batches(max_chunksize=SPARK_BATCH_ROWS)
    config, storage = sink_config(spec), storage_for(spec)
    committer = Committer(storage, config, SCHEMA_JSON)
    plan = WritePlan.from_state(committer.latest_state(), storage.root_uri)
    writer = TaskWriter(storage, config, plan, batch_id=0, partition=0, attempt=0,
                        query_id="bench")
    report, seconds, peak = measured(lambda: writer.write(batches))
    committer.commit(0, [report])
    (staged,) = report.files
    return {**first, "seconds": seconds, "peak_mb": peak, "temp": staged.temp,
            "end": staged.end, "name": staged.name, "records": staged.records}


def child_convert(spec: dict) -> dict:
    """``convert_staged`` of the committed staged rows, as a roll runs it."""
    import pyarrow.parquet as pq

    import commit_protocol.formats.parquet  # noqa: F401
    import commit_protocol.task.bulk_files  # noqa: F401
    from commit_protocol.task.conversion import convert_staged

    first = warm_up()
    config, storage = sink_config(spec), storage_for(spec)
    (temp, size, _), seconds, peak = measured(
        lambda: convert_staged(storage, spec["temp"], spec["end"], config, name=spec["name"]))
    groups = pq.ParquetFile(Path(spec["out"]) / temp).metadata.num_row_groups
    return {**first, "seconds": seconds, "peak_mb": peak, "temp": temp, "size": size,
            "row_groups": groups}


def child_direct(spec: dict) -> dict:
    """pyarrow writes the rows in one call, with the finished file's codec, dictionary
    columns and row group size (the converter's rule: row group bytes in Arrow bytes)."""
    import pyarrow.parquet as pq

    from commit_protocol.formats.parquet import parquet_dictionary_columns

    first = warm_up()
    config = sink_config(spec)
    table = make_rows(spec["rows"])
    if spec.get("sorted"):  # the floor of a sorted file: pyarrow sorts, then writes
        unsorted = table
        table, sort_s, _ = measured(lambda: unsorted.sort_by([("key", "ascending")]))
    dictionary = parquet_dictionary_columns(table)
    rows_per_group = max(1, config.row_group_bytes * table.num_rows // max(table.nbytes, 1))
    path = Path(spec["out"]) / f"direct-{config.row_group_bytes}.parquet"
    _, seconds, peak = measured(lambda: pq.write_table(
        table, path, compression=config.compression, compression_level=config.compression_level,
        use_dictionary=dictionary, row_group_size=rows_per_group))
    seconds += sort_s if spec.get("sorted") else 0.0
    return {**first, "seconds": seconds, "peak_mb": peak, "size": path.stat().st_size,
            "row_groups": pq.ParquetFile(path).metadata.num_row_groups}


def child_read(spec: dict) -> dict:
    """rotsink's reader over the committed staged rows, or over a finished file."""
    import commit_protocol.formats.ipc  # noqa: F401
    import commit_protocol.formats.parquet  # noqa: F401
    from commit_protocol.log import open_committed
    from commit_protocol.reading import CommittedFile, committed_files, read_batches

    first = warm_up()
    storage = storage_for(spec)
    committed = open_committed(storage)
    assert committed is not None, "nothing committed"
    log, latest, state = committed
    if spec["staged"]:
        files = [f for f in committed_files(log, latest, state, include_in_progress=True)
                 if f.staged]
    else:
        files = [CommittedFile(spec["path"], storage.size(spec["path"]), "", False)]
    schema = make_rows(0).schema

    def read() -> list[int]:
        return [batch.num_rows for f in files
                for batch in read_batches(storage, f, state=state, schema=schema)]

    sizes, seconds, peak = measured(read)
    return {**first, "seconds": seconds, "peak_mb": peak, "rows": sum(sizes),
            "batches": len(sizes), "largest_batch": max(sizes, default=0),
            "bytes": sum(f.length for f in files)}


CHILDREN = {"stage": child_stage, "convert": child_convert, "direct": child_direct,
            "read": child_read}


def child(kind: str, spec: dict) -> dict:
    """Run one measurement in a fresh interpreter; its JSON result."""
    done = subprocess.run([sys.executable, __file__, "--child", kind, "--spec", json.dumps(spec)],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the parent: repeats, medians, ratios ----------------------------------------------------

def measure(args, root: Path) -> dict[str, list[dict]]:
    """Every measurement, ``--repeats`` times, each repeat on a fresh output directory."""
    runs: dict[str, list[dict]] = {}
    for repeat in range(args.repeats):
        spec = {"out": str(root / f"run-{repeat}"), "rows": args.rows,
                "compression": args.compression}
        staged = child("stage", spec)
        runs.setdefault("stage", []).append(staged)
        runs.setdefault("read staged", []).append(child("read", {**spec, "staged": True}))
        for mb in args.row_group_mb:
            sized = {**spec, "row_group_bytes": mb << 20}
            converted = child("convert", {**sized, **{k: staged[k] for k in
                                                      ("temp", "end", "name")}})
            runs.setdefault(f"convert {mb}", []).append(converted)
            runs.setdefault(f"direct {mb}", []).append(child("direct", sized))
            runs.setdefault(f"read finished {mb}", []).append(
                child("read", {**spec, "staged": False, "path": converted["temp"]}))
            if args.sorted:
                ordered = {**sized, "sorted": True}
                runs.setdefault(f"convert sorted {mb}", []).append(child(
                    "convert", {**ordered, **{k: staged[k] for k in ("temp", "end", "name")}}))
                runs.setdefault(f"direct sorted {mb}", []).append(child("direct", ordered))
        shutil.rmtree(spec["out"], ignore_errors=True)
        print(f"  repeat {repeat + 1} of {args.repeats} done", flush=True)
    return runs


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def line(label: str, runs: list[dict], rows: int, mb: float, extra: str = "") -> None:
    seconds = med(runs, "seconds")
    print(f"  {label:<24} {seconds:6.3f} s {rows / seconds:>12,.0f} rows/s {mb / seconds:8.1f} MB/s"
          f"  peak +{med(runs, 'peak_mb'):6.1f} MB{extra}")


def report_writes(args, runs: dict[str, list[dict]], arrow_mb: float) -> None:
    stage = runs["stage"]
    every = [r for rs in runs.values() for r in rs]
    print(f"  not in the figures below: a fresh process's first Parquet and IPC round trip of "
          f"a few rows, {med(every, 'warm_up_seconds'):.2f} s, +{med(every, 'warm_up_mb'):.0f} "
          "MB (pyarrow imports pandas; a Spark worker pays it at its first task)")
    line("staging (TaskWriter)", stage, args.rows, arrow_mb,
         f"  staged {med(stage, 'end') / 1e6:.1f} MB")
    for mb in args.row_group_mb:
        report_row_groups(args, mb, stage, runs[f"convert {mb}"], runs[f"direct {mb}"], arrow_mb)
        if args.sorted:
            report_sorted(args, mb, runs, arrow_mb)


def report_sorted(args, mb: int, runs: dict[str, list[dict]], arrow_mb: float) -> None:
    """A table's sort order: the whole file sorted at the roll, against the same conversion
    unsorted and pyarrow sorting the rows and writing them."""
    converted, ordered = runs[f"convert {mb}"], runs[f"convert sorted {mb}"]
    direct = runs[f"direct sorted {mb}"]
    print(f"  sorted by key (a table's sort order), row groups of {mb} MiB:")
    for label, rs in (("conversion, sorted", ordered), ("pyarrow sort + write", direct)):
        line(label, rs, args.rows, arrow_mb, f"; {med(rs, 'size') / 1e6:.2f} MB")
    seconds = med(ordered, "seconds")
    peak = med(ordered, "peak_mb")
    print(f"  sorted/unsorted conversion: time {seconds / med(converted, 'seconds'):.2f}x, "
          f"peak {peak / med(converted, 'peak_mb'):.2f}x ({peak / arrow_mb:.2f}x the "
          f"file's Arrow MB); sorted conversion / pyarrow floor "
          f"{seconds / med(direct, 'seconds'):.2f}x")


def report_row_groups(args, mb: int, stage: list[dict], converted: list[dict],
                      direct: list[dict], arrow_mb: float) -> None:
    """Conversion against pyarrow at row groups of ``mb`` MiB: memory, size, time."""
    group_mb = mb  # peaks are in MiB (VmHWM kB / 1024), as row group bytes here
    print(f"row groups of {mb} MiB (parquet.rowGroupBytes={mb << 20}):")
    for label, runs in (("conversion", converted), ("pyarrow write_table", direct)):
        line(label, runs, args.rows, arrow_mb,
             f" = {med(runs, 'peak_mb') / group_mb:.2f}x row group bytes; "
             f"{med(runs, 'size') / 1e6:.2f} MB, {med(runs, 'row_groups'):.0f} row groups")
    total = statistics.median(s["seconds"] + c["seconds"]
                              for s, c in zip(stage, converted, strict=True))
    pyarrow_s = med(direct, "seconds")
    print(f"  peak / row group bytes: {med(converted, 'peak_mb') / group_mb:.2f} "
          "(target about 2)")
    print(f"  file size rotsink/pyarrow: {med(converted, 'size') / med(direct, 'size'):.3f}x "
          "(target <= 1.05x)")
    print(f"  time staging + conversion {total:.3f} s / pyarrow {pyarrow_s:.3f} s: "
          f"{total / pyarrow_s:.2f}x; conversion alone "
          f"{med(converted, 'seconds') / pyarrow_s:.2f}x")


def read_extra(runs: list[dict]) -> str:
    """The bytes read and the batches handed on (a Spark task converts each to rows)."""
    return (f"  ({med(runs, 'bytes') / 1e6:.1f} MB; {med(runs, 'batches'):.0f} batches of "
            f"up to {med(runs, 'largest_batch'):,.0f} rows)")


def report_reads(args, runs: dict[str, list[dict]]) -> None:
    print("reading (commit_protocol.reading.read_batches, no Spark; MB/s of the bytes read):")
    staged = runs["read staged"]
    line("staged rows", staged, args.rows, med(staged, "bytes") / 1e6, read_extra(staged))
    for mb in args.row_group_mb:
        finished = runs[f"read finished {mb}"]
        line(f"finished, {mb} MiB groups", finished, args.rows, med(finished, "bytes") / 1e6,
             read_extra(finished))
        print(f"  {'':<24} staged/finished read throughput: "
              f"{med(finished, 'seconds') / med(staged, 'seconds'):.2f}x (target >= 1.0x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--row-group-mb", default="8,64",
                        help="parquet.rowGroupBytes in MiB, comma-separated")
    parser.add_argument("--compression", default="snappy",
                        help="the Parquet codec (the sink's default: snappy)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sorted", action="store_true",
                        help="also convert with a table's sort order (by the hash-like key)")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](json.loads(args.spec))))
        return
    args.row_group_mb = [int(mb) for mb in args.row_group_mb.split(",") if mb]
    arrow_mb = make_rows(args.rows).nbytes / 1e6
    print(f"{args.rows:,} rows (id long, key long, name string, ts timestamp, score double), "
          f"{arrow_mb:.1f} MB of Arrow; Parquet {args.compression}; each measurement in a fresh "
          f"process, medians of {args.repeats}")
    root = Path(tempfile.mkdtemp(prefix="rotsink-conversion-"))
    try:
        runs = measure(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report_writes(args, runs, arrow_mb)
    report_reads(args, runs)


if __name__ == "__main__":
    main()
