"""The log's cost per micro-batch with many files in progress: driver time and log bytes.

    python benchmarks/open_files.py                        # 1,000, 20,000, 100,000 files
    python benchmarks/open_files.py --files 20000 --baseline /path/to/older/checkout

Drives rotsink's real driver path without Spark, on a local directory (``commit.fsync`` on):
``files / 100`` tasks, each holding 100 files in progress (one per partition directory), and
per micro-batch every task appends to 1% of its files (one) and reports. As on a Spark driver,
planning and commits run in two processes of their own, each with the state it last read or
committed kept (two caches here, swapped in turn); the clock advances 1 s per batch and no
time rule rolls anything (1 h), so the files stay in progress.

Prints per size: the median planning and commit ms of the non-compaction batches, the log
bytes each writes (target at 20,000: commit under 250 ms, under 100 kB), the compaction
batches' ms and bytes, a cold read (a new process: the snapshot and the heads after it), log
MB/s and the process's peak RSS. ``--baseline`` runs the same loop on another checkout (an
older release: every log file carried the whole state) in a subprocess and prints the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = (1_000, 20_000, 100_000)
SLOTS_PER_TASK = 100
SCHEMA_JSON = ('{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,'
               '"metadata":{}}]}')
QUERY_ID = "open-files-bench"
HOUR = 3_600_000


def drive(root: Path, files: int, batches: int) -> dict[str, Any]:
    """Commit ``batches`` micro-batches after a first one that opens ``files`` files."""
    import commit_protocol.log as log_module
    from commit_protocol.commit.committer import Committer
    from commit_protocol.log.files import is_compaction_batch, log_file_name
    from commit_protocol.records.config import RotationPolicy, SinkConfig
    from commit_protocol.records.messages import TaskReport
    from commit_protocol.storage import LocalStorage
    from commit_protocol.vocabulary.naming import INPROGRESS_DIR, LOG_DIR, final_name, temp_name

    config = SinkConfig(path=str(root), rotation=RotationPolicy(interval_ms=HOUR,
                                                                inactivity_ms=HOUR))
    storage = LocalStorage(str(root))
    (root / INPROGRESS_DIR).mkdir(parents=True)
    tasks = max(1, files // SLOTS_PER_TASK)
    slots = {(t, f"d={s}"): [temp_name(final_name(directory=f"d={s}", prefix="part",
                                                  partition=t, batch=0, roll=0,
                                                  suffix=".jsonl")), 0, 0]
             for t in range(tasks) for s in range(SLOTS_PER_TASK)}
    line = b'{"id":1}\n'
    caches = {"plan": _new_cache(log_module), "commit": _new_cache(log_module)}
    result: dict[str, Any] = {"plan_ms": [], "commit_ms": [], "log_bytes": [],
                              "compaction_ms": [], "compaction_bytes": []}
    for batch in range(batches + 1):
        reports: list[TaskReport | None] = []
        for task in range(tasks):
            touched = list(range(SLOTS_PER_TASK)) if batch == 0 else \
                [batch % SLOTS_PER_TASK]  # 1% of the task's files
            reports.append(TaskReport(batch_id=batch, partition=task, attempt=0,
                                      query_id=QUERY_ID, claimed=True,
                                      files=tuple(_append(root, slots, task, s, line, batch)
                                                  for s in touched)))
        _use(log_module, caches["plan"])
        started = time.perf_counter()
        Committer(storage, config, SCHEMA_JSON).latest_state()  # streamWriter(): the plan
        planned = time.perf_counter()
        _use(log_module, caches["commit"])
        committer = Committer(storage, config, SCHEMA_JSON)
        committer.commit(batch, reports, now_ms=1_000_000 + batch * 1000)
        ended = time.perf_counter()
        size = (root / LOG_DIR / log_file_name(batch, config.compact_interval)).stat().st_size
        if batch == 0:
            continue  # opening every file: a one-off
        if is_compaction_batch(batch, config.compact_interval):
            result["compaction_ms"].append((ended - planned) * 1000)
            result["compaction_bytes"].append(size)
        else:
            result["plan_ms"].append((planned - started) * 1000)
            result["commit_ms"].append((ended - planned) * 1000)
            result["log_bytes"].append(size)
    _use(log_module, _new_cache(log_module))  # a new process
    started = time.perf_counter()
    Committer(storage, config, SCHEMA_JSON).latest_state()
    result["cold_ms"] = (time.perf_counter() - started) * 1000
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _append(root: Path, slots: dict, task: int, slot: int, line: bytes, batch: int) -> Any:
    from commit_protocol.records.messages import FileReport

    directory = f"d={slot}"
    temp, size, records = slots[(task, directory)]
    with open(root / temp, "ab") as f:
        f.write(line)
    slots[(task, directory)] = [temp, size + len(line), records + 1]
    name = temp.rsplit("/", 1)[-1][1:].rsplit(".", 2)[0]
    return FileReport(partition=task, directory=directory, name=f"{directory}/{name}",
                      temp=temp, start=size, end=size + len(line), records=records + 1,
                      new_records=1, closed=False)


def _new_cache(log_module: Any) -> Any:
    """A process's cache of states (None on a release without one)."""
    cache_type = getattr(log_module, "_StateCache", None)
    return cache_type() if cache_type is not None else None


def _use(log_module: Any, cache: Any) -> None:
    if cache is not None:
        log_module.STATES = cache


def summary(result: dict[str, Any]) -> dict[str, float]:
    return {"plan_ms": statistics.median(result["plan_ms"]),
            "commit_ms": statistics.median(result["commit_ms"]),
            "log_kb": statistics.median(result["log_bytes"]) / 1000,
            "compaction_ms": statistics.median(result["compaction_ms"]),
            "compaction_kb": statistics.median(result["compaction_bytes"]) / 1000,
            "cold_ms": result["cold_ms"], "peak_rss_mb": result["peak_rss_mb"],
            "log_mb_per_s": statistics.median(result["log_bytes"]) / 1e6
            / (statistics.median(result["commit_ms"]) / 1000)}


def measure(files: int, batches: int, checkout: str | None) -> dict[str, float]:
    """One size, in a subprocess of its own (peak RSS per size; ``checkout`` first on
    ``sys.path`` to run another release's code)."""
    env = dict(os.environ)
    if checkout:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, __file__, "--one", str(files), "--batches",
                          str(batches)], env=env, capture_output=True, text=True, check=True,
                         cwd=checkout or None)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--batches", type=int, default=25, help="after the first (default 25:"
                        " two compactions)")
    parser.add_argument("--baseline", help="a checkout of another release to compare with")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        root = Path(tempfile.mkdtemp(prefix="rotsink-open-files-"))
        try:
            print(json.dumps(summary(drive(root / "out", args.one, args.batches))))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return 0
    print(f"{'files':>8} {'plan ms':>8} {'commit ms':>10} {'log kB':>8} {'log MB/s':>9} "
          f"{'compact ms':>11} {'compact kB':>11} {'cold ms':>8} {'peak MB':>8}")
    for files in args.files:
        now = measure(files, args.batches, None)
        print(f"{files:>8,} {now['plan_ms']:>8.1f} {now['commit_ms']:>10.1f} "
              f"{now['log_kb']:>8.1f} {now['log_mb_per_s']:>9.1f} {now['compaction_ms']:>11.0f} "
              f"{now['compaction_kb']:>11.0f} {now['cold_ms']:>8.0f} {now['peak_rss_mb']:>8.0f}")
        if args.baseline:
            old = measure(files, args.batches, args.baseline)
            print(f"{'baseline':>8} {old['plan_ms']:>8.1f} {old['commit_ms']:>10.1f} "
                  f"{old['log_kb']:>8.1f} {old['log_mb_per_s']:>9.1f} "
                  f"{old['compaction_ms']:>11.0f} {old['compaction_kb']:>11.0f} "
                  f"{old['cold_ms']:>8.0f} {old['peak_rss_mb']:>8.0f}")
            print(f"{'ratio':>8} {now['plan_ms'] / old['plan_ms']:>8.2f} "
                  f"{now['commit_ms'] / old['commit_ms']:>10.2f} "
                  f"{now['log_kb'] / old['log_kb']:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
