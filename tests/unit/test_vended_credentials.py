"""Storage credentials an Iceberg REST catalog vends: rotsink's output on S3 is written with
them, not with its own ``fs.*`` credentials, asked for again before they expire, and learnt
before the table exists without creating it.

The catalog is SeaweedFS's REST catalog behind a proxy that vends
(:mod:`tests.support.vending`), the store SeaweedFS's S3 gateway, which checks every
request's signature: the output's own key is wrong, so only the vended one writes. The whole
way, a Spark query through the vending catalog, is in
``tests/spark/test_query_with_vended_credentials.py``."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import pytest

from commit_protocol.storage import open_storage
from commit_protocol.storage.access import check_access
from commit_protocol.tables.iceberg import vended
from commit_protocol.tables.iceberg.vended import with_vended_credentials
from commit_protocol.vocabulary.errors import RotsinkError
from tests.support.s3server import DUMMY_CREDENTIALS, create_bucket, rest_catalog_options
from tests.support.vending import Vending, start_vending_catalog
from tests.unit.test_delta_commits import SCHEMA_JSON, commit_batch, forget
from tests.unit.test_iceberg_commits import iceberg_config, table_of

WRONG = {"key": "nobody", "secret": "not-the-secret"}  # the output's own: refused by the store


@pytest.fixture(autouse=True)
def fresh_process_memory():
    forget()
    vended.forget()
    yield
    forget()
    vended.forget()


@pytest.fixture
def vending(seaweedfs_catalog) -> Iterator[tuple[Vending, str]]:
    """The vending proxy in front of SeaweedFS's catalog: what it vends, its URL."""
    vending = Vending(key=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                      secret=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    url, stop = start_vending_catalog(seaweedfs_catalog[1], vending)
    yield vending, url
    stop()


def catalog_options(catalog: str, endpoint: str) -> dict[str, str]:
    """The catalog's own credential (its SigV4 client key), and no static S3 key: the data's
    credentials come from the catalog."""
    options = rest_catalog_options(catalog, endpoint, f"t_{uuid.uuid4().hex[:10]}")
    return {k: v for k, v in options.items()
            if k not in ("catalog.s3.access-key-id", "catalog.s3.secret-access-key")}


@pytest.fixture
def cfg(seaweedfs_catalog, vending, monkeypatch):
    endpoint = seaweedfs_catalog[0]
    monkeypatch.setenv("ICEBERG_TEST_SECRET", DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    bucket = create_bucket(endpoint, f"vended-{uuid.uuid4().hex[:8]}")
    return iceberg_config(f"s3://{bucket}/out", fs_options={"endpoint_url": endpoint, **WRONG},
                          table_options=catalog_options(vending[1], endpoint))


def test_the_output_s_own_credentials_are_refused_by_the_store(cfg):
    """The premise: without the catalog's credentials, nothing reaches the bucket."""
    with pytest.raises(RotsinkError):
        check_access(open_storage(cfg.path, cfg.fs_options))


def test_before_the_table_exists_a_staged_creation_vends_and_creates_nothing(cfg, vending):
    from pyiceberg.exceptions import NoSuchTableError

    from commit_protocol.tables.iceberg.table import IcebergFollowedTable

    given = with_vended_credentials(cfg, SCHEMA_JSON)
    assert given.fs_options["key"] == vending[0].key
    assert given.fs_options["secret"] == vending[0].secret
    assert given.fs_options["endpoint_url"] == cfg.fs_options["endpoint_url"]
    check_access(open_storage(given.path, given.fs_options))  # the store takes them
    table = IcebergFollowedTable(open_storage(cfg.path).root_uri, cfg)
    with pytest.raises(NoSuchTableError):
        table.catalog.load_table(table.identifier)
    assert vending[0].vended == 1 and all(vending[0].asked)


def test_batches_are_written_and_committed_with_the_vended_credentials(cfg, vending, caplog):
    """The commits (driver) and the task (its config, as the plan carries it) write with
    what the catalog vended; the table lists exactly the finalized files; the log says
    credentials were vended, never what they are, and a config's repr leaves them out."""
    with caplog.at_level("INFO", logger="rotsink.table"):
        given = with_vended_credentials(cfg, SCHEMA_JSON)
        for batch_id in range(4):
            commit_batch(given, batch_id)
    table = table_of(given)
    assert table.scan().to_arrow().num_rows > 0
    assert vending[0].vended >= 2  # the staged creation, and the loads since
    assert "vended storage credentials for" in caplog.text
    assert vending[0].secret not in caplog.text and "fs_options" not in repr(given)


def test_a_session_token_and_its_expiry_are_taken_as_vended():
    """STS credentials as Polaris vends them (a session token, an expiry), read from the
    table's file IO properties; what the catalog's own properties set is not vended.
    (SeaweedFS refuses session tokens it did not issue: this part is checked alone.)"""
    io = {"s3.endpoint": "http://127.0.0.1:1", "s3.access-key-id": "ASIA1",
          "s3.secret-access-key": "s1", "s3.session-token": "t1",
          "s3.session-token-expires-at-ms": "1796313199861"}
    found = vended._vended({"s3.endpoint": "http://127.0.0.1:1"}, io)
    assert found.fs_options == {"key": "ASIA1", "secret": "s1", "token": "t1"}
    assert found.expires_ms == 1796313199861
    static = {k: v for k, v in io.items() if k != "s3.session-token-expires-at-ms"}
    assert vended._vended(static, static).fs_options == {}


def test_credentials_are_asked_for_again_before_they_expire(cfg, vending):
    """Credentials valid an hour are kept for the next micro-batch; with less than five
    minutes left they are asked for again, and the new ones used."""
    with_vended_credentials(cfg, SCHEMA_JSON)
    with_vended_credentials(cfg, SCHEMA_JSON)
    assert vending[0].vended == 1
    vending[0].ttl_s = 60  # what the catalog vends next expires within the margin
    vended.forget()
    with_vended_credentials(cfg, SCHEMA_JSON)
    with_vended_credentials(cfg, SCHEMA_JSON)
    assert vending[0].vended == 3
    vending[0].key, vending[0].ttl_s = "rotated", 3600
    rotated = with_vended_credentials(cfg, SCHEMA_JSON)
    assert rotated.fs_options["key"] == "rotated" and vending[0].vended == 4


def test_a_catalog_that_vends_nothing_leaves_the_fs_options_as_given(cfg, seaweedfs_catalog):
    plain = dataclasses.replace(cfg, table_options=catalog_options(seaweedfs_catalog[1],
                                                                   seaweedfs_catalog[0]))
    assert with_vended_credentials(plain, SCHEMA_JSON) == plain


def test_a_catalog_that_stages_no_table_leaves_the_fs_options_until_the_table_exists(
        cfg, monkeypatch, caplog):
    """A REST catalog without staged creation: the query starts with its fs.* options (the
    store then says whether they do), and asks again at the next micro-batch."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import BadRequestError

    def refused(*args, **kwargs):
        raise BadRequestError("stage-create is not supported")

    with monkeypatch.context() as patched, caplog.at_level("INFO", logger="rotsink.table"):
        patched.setattr(RestCatalog, "create_table_transaction", refused)
        assert with_vended_credentials(cfg, SCHEMA_JSON) == cfg
    assert "staged no table" in caplog.text
    assert with_vended_credentials(cfg, SCHEMA_JSON).fs_options["key"] != WRONG["key"]
