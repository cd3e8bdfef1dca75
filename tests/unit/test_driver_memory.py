"""A driver commits a micro-batch every few seconds for months: nothing its commit keeps in
the process may grow with the number of commits (issue 55; the long run is
``benchmarks/long_run.py``).

The driver's whole commit, without Spark (``tests.support.committing_driver``: the plan, one
task, the commit with its rolls, log compactions, clean-ups and the table's commit), runs
warm, then the Python heap is measured by ``tracemalloc`` across further commits. Every
cache rotsink or a library keeps fills during the warm-up and then stays; what is retained per
commit shows as growth. pyiceberg's own manifest cache (process-wide, bounded by its
``manifest-cache-size``, the last 128 manifests read by default) fills over hundreds of
commits, longer than this test runs, so it is emptied after every commit: the measurement
sees everything else.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc

import pytest

from commit_protocol.log.cache import STATES
from commit_protocol.tables.iceberg.catalog import OPEN_CATALOGS
from tests.support.committing_driver import commit_one, config

WARM_COMMITS = 60  # the state cache (8), log compactions (every 3rd), rolls, clean-ups
MEASURED_COMMITS = 100
# Measured here: 16 KiB (no table), 18 (Delta), 45 (Iceberg: a pooled connection, urllib's
# cache); with rotsink's state cache left unbounded, one state a commit: 266, 346, 371 KiB.
ALLOWED_GROWTH_KIB = 128


def _python_heap_after(commits: range, cfg) -> int:
    for batch_id in commits:
        commit_one(cfg, batch_id)
        if cfg.table_format == "iceberg":
            from pyiceberg.manifest import clear_manifest_cache

            clear_manifest_cache()
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.parametrize("table_format", [None, "delta", "iceberg"])
def test_the_driver_s_commit_keeps_nothing_per_commit(tmp_path, caplog, table_format):
    # the harness's clean-ups log a line every few commits, which pytest would keep
    caplog.set_level(logging.ERROR, logger="rotsink")
    if table_format is not None:
        pytest.importorskip({"delta": "deltalake", "iceberg": "pyiceberg"}[table_format])
    cfg = config(str(tmp_path / "out"), table_format)
    # traced from the first commit: an entry that a cache drops must count as it leaves, or
    # its untraced successor would look like growth
    tracemalloc.start()
    try:
        before = _python_heap_after(range(WARM_COMMITS), cfg)
        after = _python_heap_after(range(WARM_COMMITS, WARM_COMMITS + MEASURED_COMMITS), cfg)
    finally:
        tracemalloc.stop()
    grown_kib = (after - before) / 1024
    assert grown_kib < ALLOWED_GROWTH_KIB, (
        f"the Python heap grew {grown_kib:.0f} KiB over {MEASURED_COMMITS} commits "
        f"({table_format or 'no table'}): something is kept per commit")
    assert len(STATES) <= STATES.size
    assert len(OPEN_CATALOGS) <= OPEN_CATALOGS.size


def test_an_iceberg_catalog_is_opened_once_a_process_and_again_for_a_new_output(
        tmp_path, monkeypatch):
    """Each micro-batch commits through a new ``Committer``; the catalog is kept across them
    (a SQL catalog's engine, a REST catalog's config request) for a while, and an output
    deleted and started again at the same path gets a catalog on its new SQLite file."""
    pytest.importorskip("pyiceberg")
    import shutil

    from pyiceberg.catalog import load_catalog

    from commit_protocol.tables.iceberg import rest

    opened = []

    def counted(name, **properties):
        opened.append(properties["uri"])
        return load_catalog(name, **properties)

    monkeypatch.setattr(rest, "load_catalog", counted)  # where rotsink opens every catalog
    out = tmp_path / "out"
    cfg = config(str(out), "iceberg")
    for batch_id in range(4):
        commit_one(cfg, batch_id)
    assert len(opened) == 1
    shutil.rmtree(out)
    for batch_id in range(2):
        commit_one(cfg, batch_id)
    assert len(opened) == 2 and opened[0] == opened[1]
    monkeypatch.setattr(OPEN_CATALOGS, "reuse_s", 0)  # kept no longer than this
    commit_one(cfg, 2)
    assert len(opened) == 3
    # the new output's table, read through a catalog of its own, holds its finalized rows
    from collections import Counter

    import pyarrow as pa

    from commit_protocol.storage import LocalStorage
    from commit_protocol.tables.iceberg.catalog import catalog_properties, default_identifier
    from tests.support.tables import finalized_ids

    storage = LocalStorage(str(out))
    table = load_catalog("rotsink", **catalog_properties(storage.root_uri, {})).load_table(
        default_identifier(storage.root_uri))
    expected = finalized_ids(storage, pa.schema([("id", pa.int64()), ("grp", pa.string())]))
    assert Counter(table.scan().to_arrow().column("id").to_pylist()) == expected
    assert set(expected) <= set(range(120)) and expected  # the second life's batches
