"""docs/tables.md's recipes for reading a table on Azure and Cloud Storage, run exactly as
printed against the emulators (Azurite, fake-gcs-server): each must return the rows of the
finalized files (read by pyarrow from the files ``_spark_metadata`` lists, not by rotsink).
A user found that none ran as the docs then printed them (a hung pyiceberg on gs://, delta-rs
refusing a connection string and wasb://)."""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.fault_run import SCHEMA_JSON, finalized, rows, sink_config
from tests.support.spark_like import SparkLikeQuery

ROOT = Path(__file__).resolve().parents[2]
BATCHES = 4


def recipe(title: str) -> str:
    """The code block of docs/tables.md's "Reading the table there" that begins with the
    comment ``# <title>``."""
    page = (ROOT / "docs" / "tables.md").read_text()
    section = page.split("**Reading the table there.**", 1)[1].split("\n## ", 1)[0]
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", section, re.S)
               if block.startswith(f"# {title}")]
    return code


def write_table(url: str, fs: dict[str, str], table_format: str, workdir: Path):
    """A few micro-batches into the table at ``url`` (as the sink commits them), the last
    finishing every file; the config and the finalized files' ids."""
    cfg = sink_config(url, fs, table_format, workdir)
    if table_format == "iceberg":
        cfg = replace(cfg, table_options={**cfg.table_options, "identifier": "lake.events"})
    query = SparkLikeQuery(cfg, rows=lambda b: rows(b, BATCHES),
                           schema_json=lambda b: SCHEMA_JSON, caught=(), attempts=1)
    base = int(time.time() * 1000)
    for batch_id in range(BATCHES + 1):
        query.run(batch_id, now_ms=base + 10 * batch_id if batch_id < BATCHES
                  else base + 10 * BATCHES + 120_000)
    return cfg, finalized(cfg, BATCHES)


def ids_of(table) -> Counter:
    return Counter(table.column("id").to_pylist())


@pytest.mark.parametrize("table_format, title", [
    ("delta", "Delta on Azure"), ("iceberg", "Iceberg on Azure")])
def test_the_recipe_reads_the_table_on_azure(tmp_path, azure_endpoint, table_format, title):
    from tests.support.azurite import ACCOUNT, KEY, create_container, options

    container = create_container(azure_endpoint, f"recipe-{uuid.uuid4().hex[:8]}")
    url = f"abfss://{container}@{ACCOUNT}.dfs.core.windows.net/events"
    cfg, expected = write_table(url, options(azure_endpoint), table_format, tmp_path)
    assert sum(expected.values()) > 0
    bound = {"container": container, "account": ACCOUNT, "key": KEY,
             "endpoint": f"{azure_endpoint}/{ACCOUNT}",
             "catalog_uri": cfg.table_options.get("catalog.uri")}
    exec(recipe(title), bound)  # as printed, with the user's values bound
    assert ids_of(bound["rows"]) == expected


def test_the_recipe_reads_an_iceberg_table_on_cloud_storage(tmp_path, gcs_endpoint):
    from tests.support.gcsserver import OPTIONS, create_bucket

    bucket = create_bucket(gcs_endpoint, f"recipe-{uuid.uuid4().hex[:8]}")
    cfg, expected = write_table(f"gs://{bucket}/events", {"endpoint_url": gcs_endpoint,
                                                          **OPTIONS}, "iceberg", tmp_path)
    assert sum(expected.values()) > 0
    bound = {"token": "anon", "project": "", "endpoint": gcs_endpoint,
             "catalog_uri": cfg.table_options["catalog.uri"]}
    exec(recipe("Iceberg on Cloud Storage"), bound)
    assert ids_of(bound["rows"]) == expected
