"""A long run of micro-batches while the store fails a random share of every kind of request
(PUT, compose, copy, LIST, GET, DELETE, multipart: :data:`~tests.support.faulty_proxy.FAULTS`),
then the output checked from outside.

The output (JSON lines, or Parquet with a table: Delta on S3 and Azure, Iceberg on Cloud
Storage) goes through a :class:`~tests.support.faulty_proxy.FailingProxy` in front of the
store's emulator; the table's library (delta-rs, pyiceberg) talks to the same proxy. The
batches are driven as Spark drives them (:class:`~tests.support.spark_like.SparkLikeQuery`):
an error that reaches rotsink (one the store's client did not retry away) aborts the batch,
and the batch is replayed. Then, with the faults off and straight to the emulator: every
input row exactly once in the finalized files (read through ``_spark_metadata`` by the tests'
own reader and pyarrow), the table's rows equal to them, ``verify`` finding nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from commit_protocol.records.config import RotationPolicy, SinkConfig
from tests.support.faulty_proxy import (
    STORE_FAULTS,
    Chaos,
    FailingProxy,
    azure_operation,
    gcs_operation,
)

STORES = ("s3", "gcs", "azure")
TABLES = {"s3": "delta", "gcs": "iceberg", "azure": "delta"}  # the table each store gets
ROWS = 20
FIELD = {"nullable": True, "metadata": {}}
SCHEMA_JSON = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", **FIELD}, {"name": "grp", "type": "string", **FIELD}]})


@dataclass
class FaultOutcome:
    """What a run did and found."""

    store: str
    table: str | None
    batches: int
    seconds: float
    requests: int = 0                   # that reached the store
    injected: Counter = field(default_factory=Counter)  # (operation, fault) -> n
    armed_faults: int = 0                # of the rules a test armed (FailingProxy.fail)
    reached: Counter = field(default_factory=Counter)   # errors that reached rotsink, by kind
    examples: dict[str, str] = field(default_factory=dict)  # kind -> its first message
    refused_creates: int = 0  # creates the store refused, their object there (412; Azure 409)
    lost: int = 0
    duplicated: int = 0
    table_matches: bool | None = None
    problems: list[str] = field(default_factory=list)   # verify's

    @property
    def exact(self) -> bool:
        return (self.lost, self.duplicated) == (0, 0) and self.table_matches is not False \
            and not self.problems

    def line(self) -> str:
        faults = sum(self.injected.values())
        table = "" if self.table is None else f" + {self.table} table " + (
            "(equal to the finalized files)" if self.table_matches else "(MISMATCH)")
        return (f"{self.store}{table}: {self.batches} batches in {self.seconds:.1f} s, "
                f"{self.requests} requests, {faults} faults injected, "
                f"{sum(self.reached.values())} reached rotsink "
                f"({', '.join(f'{k} {n}' for k, n in self.reached.most_common()) or 'none'}); "
                f"lost {self.lost}, duplicated {self.duplicated}, verify "
                f"{'clean' if not self.problems else self.problems[:3]}")


def output_on(store: str, endpoint: str) -> tuple[str, dict[str, str]]:
    """A fresh bucket or container on the emulator at ``endpoint``: the output's URL and the
    ``fs.*`` options (without the prefix) that reach it through ``endpoint``."""
    name = f"rotsink-faults-{uuid.uuid4().hex[:8]}"
    if store == "s3":
        from tests.support.s3server import create_bucket

        return f"s3://{create_bucket(endpoint, name)}/out", {"endpoint_url": endpoint}
    if store == "gcs":
        from tests.support.gcsserver import OPTIONS
        from tests.support.gcsserver import create_bucket as create_gcs_bucket

        url = f"gs://{create_gcs_bucket(endpoint, name)}/out"
        return url, {"endpoint_url": endpoint, **OPTIONS}
    from tests.support.azurite import ACCOUNT, create_container, options

    url = f"abfss://{create_container(endpoint, name)}@{ACCOUNT}.dfs.core.windows.net/out"
    return url, options(endpoint)


def sink_config(url: str, fs: dict[str, str], table: str | None, workdir: Path) -> SinkConfig:
    """Four directories, files that stay in progress for three batches (then the driver rolls
    them), a compaction and its clean-up every fifth batch."""
    cfg = SinkConfig(path=url, fs_options=fs, partition_by=("grp",), compression="zstd",
                     file_suffix=".jsonl.zst", compact_interval=5, cleanup_delay_ms=0,
                     rotation=RotationPolicy(max_batches=3, interval_ms=60_000,
                                             inactivity_ms=0))
    if table is None:
        return cfg
    cfg = replace(cfg, format="parquet", compression="snappy", file_suffix=".parquet",
                  table_format=table)
    if table == "iceberg":  # a SQL catalog in workdir, the table beside the output
        cfg = replace(cfg, table_options={
            "catalog.type": "sql", "catalog.uri": f"sqlite:///{workdir}/catalog.db",
            "catalog.warehouse": url.rsplit("/", 1)[0] + "/warehouse"})
    return cfg


def with_endpoint(store: str, fs: dict[str, str], endpoint: str) -> dict[str, str]:
    """``fs`` reaching ``endpoint`` instead."""
    if store == "azure":
        from tests.support.azurite import options

        return {**fs, **options(endpoint)}
    return {**fs, "endpoint_url": endpoint}


def rows(batch_id: int, batches: int) -> pa.RecordBatch | None:
    if batch_id >= batches:
        return None  # the last batch rolls every file, for its age
    ids = list(range(batch_id * ROWS, (batch_id + 1) * ROWS))
    return pa.record_batch({"id": pa.array(ids, pa.int64()),
                            "grp": [f"g{i % 4}" for i in ids]})


# A request of each step, by store: (method, a part of its path, a part of its body), for a
# lost answer. A finished file under 5 MiB is published by one exclusive create of its final
# name (larger ones by a compose, recognised the same way: tests/unit/test_storage_contract.py).
LOST_ANSWERS: dict[str, dict[str, tuple[str, str, bytes]]] = {
    store: {"commit point": ("PUT", "_spark_metadata/", b""),
            "publish": ("PUT", final, b""),
            "segment": ("PUT", "_rotsink/inprogress/", b""),
            "claim": ("PUT", "_rotsink/claims/", b"")}
    for store, final in (("s3", "/grp%3D"), ("azure", "/grp="))}
LOST_ANSWERS["gcs"] = {  # an upload names its object in the body
    "commit point": ("POST", "/upload/", b'"name": "out/_spark_metadata/'),
    "publish": ("POST", "/upload/", b'"name": "out/grp='),
    "segment": ("POST", "/upload/", b'"name": "out/_rotsink/inprogress/'),
    "claim": ("POST", "/upload/", b'"name": "out/_rotsink/claims/')}


# How many times each store's client sends a request before its error reaches rotsink
# (botocore's legacy mode in s3fs: 5; gcsfs: 6; Azure's storage SDK: 1 + 3 retries)
ATTEMPTS = {"s3": 5, "gcs": 6, "azure": 4}


def runs_with_a_lost_answer(store: str, endpoint: str, workdir: Path, step: str, *,
                            outage: bool = False) -> tuple[FaultOutcome, int]:
    """Four batches (the third rolls files) whose first request of ``step``
    (:data:`LOST_ANSWERS`) is done by the store and its answer lost (the connection reset
    after it); or, with ``outage``, answered 503 as often as the client tries (the error
    reaches rotsink once). The outcome, and how many requests the proxy failed."""
    method, part, body = LOST_ANSWERS[store][step]
    times, fault = (ATTEMPTS[store], "") if outage else (1, "reset-after")
    outcome = run_with_faults(store, endpoint, workdir, table=False, batches=4, share=0,
                              arm=lambda proxy: proxy.fail(method, part, times, fault=fault,
                                                           body_contains=body))
    return outcome, outcome.armed_faults


def run_with_faults(store: str, endpoint: str, workdir: Path, *, table: bool, batches: int,
                    share: float, seed: int = 7, faults: tuple[str, ...] | None = None,
                    slow_s: float = 1.5,
                    arm: Callable[[FailingProxy], None] | None = None,
                    fs_extra: dict[str, str] | None = None) -> FaultOutcome:
    """``batches`` micro-batches to ``store`` (its emulator at ``endpoint``) through a proxy
    failing ``share`` of the requests with ``faults`` (by default every fault the store
    has, :data:`STORE_FAULTS`), or as ``arm`` arms it, the client given ``fs_extra`` too
    (``fs.*`` options without the prefix); see the module docstring."""
    from tests.support.spark_like import SparkLikeQuery

    url, direct = output_on(store, endpoint)
    classify = {"gcs": gcs_operation, "azure": azure_operation}.get(store)
    proxy = FailingProxy(endpoint, classify=classify)
    if arm is not None:
        arm(proxy)
    table_format = TABLES[store] if table else None
    cfg = sink_config(url, {**with_endpoint(store, direct, proxy.endpoint), **(fs_extra or {})},
                      table_format, workdir)
    query = SparkLikeQuery(cfg, rows=lambda b: rows(b, batches),
                           schema_json=lambda b: SCHEMA_JSON, caught=(Exception,),
                           attempts=20)
    outcome = FaultOutcome(store, table_format, batches, 0.0)
    started = time.monotonic()
    proxy.chaos(Chaos(share, faults or STORE_FAULTS[store], seed=seed, slow_s=slow_s)
                if share else None)
    base = int(time.time() * 1000)
    try:
        for batch_id in range(batches + 1):
            query.run(batch_id, now_ms=base + 10 * batch_id if batch_id < batches
                      else base + 10 * batches + 120_000)
    finally:
        proxy.clear()
        outcome.armed_faults = len(proxy.failed)
        outcome.seconds = time.monotonic() - started
        outcome.requests = len(proxy.requests)
        outcome.refused_creates = sum(1 for sent in proxy.requests if sent.status in (409, 412))
        outcome.injected = Counter(proxy.injected)
        proxy.stop()
    outcome.reached = Counter(f.split(":")[0] for f in query.failures)
    for failure in query.failures:
        outcome.examples.setdefault(failure.split(":")[0], failure[:500])
    check(outcome, replace(cfg, fs_options=direct), batches)
    return outcome


def check(outcome: FaultOutcome, cfg: SinkConfig, batches: int) -> None:
    """Straight to the emulator: the finalized files, the table, ``verify``."""
    from commit_protocol.checks.verification import verify_output
    from commit_protocol.storage import open_storage
    from tests.support.spark_log import latest_batch
    from tests.support.tables import table_ids

    latest = latest_batch(cfg.path, cfg.fs_options)
    found = finalized(cfg, latest) if latest is not None else Counter()
    expected = set(range(batches * ROWS))
    outcome.lost = len(expected - set(found))
    outcome.duplicated = sum(n - 1 for n in found.values() if n > 1) + len(set(found) - expected)
    if cfg.table_format is not None:
        options = {"format": "parquet", "partitionBy": "grp", "table.format": cfg.table_format,
                   **{f"table.{k}": v for k, v in cfg.table_options.items()},
                   **{f"fs.{k}": v for k, v in cfg.fs_options.items()}}
        outcome.table_matches = table_ids(cfg.path, options) == found
    verified = verify_output(open_storage(cfg.path, cfg.fs_options), commit_timeout_s=0,
                             fs_options=cfg.fs_options)
    outcome.problems = list(verified.problems) + [f"pending {p}" for p in verified.pending]


def finalized(cfg: SinkConfig, latest: int) -> Counter:
    """The ids in the files ``_spark_metadata`` lists as of ``latest``, read by pyarrow."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    from tests.support.spark_log import _Output, finalized_paths

    fs = _Output(cfg.path, cfg.fs_options).filesystem()
    ids: Counter = Counter()
    for path in finalized_paths(cfg.path, latest, cfg.fs_options):
        with fs.open(str(path), "rb") as f:
            if cfg.format == "parquet":
                ids.update(pq.read_table(f).column("id").to_pylist())
            else:
                ids.update(pj.read_json(pa.CompressedInputStream(f, "zstd"))
                           .column("id").to_pylist())
    return ids
