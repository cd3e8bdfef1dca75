"""Stores that fail requests, as real ones do every day: S3, Cloud Storage and Azure (their
emulators behind a proxy, ``tests/support/faulty_proxy.py``) answering a share of every kind
of request with 500, 503 or 429, a reset connection (before the store saw the request, or
after it did it) or a slow answer. A run of micro-batches, plain and into a table on each
store, keeps going, and every row is in the output exactly once
(``tests/support/fault_run.py``); a create whose answer was lost is recognised by its retry.

Size: ``ROTSINK_FAULT_BATCHES`` micro-batches a run (12 in CI; hundreds on demand, as
``python benchmarks/store_faults.py`` runs them), ``ROTSINK_FAULT_SHARE`` of the requests
failed (0.05; a tenth of it on Azure, where each retried fault waits for the storage SDK's
backoff of 15 s and more). The random faults leave out outages (each waits for a client's
whole retry budget): an outage at each step is tested one by one, and the benchmark has them
among its random faults.
"""

from __future__ import annotations

import os

import pytest

from tests.support.fault_run import (
    LOST_ANSWERS,
    STORES,
    run_with_faults,
    runs_with_a_lost_answer,
)
from tests.support.faulty_proxy import STORE_FAULTS

BATCHES = int(os.environ.get("ROTSINK_FAULT_BATCHES", "12"))
SHARE = float(os.environ.get("ROTSINK_FAULT_SHARE", "0.05"))
SEED = int(os.environ.get("ROTSINK_CRASH_SEED", "7"))
ENDPOINTS = {"s3": "seaweedfs_endpoint", "gcs": "gcs_endpoint", "azure": "azure_endpoint"}


@pytest.mark.parametrize("table", [False, True], ids=["plain", "table"])
@pytest.mark.parametrize("store", STORES)
def test_a_run_through_a_failing_store_loses_and_duplicates_nothing(request, tmp_path, shown,
                                                                     store, table):
    endpoint = request.getfixturevalue(ENDPOINTS[store])
    share = SHARE / 10 if store == "azure" else SHARE
    faults = tuple(f for f in STORE_FAULTS[store] if f != "outage")
    outcome = run_with_faults(store, endpoint, tmp_path, table=table, batches=BATCHES,
                              share=share, seed=SEED, faults=faults, slow_s=0.5)
    shown(outcome.line())
    assert sum(outcome.injected.values()) > 0, "the proxy failed requests"
    assert outcome.exact, outcome.line()


@pytest.mark.parametrize("step", ["commit point", "publish", "segment", "claim"])
@pytest.mark.parametrize("store", STORES)
def test_a_create_whose_answer_was_lost_is_recognised_by_its_retry(request, tmp_path, store,
                                                                   step):
    """The store made the object (the log file: the commit point; a finished file; an
    in-progress segment; a task's claim), then the connection was reset before its answer:
    the client's retry finds the object there, and rotsink knows it for its own, so no error
    reaches the query and nothing is made twice."""
    endpoint = request.getfixturevalue(ENDPOINTS[store])
    outcome, lost_answers = runs_with_a_lost_answer(store, endpoint, tmp_path, step)
    assert lost_answers == 1, f"the {step} request was reset after the store did it"
    assert not outcome.reached, outcome.examples
    assert outcome.exact, outcome.line()


@pytest.mark.parametrize("store", STORES)
def test_an_outage_longer_than_the_client_retries_fails_the_batch_and_the_replay_goes_on(
        request, tmp_path, store):
    """The commit point's create answered 503 as many times in a row as the store's client
    tries (botocore 5, gcsfs 6, Azure's SDK 4): the error reaches rotsink, Spark aborts the
    batch (keeping what the log names), and the replay commits it."""
    endpoint = request.getfixturevalue(ENDPOINTS[store])
    outcome, failed = runs_with_a_lost_answer(store, endpoint, tmp_path, "commit point",
                                              outage=True)
    assert sum(outcome.reached.values()) == 1, outcome.line()  # the client gave up once
    assert outcome.exact, outcome.line()


# Each client's own timeout option, as fs.* options take it, and the share of requests held
# past it: botocore retries a timed-out request itself; gcsfs does not (FSTimeoutError), so
# there each one fails its attempt, which Spark retries, and a run needs a smaller share
TIMEOUTS = {"s3": ({"config_kwargs.read_timeout": "0.5"}, 0.1),
            "gcs": ({"requests_timeout": "0.5"}, 0.02)}


@pytest.mark.parametrize("store", sorted(TIMEOUTS))
def test_slow_answers_past_the_client_s_timeout_are_retried_and_late_requests_change_nothing(
        request, tmp_path, shown, store):
    """A share of the requests held 1.5 s before the store sees them, past the client's read
    timeout (0.5 s, set through ``fs.*``): the client (or Spark, replaying the batch) gives up
    and tries again, and the held request reaches the store after its retry (an exclusive
    create then finds its object there and is refused; a late intent is rolled forward).
    Every row once, verify clean."""
    endpoint = request.getfixturevalue(ENDPOINTS[store])
    options, share = TIMEOUTS[store]
    outcome = run_with_faults(store, endpoint, tmp_path, table=False, batches=BATCHES,
                              share=share, seed=SEED, faults=("slow",), slow_s=1.5,
                              fs_extra=options)
    shown(f"{outcome.line()}; {outcome.refused_creates} late create(s) refused by the store")
    assert sum(outcome.injected.values()) > 0
    assert outcome.refused_creates > 0  # the client timed out: its retry came first
    assert outcome.exact, outcome.line()


def test_an_azure_request_held_past_fs_read_timeout_is_given_up_and_retried(azure_endpoint,
                                                                              tmp_path):
    """``fs.read_timeout`` reaches rotsink's own requests on Azure (adlfs gives it only to its
    transfers): the commit point's Put Blob, held 3 s before Azurite sees it, is given up
    after 0.5 s and sent again by the storage SDK after its backoff; the held one lands
    first, and the retry is refused and known for this create's own."""
    method, part, _ = LOST_ANSWERS["azure"]["commit point"]
    outcome = run_with_faults("azure", azure_endpoint, tmp_path, table=False, batches=4,
                              share=0, fs_extra={"read_timeout": "0.5"},
                              arm=lambda proxy: proxy.fail(method, part, 1, fault="slow",
                                                           slow_s=3.0))
    assert outcome.armed_faults == 1
    assert outcome.refused_creates == 1, "the client gave up the held create and retried it"
    assert not outcome.reached, outcome.examples
    assert outcome.exact, outcome.line()
