"""Parquet Modular Encryption with the key ring, without Spark: round trips, wrong and unknown
keys, rotation, the parquet-mr wrap format, and that no form of a master key reaches the file."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commit_protocol.crypto.parquet import (
    _crypto_factory,
    _KeyRing,
    _kms_client_class,
    _unwrap_data_key,
    _wrap_data_key,
    decryption_properties,
    encryption_properties,
)
from commit_protocol.vocabulary.errors import KeyRingError, UnknownKeyIdError, WrongKeyError

UTC = dt.timezone.utc

OLD, NEW = bytes(range(32)), bytes(range(100, 132))
RING = {"k1": OLD}

# parquet-mr 1.17's KeyToolkit.encryptKeyLocally(dataKey=bytes 100..115, masterKey=bytes
# 0..31, AAD=UTF-8 "k1"), as InMemoryKMS calls it; produced by running that method once.
PARQUET_MR_WRAPPED = "J3XWwxThEZvqLcqfq9OUjBSOLquW7EPDTX0szrdWyIQdnaXWIoVAWLuCBrw="


def sample_table() -> pa.Table:
    return pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "f": pa.array([0.5, None, -1e300], pa.float64()),
        "s": pa.array(["a", None, "ü€😀"], pa.string()),
        "b": pa.array([True, False, None], pa.bool_()),
        "bin": pa.array([b"\x00\xff", b"", None], pa.binary()),
        "d": pa.array([dt.date(2024, 2, 29), None, dt.date(1970, 1, 1)], pa.date32()),
        "ts": pa.array([dt.datetime(2024, 1, 1, 12, tzinfo=UTC), None,
                        dt.datetime(1900, 1, 1, tzinfo=UTC)], pa.timestamp("us", "UTC")),
        "dec": pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-99999999.99")],
                        pa.decimal128(10, 2)),
        "tags": pa.array([["x", "y"], [], None], pa.list_(pa.string())),
        "pt": pa.array([{"x": 1, "y": "p"}, None, {"x": None, "y": None}],
                       pa.struct([("x", pa.int32()), ("y", pa.string())])),
    })


def write_encrypted(keys: dict[str, bytes], footer_key_id: str,
                    table: pa.Table | None = None) -> bytes:
    table = sample_table() if table is None else table
    sink = io.BytesIO()
    props = encryption_properties(keys, footer_key_id)
    with pq.ParquetWriter(sink, table.schema, encryption_properties=props) as writer:
        writer.write_table(table)
    return sink.getvalue()


def read_decrypted(data: bytes, keys: dict[str, bytes]) -> pa.Table:
    return pq.ParquetFile(pa.BufferReader(data),
                          decryption_properties=decryption_properties(keys)).read()


def test_round_trip_of_several_column_types():
    assert read_decrypted(write_encrypted(RING, "k1"), RING).equals(sample_table())


def test_reading_without_decryption_properties_fails():
    with pytest.raises(OSError, match="no decryption found"):
        pq.ParquetFile(pa.BufferReader(write_encrypted(RING, "k1"))).read()


def test_wrong_key_under_the_same_id_says_it_does_not_decrypt():
    data = write_encrypted(RING, "k1")
    with pytest.raises(WrongKeyError, match="master key for id 'k1' does not decrypt this file"):
        read_decrypted(data, {"k1": NEW})


def test_wrong_key_message_survives_pq_read_table():
    # read_table goes through the dataset API and its thread pool, not ParquetFile.
    data = write_encrypted(RING, "k1")
    with pytest.raises(WrongKeyError, match="'k1' does not decrypt"):
        pq.read_table(pa.BufferReader(data), decryption_properties=decryption_properties(
            {"k1": NEW}))


def test_unknown_key_id_names_it_and_the_configured_ids():
    data = write_encrypted(RING, "k1")
    with pytest.raises(UnknownKeyIdError,
                       match=r"master key id 'k1' is not in the key ring; the ring holds "
                             r"\['k2', 'k3'\]"):
        read_decrypted(data, {"k2": NEW, "k3": OLD})


def test_footer_key_id_not_in_the_ring_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"footer_key_id 'k9' is not in the key ring; "
                                         r"the ring holds \['k1'\]"):
        encryption_properties(RING, "k9")


def test_rotation_ring_with_old_and_new_key_reads_files_under_either():
    before, after = write_encrypted({"k1": OLD}, "k1"), write_encrypted({"k2": NEW}, "k2")
    ring = {"k1": OLD, "k2": NEW}
    assert read_decrypted(before, ring).equals(sample_table())
    assert read_decrypted(after, ring).equals(sample_table())
    with pytest.raises(UnknownKeyIdError, match="'k1' is not in the key ring"):
        read_decrypted(before, {"k2": NEW})  # the old key retired too early


def test_writing_with_either_key_of_a_rotation_ring():
    ring = {"k1": OLD, "k2": NEW}
    assert read_decrypted(write_encrypted(ring, "k2"), {"k2": NEW}).equals(sample_table())
    assert read_decrypted(write_encrypted(ring, "k1"), {"k1": OLD}).equals(sample_table())


def key_forms(key: bytes) -> list[bytes]:
    b64 = base64.b64encode(key)
    return [key, b64, b64.rstrip(b"="), base64.urlsafe_b64encode(key), base64.b32encode(key),
            key.hex().encode(), key.hex().upper().encode()]


def test_file_holds_no_form_of_the_master_key():
    data = write_encrypted({"k1": OLD, "k2": NEW}, "k2")
    for key in (OLD, NEW):
        for form in key_forms(key):
            assert form not in data, f"a {len(form)}-byte form of a master key is in the file"
    assert b'"masterKeyID":"k2"' in data.replace(b" ", b"")  # only the id, in key material


def test_errors_and_reprs_hold_no_form_of_the_master_key():
    data = write_encrypted(RING, "k1")
    with pytest.raises(WrongKeyError) as wrong:
        read_decrypted(data, {"k1": NEW})
    with pytest.raises(KeyRingError) as bad_ring:
        encryption_properties({"k1": NEW[:16]}, "k1")
    client = _kms_client_class()(_KeyRing({"k1": NEW}))
    texts = [str(wrong.value), repr(wrong.value), str(bad_ring.value), repr(client),
             repr(_KeyRing({"k1": NEW}))]
    for text in texts:
        for form in key_forms(NEW):
            assert form.decode("latin-1") not in text
    assert repr(client) == "KeyRingKmsClient(_KeyRing(ids=['k1']))"
    with pytest.raises(TypeError, match="ship the key mapping itself"):
        pickle.dumps(_KeyRing({"k1": NEW}))


def test_plaintext_files_still_read_with_decryption_properties():
    # pyarrow's CryptoFactory allows plaintext files (so does parquet-mr's): decryption
    # properties do not prove a file was encrypted; a reader must not take them as such.
    sink = io.BytesIO()
    pq.write_table(sample_table(), sink)
    assert read_decrypted(sink.getvalue(), RING).equals(sample_table())


@pytest.mark.parametrize("keys, message", [
    pytest.param({}, "the key ring is empty", id="empty ring: nothing to wrap with"),
    pytest.param({"k1": OLD[:16]}, "master key 'k1' is 16 bytes; expected 32",
                 id="AES-128 key: the ring is AES-256 only"),
    pytest.param({"k1": "00" * 32}, "master key 'k1' is str; expected 32",
                 id="hex text instead of bytes"),
    pytest.param({"a:b": OLD}, "key id 'a:b'", id="colon: breaks parquet-mr's key list"),
    pytest.param({"a,b": OLD}, "key id 'a,b'", id="comma: separates key list entries"),
    pytest.param({"a b": OLD}, "key id 'a b'", id="space: trimmed by the JVM parser"),
    pytest.param({"": OLD}, "key id ''", id="empty id"),
    pytest.param({"kü": OLD}, "key id 'kü'", id="non-ASCII id"),
])
def test_malformed_ring_is_rejected_naming_the_key_id(keys, message):
    with pytest.raises(KeyRingError, match=message):
        decryption_properties(keys)


def test_unwraps_what_parquet_mr_wrapped():
    assert _unwrap_data_key(PARQUET_MR_WRAPPED, bytes(range(32)), "k1") == bytes(range(100, 116))


def test_wrap_format_is_nonce_ciphertext_tag_in_standard_base64():
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    data_key = bytes(range(16))
    wrapped = _wrap_data_key(data_key, OLD, "k1")
    blob = base64.b64decode(wrapped, validate=True)
    assert len(blob) == 12 + len(data_key) + 16
    assert AESGCM(OLD).decrypt(blob[:12], blob[12:], b"k1") == data_key
    assert _wrap_data_key(data_key, OLD, "k1") != wrapped  # a fresh nonce each time


@pytest.mark.parametrize("wrapped, message", [
    pytest.param("not base64!", "not valid base64", id="garbage"),
    pytest.param(base64.b64encode(b"\x00" * 28).decode(), "28 bytes; expected more than 28",
                 id="nonce and tag only"),
])
def test_corrupt_wrapped_key_is_a_wrong_key_error(wrapped, message):
    with pytest.raises(WrongKeyError, match=message):
        _unwrap_data_key(wrapped, OLD, "k1")


def test_aad_binds_the_key_id():
    wrapped = _wrap_data_key(bytes(16), OLD, "k1")
    with pytest.raises(WrongKeyError, match="'k2' does not decrypt"):
        _unwrap_data_key(wrapped, OLD, "k2")  # same key bytes filed under another id


def test_factory_is_reused_per_ring_and_not_across_changed_keys():
    assert _crypto_factory({"k1": OLD}) is _crypto_factory(dict(RING))
    # Same id, new bytes: a cached KMS client must not answer with the old key.
    assert _crypto_factory({"k1": NEW}) is not _crypto_factory({"k1": OLD})
    assert read_decrypted(write_encrypted({"k1": NEW}, "k1"), {"k1": NEW}).num_rows == 3
