"""Write throughput: rotsink against Spark's built-in file sink, same input, same session.

    python benchmarks/throughput.py                      # the whole matrix, warm and cold
    python benchmarks/throughput.py --rows 2000000 --formats parquet --variants plain --no-cold
    python benchmarks/throughput.py --formats orc --variants plain,compressed --no-cold

Input: a pre-generated Parquet file source (4 columns: long, string, double, string), read
by both sides as a stream of ``--batches`` micro-batches (``availableNow``). The default,
6,000,000 rows, gives each side several seconds per query, which this noisy 2-core machine
needs for medians that hold from run to run.

Each cell of the matrix is a format (``parquet``, ``jsonl``, ``csv``, ``orc``; by default
those the sink offers) and a variant: ``plain`` (bulk formats: snappy, Parquet's default on
both sides; row formats: uncompressed), ``compressed`` (bulk formats: zstd, ORC's default on
both sides; row formats: gzip), ``encrypted`` (rotsink with ``encryption.key``, same codec as
plain; the built-in sink has no encryption, so its anchor is its plain run; rotsink refuses
it for ORC, and the cell says so). Both sides get the codec as an option. JSON lines is
written by the built-in ``json`` sink, ORC by the built-in ``orc`` one. A third side, the
*floor* (``benchmarks/floors.py``: a Python Arrow stream writer that only counts rows), is
what Spark's Python Data Source API costs before any sink writes a byte.

A bulk format stages its in-progress rows (Arrow IPC) and encodes the finished file when the
file rolls. With the default rotation the files of a 2-batch run never roll (size, age and
inactivity are far off), so rotsink would only stage; the rotsink side of a bulk cell
therefore runs with ``rotation.maxBatches`` equal to ``--batches``: every slot rolls in the
last batch's task, which encodes its file, so the run ends with the files finished, as the
built-in sink's are (``--bulk-rotation default`` measures staging alone). Each cell prints
the rotation it used and the bytes of finished files and of files still in progress.

Spark's per-row size check on the Arrow path into Python sinks
(``datasource/writing/arrow_transfer.py``): every warm cell runs twice, once with
``spark.sql.execution.arrow.maxBytesPerBatch`` at Spark's default (the check on, as a
session that sets nothing runs a Python sink other than rotsink) and once at 2147483647 (off,
as rotsink's queries run), the floor and rotsink alike; the built-in sink moves no Arrow
(``--arrow-size-check on|off`` runs one of them). The setting is set in the session before
each query, which copies it at its start.

Warm: one session; a warm-up query per side and cell, then ``--repeats`` measured queries
in alternation; the medians are compared. Cold (``plain`` cells): each side's first query
in a fresh session, in its own subprocess (fresh JVM and Python workers), ``--cold-repeats``
times each, and rotsink once more with ``ROTSINK_KEEP_PYSPARK_ZIP=1`` (Spark's workers then
compile PySpark from ``pyspark.zip`` in every daemon: ``datasource/spark/worker_path.py``).

Prints wall time, rows/s, MB/s (input bytes), peak resident memory and CPU seconds of the
JVM and of the Python workers during the measured queries, and rotsink's wall time over the
built-in sink's (lower is better; the targets are <= 1.0x warm and <= 1.5x cold) and over
the floor's (target for warm Parquet in 2 batches: <= 1.15x). Both cores are busy
throughout, so wall time follows total CPU time: the CPU line shows what the floor's JVM side
alone costs against the whole built-in sink, and the CPU ratios, which other work on the
machine disturbs less than wall time.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import floors  # noqa: E402
from common import cpu_seconds, cpu_used, peak_memory_mb, quiet_session, reset_peak_memory  # noqa: E402

from datasource.writing.arrow_transfer import KEY as SIZE_CHECK_KEY  # noqa: E402
from datasource.writing.arrow_transfer import UNCHECKED  # noqa: E402

FORMATS = ("parquet", "jsonl", "csv", "orc", "avro")
BULK_FORMATS = ("parquet", "orc")  # staged while in progress, encoded at the roll
VARIANTS = ("plain", "compressed", "encrypted")
KEY_ENV = "ROTSINK_BENCH_KEY"
SIDES = ("builtin", "floor", "rotsink")


def make_source(directory: Path, rows: int, files: int) -> int:
    """``files`` Parquet files holding ``rows`` rows in all; returns their size in bytes."""
    directory.mkdir(parents=True)
    per_file = rows // files
    for f in range(files):
        ids = pa.array(range(f * per_file, (f + 1) * per_file), pa.int64())
        table = pa.table({"id": ids, "name": pc.cast(ids, pa.string()),
                          "score": pc.divide(pc.cast(ids, pa.float64()), 7.0),
                          "grp": pc.cast(pc.bit_wise_and(ids, 7), pa.string())})
        pq.write_table(table, directory / f"src-{f:03d}.parquet")
    return sum(p.stat().st_size for p in directory.iterdir())


def offered_formats() -> list[str]:
    """The formats of the matrix that this rotsink offers: the default ``--formats``."""
    from commit_protocol.formats import OUTPUT_FORMATS

    return [fmt for fmt in FORMATS if fmt in OUTPUT_FORMATS]


def codec(fmt: str, variant: str) -> str:
    """The ``compression`` of a cell: a format's default when plain (Parquet, ORC and Avro
    compress inside: snappy, as Spark's sinks), zstd or gzip when compressed."""
    inner = fmt in BULK_FORMATS or fmt == "avro"
    if variant == "compressed":
        return "zstd" if inner else "gzip"
    return "snappy" if inner else "none"


def builtin_codec(fmt: str, variant: str) -> str:
    """:func:`codec` as Spark's sink of ``fmt`` names it."""
    name = codec(fmt, variant)
    return "zstandard" if fmt == "avro" and name == "zstd" else name


def avro_jars(formats: list[str]) -> tuple[Path, ...]:
    """Spark's Avro sink for the built-in side of Avro cells (spark-avro, fetched from Maven
    Central as the tests fetch it)."""
    if "avro" not in formats:
        return ()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.jvm import spark_packages

    return tuple(j for j in spark_packages().jars if "avro" in j.name)


def rotsink_rotation(fmt: str, bulk_rotation: str, batches: int) -> dict[str, str]:
    """Rotation options of rotsink's side: for a bulk format, files that roll (and so are
    encoded) in the last batch's task, unless ``--bulk-rotation default`` (see the module
    docstring)."""
    if fmt in BULK_FORMATS and bulk_rotation == "batches":
        return {"rotation.maxBatches": str(batches)}
    return {}


def output_bytes(out: Path) -> tuple[int, int]:
    """Bytes of the finished data files of ``out`` (what Spark's readers see; not Hadoop's
    ``.crc``) and, for rotsink, of its committed in-progress files (a bulk format's staged
    rows)."""
    finished = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()
                   and not p.name.endswith(".crc")
                   and not any(part.startswith((".", "_")) for part in p.relative_to(out).parts))
    from commit_protocol.log import open_committed
    from commit_protocol.storage import LocalStorage

    committed = open_committed(LocalStorage(str(out))) if (out / "_rotsink").exists() else None
    in_progress = sum(f.size for f in committed[2].in_progress) if committed else 0
    return finished, in_progress


def run(spark, source: Path, out: Path, fmt: str, variant: str, sink: str,
        batches: int, rotation: dict[str, str]) -> dict:
    """One availableNow query; its wall time and the peak memory while it ran. ``rotation``:
    rotsink's rotation options."""
    shutil.rmtree(out, ignore_errors=True)
    checkpoint = f"{out}-ck"
    schema = spark.read.parquet(str(source)).schema
    files = len(list(source.iterdir()))
    df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", max(1, files // batches))
          .parquet(str(source)))
    writer = df.writeStream.option("checkpointLocation", checkpoint)
    if sink == "rotsink":
        writer = (writer.format("rotsink").option("format", fmt)
                  .option("compression", codec(fmt, variant)).options(**rotation))
        if variant == "encrypted":
            writer = writer.option("encryption.key", f"env:{KEY_ENV}")
    elif sink == "floor":
        writer = writer.format("floor")
    else:
        plain = "plain" if variant == "encrypted" else variant
        writer = (writer.format("json" if fmt == "jsonl" else fmt)
                  .option("compression", builtin_codec(fmt, plain)))
        if fmt == "csv":
            writer = writer.option("header", "true")
    reset_peak_memory(spark)
    cpu_before = cpu_seconds(spark)
    started = time.perf_counter()
    writer.trigger(availableNow=True).start(str(out)).awaitTermination()
    wall = time.perf_counter() - started
    cpu = cpu_used(cpu_before, cpu_seconds(spark))
    memory = peak_memory_mb(spark)
    finished, in_progress = output_bytes(out)
    shutil.rmtree(checkpoint, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return {"wall": wall, "jvm_mb": memory["jvm"], "workers_mb": memory["workers"],
            "jvm_cpu": cpu["jvm"], "workers_cpu": cpu["workers"], "finished": finished,
            "in_progress": in_progress}


def summary(runs: list[dict]) -> dict:
    return {"wall": statistics.median(r["wall"] for r in runs),
            "wall_min": min(r["wall"] for r in runs), "wall_max": max(r["wall"] for r in runs),
            "jvm_cpu": statistics.median(r["jvm_cpu"] for r in runs),
            "workers_cpu": statistics.median(r["workers_cpu"] for r in runs),
            "jvm_mb": max(r["jvm_mb"] for r in runs),
            "workers_mb": max(r["workers_mb"] for r in runs), "finished": runs[-1]["finished"],
            "in_progress": runs[-1]["in_progress"]}


def show(label: str, r: dict, rows: int, input_bytes: int) -> None:
    spread = f" ({r['wall_min']:.2f}-{r['wall_max']:.2f})" if "wall_min" in r else ""
    print(f"  {label:<22} {r['wall']:6.2f} s{spread} {rows / r['wall']:>11,.0f} rows/s "
          f"{input_bytes / 1e6 / r['wall']:7.1f} MB/s  peak RSS jvm {r['jvm_mb']:,.0f} MB, "
          f"python workers {r['workers_mb']:,.0f} MB", flush=True)
    print(f"  {'':<22} written: {r['finished'] / 1e6:,.1f} MB of finished files, "
          f"{r['in_progress'] / 1e6:,.1f} MB in progress", flush=True)
    print(f"  {'':<22} CPU {r['jvm_cpu'] + r['workers_cpu']:5.2f} s: JVM {r['jvm_cpu']:.2f} s, "
          f"Python workers {r['workers_cpu']:.2f} s", flush=True)


def show_ratios(result: dict[str, dict]) -> tuple[float, float]:
    """Print the ratios; return rotsink/built-in and rotsink/floor wall time."""
    wall = {side: r["wall"] for side, r in result.items()}
    print(f"  ratio rotsink/built-in wall time: {wall['rotsink'] / wall['builtin']:.2f}x  "
          f"(floor/built-in {wall['floor'] / wall['builtin']:.2f}x: the Python API alone; "
          f"rotsink/floor {wall['rotsink'] / wall['floor']:.2f}x)", flush=True)
    # Both cores are busy in every run, so wall time follows CPU time: when the floor's JVM
    # alone burns as much CPU as the whole built-in sink, no Python sink can be faster.
    builtin = result["builtin"]["jvm_cpu"] + result["builtin"]["workers_cpu"]
    cpu = {side: r["jvm_cpu"] + r["workers_cpu"] for side, r in result.items()}
    print(f"  CPU: floor's JVM alone {result['floor']['jvm_cpu'] / builtin:.2f}x the built-in "
          f"sink's whole CPU; rotsink's Python workers use "
          f"{result['rotsink']['workers_cpu'] - result['floor']['workers_cpu']:+.2f} s over "
          f"the floor's; total CPU rotsink/built-in {cpu['rotsink'] / builtin:.2f}x, "
          f"rotsink/floor {cpu['rotsink'] / cpu['floor']:.2f}x (steadier than wall time when "
          "other work shares the cores)", flush=True)
    return wall["rotsink"] / wall["builtin"], wall["rotsink"] / wall["floor"]


def rotation_label(rotation: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in rotation.items()) or "default"


def size_check_value(spark, check: str) -> str:
    """``spark.sql.execution.arrow.maxBytesPerBatch`` for ``--arrow-size-check`` ``on``
    (Spark's default: 64MB from 4.1, 256MB on 4.0) or ``off`` (2147483647)."""
    if check == "off":
        return UNCHECKED
    return spark._jvm.org.apache.spark.sql.internal.SQLConf \
        .ARROW_EXECUTION_MAX_BYTES_PER_BATCH().defaultValueString()


def warm_cell(spark, root: Path, args, fmt: str, variant: str, input_bytes: int,
              check: str) -> tuple[float, float]:
    value = size_check_value(spark, check)
    spark.conf.set(SIZE_CHECK_KEY, value)  # each query copies the session's settings
    times: dict[str, list[dict]] = {side: [] for side in SIDES}
    rotation = rotsink_rotation(fmt, args.bulk_rotation, args.batches)
    for side in SIDES:  # warm-up
        run(spark, root / "src", root / f"out-{side}", fmt, variant, side, args.batches,
            rotation)
    for _ in range(args.repeats):
        for side in SIDES:
            times[side].append(run(spark, root / "src", root / f"out-{side}", fmt, variant,
                                   side, args.batches, rotation))
    result = {side: summary(runs) for side, runs in times.items()}
    RESULTS[f"{fmt} {variant} warm, size check {check}"] = result
    anchor = "built-in" + (" (plain)" if variant == "encrypted" else "")
    encrypted = ", encrypted" if variant == "encrypted" else ""
    print(f"{fmt} {variant} ({codec(fmt, variant)}{encrypted}), warm, median of {args.repeats}; "
          f"Arrow size check {check} ({SIZE_CHECK_KEY}={value}); "
          f"rotsink's rotation: {rotation_label(rotation)}:")
    show(anchor, result["builtin"], args.rows, input_bytes)
    show("floor (count rows)", result["floor"], args.rows, input_bytes)
    show("rotsink", result["rotsink"], args.rows, input_bytes)
    return show_ratios(result)


# Every warm cell's medians by side, for --json (benchmarks/tuning.py reads them).
RESULTS: dict[str, dict] = {}


# Cold only: rotsink with Spark's Python workers compiling PySpark from pyspark.zip, as they
# do without rotsink's worker path fix (datasource/spark/worker_path.py).
ZIP_SIDE = "rotsink, pyspark.zip"


def cold_run(root: Path, args, fmt: str, side: str) -> dict:
    """A fresh JVM and session in a subprocess, one query; its JSON result."""
    started = time.perf_counter()
    env = dict(os.environ)
    if side == ZIP_SIDE:
        from datasource.spark.worker_path import KEEP_ZIP_ENV

        side, env[KEEP_ZIP_ENV] = "rotsink", "1"
    done = subprocess.run(
        [sys.executable, __file__, "--cold-side", side, "--formats", fmt, "--root", str(root),
         "--batches", str(args.batches), "--bulk-rotation", args.bulk_rotation,
         *(f"--conf={c}" for c in args.conf)],
        capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"cold {side} {fmt} run failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - started
    return result


def cold_cell(root: Path, args, fmt: str, input_bytes: int) -> tuple[float, float]:
    runs: dict[str, list[dict]] = {side: [] for side in (*SIDES, ZIP_SIDE)}
    for _ in range(args.cold_repeats):
        for side in runs:
            runs[side].append(cold_run(root, args, fmt, side))
    rotation = rotsink_rotation(fmt, args.bulk_rotation, args.batches)
    print(f"{fmt} plain, cold (first query of a fresh session), median of {args.cold_repeats}; "
          f"rotsink's rotation: {rotation_label(rotation)}:")
    for side, rs in runs.items():
        show(side, summary(rs), args.rows, input_bytes)
        print(f"  {'':<22} session start {statistics.median(r['session'] for r in rs):.1f} s, "
              f"whole process {statistics.median(r['process'] for r in rs):.1f} s")
    zip_wall = summary(runs.pop(ZIP_SIDE))["wall"]
    builtin_wall = summary(runs["builtin"])["wall"]
    print(f"  without the worker path fix (workers compile pyspark.zip): rotsink/built-in "
          f"{zip_wall / builtin_wall:.2f}x", flush=True)
    return show_ratios({side: summary(rs) for side, rs in runs.items()})


def attempt(cell: str, measure) -> tuple[float, float] | None:
    """``measure()``'s ratios, or None after printing why the cell failed: a format or
    variant the sink does not offer (ORC before it is added, or without encryption) fails
    its own cell, not the matrix."""
    try:
        return measure()
    except Exception as e:  # noqa: BLE001  a failed query surfaces as many exception types
        lines = str(e).strip().splitlines() or [type(e).__name__]
        # a worker's error arrives as a Python traceback inside Spark's message: its last
        # "...Error: message" line says why
        why = next((line for line in reversed(lines) if "Error: " in line), lines[0])
        print(f"{cell}: FAILED ({type(e).__name__}: {why.strip()[:400]})", flush=True)
        return None


def show_summary(ratios: dict[str, tuple[float, float] | None]) -> None:
    print("summary, wall time rotsink/built-in and rotsink/floor (targets, issue 44, with the "
          "size check off: Parquet and JSON lines <= 0.9x built-in and <= 1.10x floor on 16 "
          "cores):")
    for cell, value in ratios.items():
        print(f"  {cell:<36} " + ("failed" if value is None else
                                  f"{value[0]:.2f}x built-in, {value[1]:.2f}x floor"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=6_000_000)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--formats", default=",".join(offered_formats()),
                        help=f"of {', '.join(FORMATS)}; default: those the sink offers")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cold-repeats", type=int, default=2)
    parser.add_argument("--no-cold", action="store_true", help="skip the cold subprocesses")
    parser.add_argument("--bulk-rotation", choices=("batches", "default"), default="batches",
                        help="rotsink's rotation for bulk formats: rotation.maxBatches=--batches "
                             "(files encoded within the run) or the default (rows stay staged)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for every session of the run (README, Tuning), "
                             "e.g. --conf spark.driver.memory=4g; repeatable")
    parser.add_argument("--arrow-size-check", choices=("both", "on", "off"), default="both",
                        help=f"{SIZE_CHECK_KEY} at Spark's default (on) or {UNCHECKED} (off) "
                             "for the warm cells' floor and rotsink queries; default both")
    parser.add_argument("--json", metavar="FILE", help="also write the warm cells' medians "
                                                         "and spreads by side to FILE")
    parser.add_argument("--cold-side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"--formats: unknown {', '.join(unknown)}; expected of {', '.join(FORMATS)}")
    bad = [c for c in args.conf if "=" not in c]
    if bad:
        parser.error(f"--conf {bad[0]!r}: expected KEY=VALUE")
    conf = dict(c.split("=", 1) for c in args.conf)
    if args.cold_side:  # the subprocess of cold_run()
        started = time.perf_counter()
        spark = quiet_session("rotsink-throughput-cold", conf, extra_jars=avro_jars(formats))
        floors.register(spark)
        session = time.perf_counter() - started
        root = Path(args.root)
        result = run(spark, root / "src", root / f"cold-{args.cold_side}", formats[0], "plain",
                     args.cold_side, args.batches,
                     rotsink_rotation(formats[0], args.bulk_rotation, args.batches))
        spark.stop()
        print(json.dumps({**result, "session": session}))
        return

    os.environ[KEY_ENV] = base64.b64encode(os.urandom(32)).decode()
    root = Path(tempfile.mkdtemp(prefix="rotsink-bench-"))
    input_bytes = make_source(root / "src", args.rows, files=2 * args.batches)
    print(f"{args.rows:,} rows in {args.batches} micro-batches, {input_bytes / 1e6:.1f} MB of "
          f"Parquet input")
    ratios: dict[str, tuple[float, float] | None] = {}
    spark = quiet_session("rotsink-throughput", conf, extra_jars=avro_jars(formats))
    floors.register(spark)
    checks = ("on", "off") if args.arrow_size_check == "both" else (args.arrow_size_check,)
    for fmt in formats:
        for variant in variants:
            for check in checks:
                cell = f"{fmt} {variant} warm, check {check}"
                ratios[cell] = attempt(cell, lambda f=fmt, v=variant, c=check: warm_cell(
                    spark, root, args, f, v, input_bytes, c))
    spark.stop()
    if not args.no_cold:
        for fmt in formats:
            cell = f"{fmt} plain cold"
            ratios[cell] = attempt(cell, lambda f=fmt: cold_cell(root, args, f, input_bytes))
    show_summary(ratios)
    if args.json:
        Path(args.json).write_text(json.dumps(RESULTS, indent=1))
    shutil.rmtree(root, ignore_errors=True)

if __name__ == "__main__":
    main()
