"""What a table that follows the log (``table.format``) adds to a micro-batch's commit, on a
local disk and on S3, without Spark (the commit is the same code Spark's commit worker runs).

    python benchmarks/table_commits.py --table delta --batches 40 --latency-ms 0,20 --repeats 3
    python benchmarks/table_commits.py --table iceberg --batches 40 --latency-ms 0,20 --repeats 3
    python benchmarks/table_commits.py --table iceberg --catalog glue,iceberg-rest,postgres

``--catalog`` (Iceberg) puts the table in another catalog, each a server on 127.0.0.1 behind
the recording proxy: ``glue`` (moto's Glue, the output in its S3, both through the proxy) or
``iceberg-rest`` (Apache Iceberg's own REST catalog server, the output on the local disk, the
catalog's requests through the proxy), ``postgres`` (pyiceberg's SQL catalog on a PostgreSQL
server) or ``hive`` (Hive's standalone metastore), the output local (SQL and Thrift are not
HTTP: no proxy counts or delays them, 0 ms only); the anchor writes the same output without
the table.

A driver process commits ``--batches`` micro-batches of 4,000 rows into four ``day``
directories (Parquet, ``rotation.maxBatches=2``: every other batch finalizes four files),
once with the table and once without (the anchor), to a local directory (Iceberg: its
embedded SQLite catalog) and to SeaweedFS on 127.0.0.1 (Iceberg: its REST catalog, the table
in its table bucket, the files in another bucket) through the recording proxies of
``tests/support/faulty_proxy.py`` (one for S3, one for the catalog), which delay every request by
``--latency-ms`` (AWS S3 answers in 10-30 ms). It times each commit
and, inside it, the table step (the high-water mark read, the footers of the new files, the
delta-rs commit); the requests sent during the table step are counted, with the *sequential*
ones (the longest chain of requests that ran one after another: the round trips the commit
waits for). Printed per storage and latency, medians over the rolling batches of
``--repeats`` runs: the table step's milliseconds and requests, the commit's time with and
without the table (their ratio), rows/s and MB/s of the whole run, and the driver's peak
memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers

ROWS = 4_000
DAYS = ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04")
SCHEMA_JSON = json.dumps({"type": "struct", "fields": [
    {"name": n, "type": t, "nullable": True, "metadata": {}}
    for n, t in (("id", "long"), ("name", "string"), ("score", "double"), ("day", "string"))]})


# -- the driver process ------------------------------------------------------------------------
def drive(url: str, endpoint: str, batches: int, table: str) -> None:
    """Commit ``batches`` batches (``table``: ``plain``, ``delta`` or ``iceberg``, whose
    catalog options come as JSON in ``TABLE_OPTIONS``; ``delta:shared``, ``iceberg:shared``:
    another writer appends to the table before every commit after the first two, which the
    commit then follows); print one JSON line per batch."""
    import pyarrow as pa

    from commit_protocol.commit.committer import Committer
    from commit_protocol.records.config import RotationPolicy, SinkConfig
    from commit_protocol.records.plan import WritePlan
    from commit_protocol.storage import open_storage
    from commit_protocol.tables.follow import TableFollower
    from commit_protocol.task.task_writer import TaskWriter

    timings: dict[str, float] = {}
    follow = TableFollower.follow

    def timed(self: TableFollower, state: Any, *, now_ms: int,
              footers: dict[str, bytes] | None = None) -> list[int]:
        """The table step, timed from inside the commit."""
        timings["start"] = time.time()
        done = follow(self, state, now_ms=now_ms, footers=footers)
        timings["end"] = time.time()
        return done

    TableFollower.follow = timed  # type: ignore[method-assign]
    table, _, shared = table.partition(":")
    cfg = SinkConfig(path=url, format="parquet", compression="snappy", file_suffix=".parquet",
                     partition_by=("day",),
                     table_format=None if table == "plain" else table,
                     table_options=json.loads(os.environ.get("TABLE_OPTIONS", "{}")),
                     fs_options={"endpoint_url": endpoint} if endpoint else {},
                     rotation=RotationPolicy(max_batches=2, interval_ms=0, inactivity_ms=0))
    storage = open_storage(url, cfg.fs_options)
    for batch_id in range(batches):
        ids = range(batch_id * ROWS, (batch_id + 1) * ROWS)
        rows = pa.record_batch({"id": pa.array(ids, pa.int64()),
                                "name": pa.array([f"name {i}" for i in ids]),
                                "score": pa.array([i / 7 for i in ids]),
                                "day": pa.array([DAYS[i % 4] for i in ids])})
        plan = WritePlan.from_state(Committer(storage, cfg, SCHEMA_JSON).latest_state(),
                                    storage.root_uri)
        report = TaskWriter(storage, cfg, plan, batch_id=batch_id, partition=0, attempt=0,
                            query_id="bench").write([rows])
        if shared and batch_id > 1:
            another_writer_appends(storage, cfg, batch_id)
        timings.clear()
        started = time.monotonic()
        result = Committer(storage, cfg, SCHEMA_JSON).commit(batch_id, [report])
        commit_ms = (time.monotonic() - started) * 1000
        print(json.dumps({"batch": batch_id, "rolled": bool(result.finalized),
                          "commit_ms": commit_ms, "bytes": rows.nbytes,
                          "table_start": timings.get("start"), "table_end": timings.get("end")}),
              flush=True)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mb": peak_kb / 1024}), flush=True)


def another_writer_appends(storage: Any, cfg: Any, batch_id: int) -> None:
    """A backfill's append of 10 rows through the table's own library, between two commits."""
    import pyarrow as pa

    rows = pa.table({"id": pa.array(range(-10 * batch_id, -10 * batch_id + 10), pa.int64()),
                     "name": pa.array(["backfill"] * 10), "score": pa.array([0.0] * 10),
                     "day": pa.array([DAYS[0]] * 10)})
    from commit_protocol.tables import table_format_named

    followed: Any = table_format_named(cfg.table_format).open(storage, cfg)
    table = followed.loaded()
    if cfg.table_format == "delta":
        from deltalake import write_deltalake

        write_deltalake(table, rows, mode="append", partition_by=["day"])
    else:
        table.append(rows.cast(table.schema().as_arrow()))


# -- the parent --------------------------------------------------------------------------------
def run(url: str, endpoint: str, batches: int, table: str,
        table_options: dict[str, str]) -> tuple[list[dict], float, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, __file__, "--drive", url, endpoint or "-",
                           str(batches), table], capture_output=True, text=True, check=False,
                          env={**os.environ, "TABLE_OPTIONS": json.dumps(table_options)})
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [line for line in lines if "batch" in line], lines[-1]["peak_mb"], wall


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def iceberg_options(catalog: str, s3: str) -> dict[str, str]:
    """The REST catalog's options (SeaweedFS's, through the proxies)."""
    from tests.support.s3server import DUMMY_CREDENTIALS, TABLE_BUCKET

    key, secret = DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"], DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    os.environ["BENCH_CATALOG_SECRET"] = secret
    return {"catalog.type": "rest", "catalog.uri": catalog,
            "catalog.warehouse": f"s3://{TABLE_BUCKET}", "catalog.rest.sigv4-enabled": "true",
            "catalog.rest.signing-name": "s3tables", "catalog.rest.signing-region": "us-east-1",
            "catalog.client.access-key-id": key,
            "catalog.client.secret-access-key": "env:BENCH_CATALOG_SECRET",
            "catalog.s3.endpoint": s3, "catalog.s3.access-key-id": key,
            "catalog.s3.secret-access-key": "env:BENCH_CATALOG_SECRET",
            "catalog.s3.region": "us-east-1", "catalog.s3.path-style-access": "true",
            # botocore's client through the recording proxy (pyarrow's waits for a
            # "100 Continue" the proxy never sends)
            "catalog.py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            "identifier": f"bench.t{uuid.uuid4().hex[:8]}"}


CATALOGS = ("glue", "iceberg-rest", "postgres", "hive")
UNPROXIED = {"postgres": "sql", "hive": "hive"}  # catalog -> pyiceberg's type


def catalog_output(catalog: str, latency_ms: int, server: str, table: str
                   ) -> tuple[str, str, dict[str, str], list[Any]]:
    """The output, its S3 endpoint, the table's options and the proxies for ``catalog``
    (``glue``: moto at ``server``; ``iceberg-rest``: Iceberg's REST server at ``server``;
    ``postgres``: pyiceberg's SQL catalog, ``server`` the database's URI; ``hive``: Hive's
    metastore, ``server`` its Thrift URI)."""
    from tests.support.faulty_proxy import FailingProxy
    from tests.support.s3server import create_bucket

    name = f"bench.t{uuid.uuid4().hex[:8]}"
    if catalog in UNPROXIED:  # SQL, Thrift: no HTTP proxy delays or counts their calls
        options = {"catalog.type": UNPROXIED[catalog], "catalog.uri": server,
                   "identifier": name}
        return tempfile.mkdtemp(prefix="table-bench-"), "", options, []
    proxy = FailingProxy(server, latency_s=latency_ms / 1000)
    if catalog == "iceberg-rest":
        options = {"catalog.type": "rest", "catalog.uri": proxy.endpoint, "identifier": name}
        return tempfile.mkdtemp(prefix="table-bench-"), "", options, [proxy]
    bucket = create_bucket(server, f"table-bench-{uuid.uuid4().hex[:8]}")
    options = {"catalog.type": "glue", "catalog.glue.endpoint": proxy.endpoint,
               "catalog.glue.region": "us-east-1", "identifier": name,
               "catalog.py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}  # (see above)
    return f"s3://{bucket}/out", proxy.endpoint, options, [proxy]


def measure(storage: str, latency_ms: int, args, server: tuple[str, str] | None) -> None:
    from tests.support.faulty_proxy import FailingProxy, sequential
    from tests.support.s3server import create_bucket

    table_ms: list[float] = []
    requests: list[float] = []
    chains: list[float] = []
    with_table: list[float] = []
    shared: list[float] = []
    without: list[float] = []
    rates: list[tuple[float, float]] = []
    peaks: list[float] = []
    for _ in range(args.repeats):
        proxies: list[FailingProxy] = []
        for table in (args.table, f"{args.table}:shared", "plain"):
            options: dict[str, str] = {}
            if storage in CATALOGS:  # a catalog's server: server[0]
                assert server is not None
                url, endpoint, options, proxies = catalog_output(storage, latency_ms,
                                                                 server[0], table)
                if table == "plain":
                    options = {}
            elif storage == "s3":
                assert server is not None
                proxies = [FailingProxy(target, latency_s=latency_ms / 1000)
                           for target in server if target]
                bucket = create_bucket(server[0], f"table-bench-{uuid.uuid4().hex[:8]}")
                url, endpoint = f"s3://{bucket}/out", proxies[0].endpoint
                if table.startswith("iceberg"):
                    options = iceberg_options(proxies[1].endpoint, proxies[0].endpoint)
            else:
                url, endpoint = tempfile.mkdtemp(prefix="table-bench-"), ""
            batches, peak, wall = run(url, endpoint, args.batches, table, options)
            rolled = [b for b in batches if b["rolled"] and b["batch"] > 0]
            {"plain": without, args.table: with_table}.get(table, shared).append(
                median([b["commit_ms"] for b in rolled]))
            if table == args.table:
                rates.append((len(batches) * ROWS / wall, sum(b["bytes"] for b in batches)
                              / wall / 1e6))
                peaks.append(peak)
                for b in rolled:
                    table_ms.append((b["table_end"] - b["table_start"]) * 1000)
                    if proxies:
                        # what the commit waited for: the snapshot's refresh after it runs
                        # in the background (its requests end after the step)
                        sent = [r for proxy in proxies for r in proxy.requests
                                if b["table_start"] <= r.started and r.ended <= b["table_end"]]
                        requests.append(len(sent))
                        chains.append(sequential(sent))
            for proxy in proxies:
                proxy.stop()
    where = storage if storage == "local" else f"{storage}, {latency_ms} ms a request"
    print(f"{args.table}, {where}: table step per rolling batch {median(table_ms):.1f} ms"
          + (f", {median(requests):.0f} requests ({median(chains):.0f} sequential)"
             if requests else "")
          + f"; commit {median(with_table):.1f} ms with the table, {median(without):.1f} ms "
          f"without ({median(with_table) / median(without):.2f}x), {median(shared):.1f} ms "
          "following another writer's append before each "
          f"({median(shared) / median(with_table):.2f}x the table's); "
          f"{median([r for r, _ in rates]):,.0f} rows/s, {median([m for _, m in rates]):.1f} "
          f"MB/s; driver peak {median(peaks):.0f} MB")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--drive":
        url, endpoint, batches, mode = sys.argv[2:6]
        drive(url, "" if endpoint == "-" else endpoint, int(batches), mode)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--latency-ms", default="0,20")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--storage", default="local,s3")
    parser.add_argument("--table", choices=("delta", "iceberg"), default="delta")
    parser.add_argument("--catalog", default="",
                        help="glue,iceberg-rest,postgres,hive: Iceberg in those catalogs")
    args = parser.parse_args()
    if args.catalog:
        return measure_catalogs(args)
    from tests.support.s3server import DUMMY_CREDENTIALS, start_seaweedfs_with_catalog

    os.environ.update(DUMMY_CREDENTIALS)
    server: tuple[str, str] | None = None
    stop = None
    if "s3" in args.storage:
        s3, catalog, stop = start_seaweedfs_with_catalog()
        server = (s3, catalog)
    try:
        if "local" in args.storage:
            measure("local", 0, args, None)
        if "s3" in args.storage:
            for latency in map(int, args.latency_ms.split(",")):
                measure("s3", latency, args, server)
    finally:
        if stop is not None:
            stop()
    return 0


def measure_catalogs(args) -> int:
    """Iceberg's table step in each catalog of ``--catalog``, at each latency."""
    from tests.support.iceberg_rest import start_iceberg_rest
    from tests.support.s3server import DUMMY_CREDENTIALS, start_moto_server

    os.environ.update(DUMMY_CREDENTIALS)
    args.table = "iceberg"
    from tests.support.metastore import start_hive_metastore
    from tests.support.postgres import start_postgres

    starts = {"glue": start_moto_server, "iceberg-rest": start_iceberg_rest,
              "postgres": start_postgres, "hive": start_hive_metastore}
    for catalog in args.catalog.split(","):
        url, stop = starts[catalog]()
        try:
            for latency in map(int, args.latency_ms.split(",")):
                if latency and catalog in UNPROXIED:
                    print(f"{catalog}: no {latency} ms run (no proxy delays its calls)")
                    continue
                measure(catalog, latency, args, (url, ""))
        finally:
            stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
