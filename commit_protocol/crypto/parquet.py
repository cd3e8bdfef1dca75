"""Parquet Modular Encryption (PME) with rotsink's key ring, readable by Spark's own reader.

A *key ring* maps a short ASCII key id (``"k1"``) to a 32-byte AES-256 master key. Every
Parquet file is encrypted uniformly (all columns and the footer) under a fresh data key
that pyarrow's ``CryptoFactory`` draws per file; the data key is *wrapped* with the master
key named ``footer_key_id`` and stored in the footer's key material, together with that id.
Readers look the id up in their own ring, so a ring holding an old and a new key reads
files written under either (key rotation).

The wrap format is exactly that of parquet-mr's ``KeyToolkit.encryptKeyLocally(dataKey,
masterKey, AAD)`` as its ``InMemoryKMS`` calls it, so the JVM client shipped in
``datasource/spark/jvm/RotsinkKeyRingKms.java`` unwraps what this module wraps and vice versa::

    wrapped = base64(nonce[12] || AES-GCM(masterKey, nonce, AAD=utf8(keyId), dataKey) || tag[16])

(standard Base64 alphabet, with padding; parquet-mr's ``AesGcmEncryptor.encrypt(false, ...)``
writes no length prefix.)

Master key bytes never leave the ring except as AES keys: no error message, ``repr`` or
``KmsConnectionConfig`` carries them, and the file holds only wrapped data keys.

Runs on executors (``encryption_properties`` once per written file) and wherever files are
read. Imports no pyspark; ``pyarrow.parquet.encryption`` is imported on first use.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from commit_protocol.vocabulary.errors import (
    KeyRingError,
    UnknownKeyIdError,
    WrongKeyError,
)

if TYPE_CHECKING:
    import pyarrow.parquet as pq
    import pyarrow.parquet.encryption as pe

__all__ = [
    "KeyRingError", "UnknownKeyIdError", "WrongKeyError", "decryption_properties",
    "encryption_properties",
]

MASTER_KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # parquet-mr AesCipher.NONCE_LENGTH
TAG_BYTES = 16  # parquet-mr AesCipher.GCM_TAG_LENGTH
ENCRYPTION_ALGORITHM = "AES_GCM_V1"  # what Spark's parquet-mr reader and pyarrow both take
# Characters a key id cannot hold: parquet-mr's key list "id1:b64, id2:b64" splits on them.
_FORBIDDEN_ID_CHARS = frozenset(":, \t\r\n")
# Rings seen by this process; a streaming query has one, rotation adds a second.
_MAX_CACHED_FACTORIES = 8





class _KeyRing:
    """Key id -> master key bytes, whose ``repr`` shows the ids only.

    Lives inside the KMS client that pyarrow calls back, so anything that prints the client
    or its attributes (a debugger, a traceback with locals) sees no key bytes.
    """

    __slots__ = ("_keys",)

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        self._keys = dict(keys)

    def ids(self) -> list[str]:
        return sorted(self._keys)

    def get(self, key_id: str) -> bytes:
        try:
            return self._keys[key_id]
        except KeyError:
            raise UnknownKeyIdError(
                f"master key id {key_id!r} is not in the key ring; the ring holds "
                f"{self.ids()}") from None

    def __repr__(self) -> str:
        return f"_KeyRing(ids={self.ids()})"

    def __reduce__(self) -> Any:
        # Pickling would copy the key bytes somewhere unplanned; callers pickle the dict.
        raise TypeError("a _KeyRing is not picklable; ship the key mapping itself")


def _check_key_ring(keys: Mapping[str, bytes]) -> None:
    """Fail unless every key id is short printable ASCII and every key is 32 bytes.

    Raises
    ------
    KeyRingError
        Naming the key id and what was expected (never the key bytes).

    Examples
    --------
    >>> _check_key_ring({"k1": b"short"})
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.KeyRingError: master key 'k1' is 5 bytes; \
expected 32 (AES-256)
    """
    if not keys:
        raise KeyRingError("the key ring is empty; expected at least one key id -> 32-byte key")
    for key_id, key in keys.items():
        if (not isinstance(key_id, str) or not key_id or not key_id.isascii()
                or not key_id.isprintable() or _FORBIDDEN_ID_CHARS & set(key_id)):
            raise KeyRingError(f"key id {key_id!r}: expected a non-empty printable ASCII string "
                               "without ':', ',' or whitespace")
        if not isinstance(key, (bytes, bytearray)) or len(key) != MASTER_KEY_BYTES:
            is_bytes = isinstance(key, (bytes, bytearray))
            size = f"{len(key)} bytes" if is_bytes else type(key).__name__
            raise KeyRingError(f"master key {key_id!r} is {size}; expected "
                               f"{MASTER_KEY_BYTES} (AES-256)")


def _wrap_data_key(data_key: bytes, master_key: bytes, key_id: str) -> str:
    """Encrypt ``data_key`` as parquet-mr's ``KeyToolkit.encryptKeyLocally`` does.

    AES-GCM under ``master_key`` with a random 12-byte nonce and the key id's UTF-8 bytes
    as AAD; returns ``base64(nonce || ciphertext || tag)``.
    """
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(NONCE_BYTES)
    sealed = AESGCM(master_key).encrypt(nonce, data_key, key_id.encode("utf-8"))
    return base64.b64encode(nonce + sealed).decode("ascii")


def _unwrap_data_key(wrapped: str, master_key: bytes, key_id: str) -> bytes:
    """Invert :func:`_wrap_data_key` (and parquet-mr's ``encryptKeyLocally``).

    Raises
    ------
    WrongKeyError
        When the GCM tag does not verify: the key under ``key_id`` is not the one the file
        was written with, or the wrapped key is corrupt.
    """
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        blob = base64.b64decode(wrapped, validate=True)
    except (binascii.Error, ValueError) as e:
        raise WrongKeyError(f"the wrapped data key for master key id {key_id!r} is not "
                            "valid base64; the file's key material is corrupt") from e
    if len(blob) <= NONCE_BYTES + TAG_BYTES:
        raise WrongKeyError(f"the wrapped data key for master key id {key_id!r} is "
                            f"{len(blob)} bytes; expected more than "
                            f"{NONCE_BYTES + TAG_BYTES} (nonce + GCM tag)")
    try:
        return AESGCM(master_key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:],
                                          key_id.encode("utf-8"))
    except InvalidTag:
        # InvalidTag has no message; say which key failed, and never what it is.
        raise WrongKeyError(f"the key ring's master key for id {key_id!r} does not decrypt "
                            "this file: it was written with a different key under the same "
                            "id (or its key material is corrupt)") from None


def encryption_properties(keys: Mapping[str, bytes],
                          footer_key_id: str) -> pq.FileEncryptionProperties:
    """Properties that encrypt one Parquet file under the ring's key ``footer_key_id``.

    Uniform encryption (every column and the footer, with ``AES_GCM_V1``), single wrapping,
    key material inside the file. Each call draws a fresh data key, so call it once per
    file. Runs on executors; the ring arrives there as a pickled dict.

    Parameters
    ----------
    keys : Mapping[str, bytes]
        The key ring: key id -> 32-byte AES-256 master key.
    footer_key_id : str
        The id of the master key that wraps this file's data key.

    Returns
    -------
    pyarrow.parquet.FileEncryptionProperties
        For ``pq.ParquetWriter(..., encryption_properties=...)``.

    Raises
    ------
    UnknownKeyIdError
        When ``footer_key_id`` is not in the ring (a ``ValueError``).
    KeyRingError
        When the ring is malformed.
    """
    import pyarrow.parquet.encryption as pe

    factory = _crypto_factory(keys)
    if footer_key_id not in keys:
        raise UnknownKeyIdError(f"footer_key_id {footer_key_id!r} is not in the key ring; "
                                f"the ring holds {sorted(keys)}")
    config = pe.EncryptionConfiguration(
        footer_key=footer_key_id, uniform_encryption=True,
        encryption_algorithm=ENCRYPTION_ALGORITHM, plaintext_footer=False,
        double_wrapping=False, internal_key_material=True)
    return factory.file_encryption_properties(pe.KmsConnectionConfig(), config)


def decryption_properties(keys: Mapping[str, bytes]) -> pq.FileDecryptionProperties:
    """Properties that decrypt any file written under a key of the ring.

    The key id comes from each file's key material, so one object reads files written
    before and after a key rotation. Runs wherever files are read (driver or executor).

    Parameters
    ----------
    keys : Mapping[str, bytes]
        The key ring: key id -> 32-byte AES-256 master key.

    Returns
    -------
    pyarrow.parquet.FileDecryptionProperties
        For ``pq.ParquetFile(..., decryption_properties=...)`` or ``pq.read_table``.
        Opening a file then raises :class:`UnknownKeyIdError` when its key id is not in
        the ring and :class:`WrongKeyError` when the ring's key for it is not the right one.

    Raises
    ------
    KeyRingError
        When the ring is malformed.
    """
    import pyarrow.parquet.encryption as pe

    factory = _crypto_factory(keys)
    return factory.file_decryption_properties(pe.KmsConnectionConfig())


_FACTORIES: dict[bytes, pe.CryptoFactory] = {}
_FACTORIES_LOCK = threading.Lock()
# A per-process secret salt: the cache key identifies a ring within this process but is no
# offline-checkable hash of the key bytes.
_RING_SALT = os.urandom(32)


def _ring_fingerprint(keys: Mapping[str, bytes]) -> bytes:
    digest = hashlib.blake2b(key=_RING_SALT, digest_size=16)
    for key_id in sorted(keys):
        encoded = key_id.encode("utf-8")
        digest.update(len(encoded).to_bytes(4, "big") + encoded + bytes(keys[key_id]))
    return digest.digest()


def _crypto_factory(keys: Mapping[str, bytes]) -> pe.CryptoFactory:
    """One ``CryptoFactory`` per distinct ring, reused across files.

    pyarrow caches KMS clients inside a factory, so a factory must never outlive its ring
    with different keys: hence one per ring fingerprint rather than one global.
    """
    _check_key_ring(keys)
    fingerprint = _ring_fingerprint(keys)
    factory = _FACTORIES.get(fingerprint)
    if factory is not None:
        return factory
    factory = _new_factory(_KeyRing(keys))
    with _FACTORIES_LOCK:
        if len(_FACTORIES) >= _MAX_CACHED_FACTORIES:
            _FACTORIES.pop(next(iter(_FACTORIES)))
        return _FACTORIES.setdefault(fingerprint, factory)


def _new_factory(ring: _KeyRing) -> pe.CryptoFactory:
    import pyarrow.parquet.encryption as pe

    client_class = _kms_client_class()
    # The connection config carries nothing: the ring is captured by the closure.
    return pe.CryptoFactory(lambda _config: client_class(ring))


_CLIENT_CLASS: type | None = None


def _kms_client_class() -> type:
    """The ``KmsClient`` subclass, defined on first use so the module imports no pyarrow."""
    global _CLIENT_CLASS
    if _CLIENT_CLASS is None:
        import pyarrow.parquet.encryption as pe

        class KeyRingKmsClient(pe.KmsClient):
            """Wraps and unwraps data keys locally with the ring's master keys."""

            def __init__(self, ring: _KeyRing) -> None:
                super().__init__()
                self._ring = ring

            def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> str:
                return _wrap_data_key(key_bytes, self._ring.get(master_key_identifier),
                                     master_key_identifier)

            def unwrap_key(self, wrapped_key: str, master_key_identifier: str) -> bytes:
                return _unwrap_data_key(wrapped_key, self._ring.get(master_key_identifier),
                                       master_key_identifier)

            def __repr__(self) -> str:
                return f"KeyRingKmsClient({self._ring!r})"

        _CLIENT_CLASS = KeyRingKmsClient
    return _CLIENT_CLASS
