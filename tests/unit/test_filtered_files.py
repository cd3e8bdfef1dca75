"""Compression and encryption under the commit protocol: appends across batches, failed
attempts, rolls by the driver, and damaged files, for every row codec with and without a key."""

from __future__ import annotations

import base64
import os
import uuid

import pyarrow as pa
import pytest

from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.formats.codecs import ROW_CODEC_SUFFIX
from commit_protocol.vocabulary.errors import EncryptionKeyError, IntegrityError, TruncatedFileError
from tests.unit.test_task_writer import commit, committed_ids, config, rows, run_task, storage_of

CODECS = list(ROW_CODEC_SUFFIX)


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("ROTSINK_TEST_KEY", base64.b64encode(os.urandom(32)).decode())
    return "env:ROTSINK_TEST_KEY"


def filtered(tmp_path, codec: str, encrypted: bool, key_ref: str, **kw):
    keys = KeyRefs(key_ref) if encrypted else None
    return config(tmp_path, compression=codec, keys=keys, **kw)


@pytest.fixture(params=["local", "memory", "s3"])
def target(request, tmp_path) -> dict:
    """Where the output goes: ``path`` and ``fs_options`` for the config of one backend."""
    if request.param == "local":
        return {}
    if request.param == "memory":
        return {"path": f"memory://rotsink-{uuid.uuid4().hex}/out"}
    import s3fs

    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = f"rotsink-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=endpoint).mkdir(bucket)
    return {"path": f"s3://{bucket}/out", "fs_options": {"endpoint_url": endpoint}}


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("codec", CODECS)
def test_appends_across_batches_with_a_failed_attempt_decode_exactly(tmp_path, key_env, codec,
                                                                     encrypted, target):
    cfg = filtered(tmp_path, codec, encrypted, key_env, **target)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 30)]))
    commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(30, 30)]))
    failed = run_task(tmp_path, cfg, 2, [rows(900, 30)])  # appended in place, never committed
    retry = run_task(tmp_path, cfg, 2, [rows(60, 30)], attempt=1)
    assert retry.files[0].fenced_from == failed.files[0].temp
    commit(tmp_path, cfg, 2, retry)
    commit(tmp_path, cfg, 3, run_task(tmp_path, cfg, 3, [rows(90, 30)]))
    assert committed_ids(tmp_path, cfg) == list(range(120))


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("codec", CODECS)
def test_rolled_files_by_task_and_by_driver_decode_exactly(tmp_path, key_env, codec, encrypted,
                                                           target):
    cfg = filtered(tmp_path, codec, encrypted, key_env, **target,
                   rotation={"max_records": 25, "max_batches": 2})
    for batch in range(4):  # records roll inside tasks; the batch count rolls at commit
        commit(tmp_path, cfg, batch, run_task(tmp_path, cfg, batch, [rows(batch * 10, 10)]))
    finalized = sorted(i.path for i in storage_of(cfg).list("") if i.path.startswith("part-"))
    assert len(finalized) >= 2 and all(n.endswith(cfg.file_suffix) for n in finalized)
    assert committed_ids(tmp_path, cfg) == list(range(40))


def test_driver_rolled_encrypted_file_ends_with_final(tmp_path, key_env):
    from commit_protocol.crypto.sealed import open_sealed

    cfg = filtered(tmp_path, "none", True, key_env, rotation={"max_batches": 1})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    (published,) = tmp_path.glob("part-*")
    data = published.read_bytes()
    ring = cfg.keys.ring()
    assert open_sealed(data, ring, path="p", require_final=True).count(b"\n") == 3


def test_retried_driver_roll_publishes_exactly_one_final(tmp_path, key_env):
    """A commit that died after sealing in place is redone on a copy: no second FINAL."""
    from commit_protocol.commit.committer import Committer
    from commit_protocol.storage import LocalStorage
    from tests.unit.test_task_writer import SCHEMA_JSON

    cfg = filtered(tmp_path, "gzip", True, key_env, rotation={"max_batches": 1})
    report = run_task(tmp_path, cfg, 0, [rows(0, 3)])
    committer = Committer(LocalStorage(str(tmp_path)), cfg, SCHEMA_JSON)
    state = committer._state_for(0, None, [report], None)
    from commit_protocol.commit.merge import merge_reports

    merged = merge_reports(state.slots(), [report], committer.storage, cfg.rotation,
                           is_bulk=False, now_ms=0)
    from commit_protocol.commit.driver_rolls import seal_rolled

    seal_rolled(committer.storage, cfg, merged.finalized[0], 0)  # the dead driver's FINAL
    commit(tmp_path, cfg, 0, report)
    assert committed_ids(tmp_path, cfg) == [0, 1, 2]


def _damage(path, how: str) -> None:
    data = path.read_bytes()
    if how == "flip":
        data = data[:-40] + bytes([data[-40] ^ 1]) + data[-39:]
    elif how == "cut":
        data = data[:-10]
    path.write_bytes(data)


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("codec", ["gzip", "bz2", "zstd"])
def test_damaged_finalized_file_is_an_error_naming_it(tmp_path, key_env, codec, encrypted):
    cfg = filtered(tmp_path, codec, encrypted, key_env, rotation={"max_batches": 1})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 200)]))
    (published,) = tmp_path.glob("part-*")
    _damage(published, "flip")
    with pytest.raises(IntegrityError, match=f"{published.name}: "):
        committed_ids(tmp_path, cfg)
    _damage(published, "cut")
    with pytest.raises(TruncatedFileError, match=f"{published.name} holds \\d+ bytes; the log "
                                                 "commits"):
        committed_ids(tmp_path, cfg)


def test_reading_with_the_wrong_key_says_so(tmp_path, key_env, monkeypatch):
    cfg = filtered(tmp_path, "zstd", True, key_env)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    monkeypatch.setenv("ROTSINK_TEST_KEY", base64.b64encode(os.urandom(32)).decode())
    with pytest.raises(EncryptionKeyError, match="no configured key has that id"):
        committed_ids(tmp_path, cfg)  # a different key derives a different id


def test_no_key_bytes_in_the_log_or_state(tmp_path, key_env):
    cfg = filtered(tmp_path, "gzip", True, key_env, rotation={"max_batches": 2})
    for batch in range(3):
        commit(tmp_path, cfg, batch, run_task(tmp_path, cfg, batch, [rows(batch, 1)]))
    key = base64.b64decode(os.environ["ROTSINK_TEST_KEY"])
    forms = [key, key.hex().encode(), base64.b64encode(key)]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(form in data for form in forms), path


def test_encrypted_parquet_is_encrypted_and_reads_back(tmp_path, key_env):
    cfg = filtered(tmp_path, "zstd", True, key_env, format="parquet", file_suffix=".parquet",
                   rotation={"max_batches": 2})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 30)]))
    assert committed_ids(tmp_path, cfg) == list(range(30))  # the staged rows, sealed
    commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(30, 20)]))
    (published,) = tmp_path.glob("part-*.parquet")
    import pyarrow.parquet as pq

    with pytest.raises(OSError, match="no decryption found"):  # no keys: unreadable
        pq.read_table(published)
    assert committed_ids(tmp_path, cfg) == list(range(50))


def test_plaintext_parquet_swapped_into_an_encrypted_path_is_refused(tmp_path, key_env):
    import pyarrow.parquet as pq

    cfg = filtered(tmp_path, "zstd", True, key_env, format="parquet", file_suffix=".parquet",
                   rotation={"max_batches": 1})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 50)]))
    (published,) = tmp_path.glob("part-*.parquet")
    size = published.stat().st_size
    pad = 0
    for _ in range(4):  # an uncompressed padding column makes it exactly the logged size
        plain = pa.table({"id": pa.array([1000], pa.int64()), "pad": ["x" * pad]})
        pq.write_table(plain, published, store_schema=False, compression="none",
                       write_statistics=False, use_dictionary=False)
        pad += size - published.stat().st_size
    assert published.stat().st_size == size and pq.read_table(published).num_rows == 1
    with pytest.raises(IntegrityError, match="expected an encrypted Parquet footer"):
        committed_ids(tmp_path, cfg)


def test_finalized_file_longer_than_logged_is_an_error(tmp_path):
    cfg = config(tmp_path, rotation={"max_batches": 1})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    (published,) = tmp_path.glob("part-*")
    with open(published, "ab") as f:
        f.write(b'{"id":99}\n')
    with pytest.raises(IntegrityError, match="log commits exactly \\d+ to this finalized file"):
        committed_ids(tmp_path, cfg)


def test_orphans_of_a_failed_attempt_are_cleaned_after_the_delay(tmp_path, target):
    import time

    from commit_protocol.commit.committer import Committer
    from commit_protocol.vocabulary.naming import INPROGRESS_DIR
    from tests.unit.test_task_writer import SCHEMA_JSON

    cfg = config(tmp_path, **target, compact_interval=2, cleanup_delay_ms=60_000)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 5)]))
    failed = run_task(tmp_path, cfg, 1, [rows(100, 5)])  # won the claim, then died
    retry = run_task(tmp_path, cfg, 1, [rows(5, 5)], attempt=1)  # fenced: a fresh copy
    now = int(time.time() * 1000)
    # batch 1 is a compaction batch: cleanup runs, but the orphan is younger than the delay
    Committer(storage_of(cfg), cfg, SCHEMA_JSON).commit(1, [retry], now_ms=now)
    temps = {i.path for i in storage_of(cfg).list(INPROGRESS_DIR)}
    assert {failed.files[0].temp, retry.files[0].temp} <= temps
    report = run_task(tmp_path, cfg, 2, [rows(10, 5)])
    commit(tmp_path, cfg, 2, report)
    report = run_task(tmp_path, cfg, 3, [rows(15, 5)])
    Committer(storage_of(cfg), cfg, SCHEMA_JSON).commit(3, [report], now_ms=now + 120_000)
    temps = {i.path for i in storage_of(cfg).list(INPROGRESS_DIR)}
    assert failed.files[0].temp not in temps and retry.files[0].temp in temps
    assert committed_ids(tmp_path, cfg) == list(range(20))
