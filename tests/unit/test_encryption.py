"""The appendable encryption container and key references: tampering, wrong keys, secrecy."""

from __future__ import annotations

import base64
import os
import struct

import pytest

from commit_protocol.crypto.keys import KeyRefs, derive_key_id, resolve_key
from commit_protocol.crypto.sealed import FLAG_DATA, Sealer, open_sealed
from commit_protocol.vocabulary.errors import EncryptionKeyError, IntegrityError

KEY, OTHER = bytes(range(32)), bytes(range(1, 33))
RING = {"k1": KEY}


def sealed_file(chunks: list[bytes], *, final: bool = True, key_id: str = "k1",
                key: bytes = KEY) -> bytes:
    """A file as the writer builds it: header, one append per chunk (after reopens), FINAL."""
    sealer = Sealer.new_file(key_id, key)
    data = sealer.header
    for chunk in chunks:
        resumed = Sealer.resume(data, {key_id: key}, path="f")  # each append after a reopen
        data += resumed.seal(chunk, len(data))
    return data + (Sealer.resume(data, {key_id: key}, path="f").final(len(data)) if final else b"")


def record_spans(data: bytes) -> list[tuple[int, int]]:
    header_len = len(Sealer.resume(data, RING, path="f").header)
    spans, offset = [], header_len
    while offset < len(data):
        length, _ = struct.unpack_from(">IB", data, offset)
        end = offset + 5 + 12 + length
        spans.append((offset, end))
        offset = end
    return spans


def test_appends_after_reopen_decode_to_the_plaintext():
    data = sealed_file([b"a" * 10, b"", b"b" * 5, b"c" * (5 << 20)])  # the last spans 2 records
    assert open_sealed(data, RING, path="f", require_final=True) == \
        b"a" * 10 + b"b" * 5 + b"c" * (5 << 20)


def test_committed_prefix_reads_without_final():
    full = sealed_file([b"one", b"two"], final=False)
    first_end = record_spans(full)[0][1]
    assert open_sealed(full[:first_end], RING, path="f", require_final=False) == b"one"


def _flip(data: bytes) -> bytes:
    b = bytearray(data)
    b[record_spans(data)[0][0] + 25] ^= 0x01
    return bytes(b)


def _swap(data: bytes) -> bytes:
    (a0, a1), (b0, b1), *_ = record_spans(data)
    return data[:a0] + data[b0:b1] + data[a0:a1] + data[b1:]


def _delete(data: bytes) -> bytes:
    (a0, a1), *_ = record_spans(data)
    return data[:a0] + data[a1:]


def _cut_at_boundary(data: bytes) -> bytes:
    return data[:record_spans(data)[-1][0]]  # drop the FINAL record exactly


def _splice(data: bytes) -> bytes:
    other = sealed_file([b"evil", b"two"])
    (a0, a1), *_ = record_spans(data)
    (o0, o1), *_ = record_spans(other)
    return data[:a0] + other[o0:o1] + data[a1:]


def _append_after_final(data: bytes) -> bytes:
    return data + data[slice(*record_spans(data)[0])]


@pytest.mark.parametrize("tamper, message", [
    (_flip, "record at byte \\d+ fails authentication"),
    (_swap, "record at byte \\d+ fails authentication"),
    (_delete, "record at byte \\d+ fails authentication"),
    (_splice, "record at byte \\d+ fails authentication"),
    (_cut_at_boundary, "ends without its FINAL record"),
    (lambda d: d[:-3], "cut short"),
    (_append_after_final, "data after the FINAL record"),
    (lambda d: b"XXXX" + d[4:], "not a rotsink encrypted file"),
], ids=["bit-flip", "swapped-records", "deleted-record", "spliced-from-another-file",
        "cut-at-record-boundary", "cut-mid-record", "record-after-final", "bad-magic"])
def test_tampering_is_an_error_naming_the_file(tamper, message):
    data = sealed_file([b"one", b"two", b"three"])
    with pytest.raises(IntegrityError, match=f"^part-7.enc: .*{message}"):
        open_sealed(tamper(data), RING, path="part-7.enc", require_final=True)


def test_wrong_key_and_unknown_key_id_say_so():
    data = sealed_file([b"x"])
    with pytest.raises(EncryptionKeyError, match="part-1: wrong key for key id 'k1'"):
        open_sealed(data, {"k1": OTHER}, path="part-1", require_final=True)
    with pytest.raises(EncryptionKeyError, match="key id 'k1'; no configured key has that id "
                                                 "\\(configured: k2\\)"):
        open_sealed(data, {"k2": KEY}, path="part-1", require_final=True)


def test_records_carry_random_nonces():
    """Two seals of the same data at the same offset never repeat a nonce (no reuse on retry)."""
    sealer = Sealer.new_file("k1", KEY)
    a, b = sealer.seal(b"same", 100), sealer.seal(b"same", 100)
    assert a[5:17] != b[5:17] and a[4] == FLAG_DATA


@pytest.mark.parametrize("encode", [lambda k: base64.b64encode(k).decode(), bytes.hex],
                         ids=["base64", "hex"])
def test_key_references_resolve_from_env_and_file(tmp_path, monkeypatch, encode):
    monkeypatch.setenv("ROTSINK_K", encode(KEY) + "\n")
    (tmp_path / "key").write_text(encode(KEY))
    assert resolve_key("env:ROTSINK_K", option="encryption.key") == KEY
    assert resolve_key(f"file:{tmp_path / 'key'}", option="encryption.key") == KEY


@pytest.mark.parametrize("reference, setup, message", [
    ("env:NOPE_NOT_SET", None, "option encryption.key='env:NOPE_NOT_SET': environment variable "
                               "'NOPE_NOT_SET' is not set"),
    ("file:/nonexistent/key", None, "cannot read key file '/nonexistent/key'"),
    ("env:SHORT_KEY", "AAAA", "is not a 32-byte key in base64 or hex"),
    ("c2VjcmV0", None, "expected a key reference env:... or file:... \\(key bytes are never"),
], ids=["unset-env", "missing-file", "short-key", "raw-bytes-refused"])
def test_bad_key_references_name_the_option_not_the_value(monkeypatch, reference, setup, message):
    if setup is not None:
        monkeypatch.setenv("SHORT_KEY", setup)
    with pytest.raises(EncryptionKeyError, match=message) as caught:
        resolve_key(reference, option="encryption.key")
    assert "AAAA" not in str(caught.value) or reference == "AAAA"


def test_ring_holds_old_keys_for_reading_after_rotation(monkeypatch):
    new, old = os.urandom(32), os.urandom(32)
    monkeypatch.setenv("NEW_K", new.hex())
    monkeypatch.setenv("OLD_K", old.hex())
    refs = KeyRefs.from_options({"encryption.key": "env:NEW_K",
                                 "encryption.keys": "legacy=env:OLD_K, env:OLD_K"})
    assert refs is not None
    ring = refs.ring()
    assert ring == {derive_key_id(new): new, "legacy": old, derive_key_id(old): old}
    assert "NEW_K" in repr(refs) and new.hex() not in repr(refs)  # references only
