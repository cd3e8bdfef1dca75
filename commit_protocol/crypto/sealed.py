"""An appendable, authenticated encryption container for row-format part files.

Streaming AEAD formats (Tink, age) cannot be appended to after a reopen without reusing
nonces, so rotsink seals each append as independent records::

    header  = b"RSE1" | u8 version | u8 len(key_id) | key_id | 16-byte salt | 16-byte key check
    record  = u32 len(sealed) | u8 flags | 12-byte random nonce | sealed
    sealed  = AES-256-GCM(file_key, nonce, plaintext, aad = header | u64 offset | u8 flags)
    file_key = HKDF-SHA256(master key, salt, info = b"rotsink file key" | key_id)

``offset`` is the record's byte offset in the file. Binding it (rather than a record index)
makes a moved, deleted, duplicated or spliced record fail authentication just as well, and a
writer resuming a file needs only the header and the committed length, not a scan. The
header binds the salt, so records spliced from another file fail too. The key check (an HMAC
of the salt) tells a wrong key from a damaged file. A finalized file ends with an empty
``FINAL`` record, so a finalized file cut at a record boundary is detected even without the
log; in-progress prefixes have none and rely on the log's committed length.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Iterator, Mapping
from typing import BinaryIO

from commit_protocol.crypto.keys import ring_ids
from commit_protocol.vocabulary.errors import EncryptionKeyError, IntegrityError

MAGIC = b"RSE1"
VERSION = 1
FLAG_DATA, FLAG_FINAL = 0, 1
_SALT, _CHECK, _NONCE, _TAG = 16, 16, 12, 16
_RECORD_HEAD = struct.Struct(">IB")  # sealed length, flags
RECORD_OVERHEAD = _RECORD_HEAD.size + _NONCE + _TAG
# Large enough that the 33-byte overhead and the per-call cost vanish, small enough that a
# reader never holds much more than one record beyond the data it returns.
MAX_RECORD_PLAINTEXT = 4 << 20
MAX_HEADER = len(MAGIC) + 2 + 255 + _SALT + _CHECK


def _file_key(master: bytes, salt: bytes, key_id: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt,
                info=b"rotsink file key" + key_id.encode()).derive(master)


def _key_check(master: bytes, salt: bytes) -> bytes:
    return hmac.new(master, b"rotsink key check" + salt, hashlib.sha256).digest()[:_CHECK]


class Sealer:
    """Seals appends to one file (executor, or the driver for a ``FINAL`` record)."""

    def __init__(self, header: bytes, file_key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.header = header
        self._aead = AESGCM(file_key)

    @classmethod
    def new_file(cls, key_id: str, master: bytes) -> Sealer:
        """A sealer for a new file: fresh random salt, header to write first."""
        raw_id = key_id.encode()
        salt = os.urandom(_SALT)
        header = (MAGIC + bytes([VERSION, len(raw_id)]) + raw_id + salt
                  + _key_check(master, salt))
        return cls(header, _file_key(master, salt, key_id))

    @classmethod
    def resume(cls, header_bytes: bytes, ring: Mapping[str, bytes], *, path: str) -> Sealer:
        """A sealer appending to an existing file whose first bytes are ``header_bytes``."""
        header, key_id, salt, master = parse_header(header_bytes, ring, path=path)
        return cls(header, _file_key(master, salt, key_id))

    def seal(self, data: bytes, offset: int) -> bytes:
        """``data`` as records starting at file offset ``offset`` (``b""`` for no data)."""
        view = memoryview(data)  # slices of a view, one join: no extra copies
        parts: list[bytes | memoryview] = []
        for start in range(0, len(data), MAX_RECORD_PLAINTEXT):
            head, sealed = self._record(view[start:start + MAX_RECORD_PLAINTEXT], offset,
                                        FLAG_DATA)
            parts += (head, sealed)
            offset += len(head) + len(sealed)
        return b"".join(parts)

    def final(self, offset: int) -> bytes:
        """The empty ``FINAL`` record that ends a finalized file at ``offset``."""
        return b"".join(self._record(b"", offset, FLAG_FINAL))

    def _record(self, plaintext: bytes | memoryview, offset: int,
                flags: int) -> tuple[bytes, bytes]:
        """(length, flags and nonce; the sealed bytes) of one record."""
        nonce = os.urandom(_NONCE)
        sealed = self._aead.encrypt(nonce, plaintext, _aad(self.header, offset, flags))
        return _RECORD_HEAD.pack(len(sealed), flags) + nonce, sealed


def _aad(header: bytes, offset: int, flags: int) -> bytes:
    return header + struct.pack(">QB", offset, flags)


def parse_header(data: bytes, ring: Mapping[str, bytes], *,
                 path: str) -> tuple[bytes, str, bytes, bytes]:
    """(header bytes, key id, salt, master key) of the file starting with ``data``."""
    if data[:len(MAGIC)] != MAGIC:
        raise IntegrityError(f"{path}: not a rotsink encrypted file (expected magic "
                             f"{MAGIC!r}, found {data[:len(MAGIC)]!r})")
    if len(data) < len(MAGIC) + 2:
        raise IntegrityError(f"{path}: encrypted file header is cut short")
    version, id_len = data[len(MAGIC)], data[len(MAGIC) + 1]
    if version != VERSION:
        raise IntegrityError(f"{path}: encryption format version {version}; this rotsink "
                             f"reads version {VERSION}")
    id_end = len(MAGIC) + 2 + id_len
    end = id_end + _SALT + _CHECK
    if len(data) < end:
        raise IntegrityError(f"{path}: encrypted file header is cut short")
    key_id = data[len(MAGIC) + 2:id_end].decode("ascii", "replace")
    salt, check = data[id_end:id_end + _SALT], data[id_end + _SALT:end]
    master = ring.get(key_id)
    if master is None:
        raise EncryptionKeyError(f"{path} was encrypted with key id {key_id!r}; no configured "
                                 f"key has that id (configured: {ring_ids(ring)}). Add it to "
                                 "encryption.keys")
    if not hmac.compare_digest(_key_check(master, salt), check):
        raise EncryptionKeyError(f"{path}: wrong key for key id {key_id!r} (the configured "
                                 "key does not match the one that encrypted the file)")
    return data[:end], key_id, salt, master


def open_sealed(data: bytes, ring: Mapping[str, bytes], *, path: str,
                require_final: bool) -> bytes:
    """The plaintext of a whole file (or a committed prefix), every record authenticated.

    ``require_final`` for finalized files: the last record must be ``FINAL``.
    """
    import io

    return b"".join(iter_plaintext(io.BytesIO(data), ring, path=path, end=len(data),
                                   require_final=require_final))


def iter_plaintext(source: BinaryIO, ring: Mapping[str, bytes], *, path: str, end: int,
                   start: int = 0, require_final: bool = False) -> Iterator[bytes]:
    """The plaintext of bytes ``[start, end)`` of a sealed file, record by record: a reader
    holds one record (at most :data:`MAX_RECORD_PLAINTEXT`) at a time, never the file.

    ``source`` is seekable: the header is read from byte 0, then the records from ``start``.
    Records are bound to their file offset, so a range that starts at a record boundary
    (every committed offset does) authenticates on its own. Removed, reordered or spliced
    records fail authentication; a range cut inside a record is reported as cut short;
    ``require_final`` (a finalized file read to its end) insists on the ``FINAL`` record.
    """
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    source.seek(0)
    header, key_id, salt, master = parse_header(source.read(min(MAX_HEADER, end)), ring,
                                                path=path)
    aead = AESGCM(_file_key(master, salt, key_id))
    offset = max(start, len(header))
    source.seek(offset)
    final_at = None
    while offset < end:
        flags, nonce, sealed = _next_record(source, offset, end, path)
        if final_at is not None:
            raise IntegrityError(f"{path}: data after the FINAL record at byte {final_at}")
        try:
            plaintext = aead.decrypt(nonce, sealed, _aad(header, offset, flags))
        except InvalidTag:
            raise IntegrityError(
                f"{path}: record at byte {offset} fails authentication: the file was "
                "modified, or records were reordered, removed or spliced in") from None
        if flags == FLAG_FINAL:
            final_at = offset
        if plaintext:
            yield plaintext
        offset += _RECORD_HEAD.size + _NONCE + len(sealed)
    if require_final and final_at is None:
        raise IntegrityError(f"{path}: finalized file ends without its FINAL record at byte "
                             f"{end}: it was cut short")


def _next_record(source: BinaryIO, offset: int, end: int, path: str
                 ) -> tuple[int, bytes, bytes]:
    """(flags, nonce, sealed bytes) of the record at ``offset``, read from ``source``."""
    head_size = _RECORD_HEAD.size + _NONCE
    head = source.read(head_size) if offset + head_size <= end else b""
    if len(head) < head_size:
        raise IntegrityError(f"{path}: record at byte {offset} is cut short")
    length, flags = _RECORD_HEAD.unpack_from(head)
    body = offset + head_size
    if flags not in (FLAG_DATA, FLAG_FINAL) or length < _TAG or body + length > end:
        raise IntegrityError(f"{path}: record at byte {offset} is damaged or cut short "
                             f"(flags {flags}, length {length})")
    sealed = source.read(length)
    if len(sealed) < length:
        raise IntegrityError(f"{path}: record at byte {offset} is cut short")
    return flags, head[_RECORD_HEAD.size:], sealed
