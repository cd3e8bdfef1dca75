"""Encryption keys from *references*, never from option values.

An option names where a key lives (``env:VAR`` or ``file:/path``); the referenced value is a
32-byte AES-256 key written in base64 or hex. Options, the plan, the log and the checkpoint
only ever hold the reference: the bytes are resolved where they are used (the driver at start
and commit, each executor task, each reader), so they are never pickled to executors either.
On a cluster the reference must resolve on every executor (``spark.executorEnv.VAR`` or a
file present on every node).

Every file records the *key id* of the key that encrypted it, so a key can be rotated: write
with the new key and keep the old one among the reading keys (``encryption.keys``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass

from commit_protocol.vocabulary.errors import EncryptionKeyError

KEY_BYTES = 32
_PROVIDERS = ("env:", "file:")


def resolve_key(reference: str, *, option: str) -> bytes:
    """The 32 key bytes ``reference`` points to.

    Errors name the option and the reference, never the value found there.

    >>> import os; os.environ["DOC_KEY"] = "00" * 32
    >>> len(resolve_key("env:DOC_KEY", option="encryption.key"))
    32
    """
    text = _lookup(reference.strip(), option=option)
    key = _decode(text.strip())
    if key is None:
        raise EncryptionKeyError(
            f"option {option}={reference!r}: the referenced value is not a {KEY_BYTES}-byte key "
            f"in base64 or hex (generate one with: python -c \"import os,base64; "
            f"print(base64.b64encode(os.urandom(32)).decode())\")")
    return key


def _lookup(reference: str, *, option: str) -> str:
    if reference.startswith("env:"):
        name = reference[len("env:"):]
        value = os.environ.get(name)
        if not name or value is None:
            raise EncryptionKeyError(f"option {option}={reference!r}: environment variable "
                                     f"{name!r} is not set (on an executor: set it with "
                                     f"spark.executorEnv.{name})")
        return value
    if reference.startswith("file:"):
        path = reference[len("file:"):]
        try:
            with open(path, encoding="ascii") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise EncryptionKeyError(f"option {option}={reference!r}: cannot read key file "
                                     f"{path!r} ({type(e).__name__})") from None
    raise EncryptionKeyError(f"option {option}={reference!r}: expected a key reference "
                             f"{' or '.join(p + '...' for p in _PROVIDERS)} (key bytes are "
                             "never accepted as an option value)")


def _decode(text: str) -> bytes | None:
    for decode in (bytes.fromhex, lambda t: base64.b64decode(t, validate=True)):
        try:
            key = decode(text)
        except (ValueError, binascii.Error):
            continue
        if len(key) == KEY_BYTES:
            return key
    return None


def derive_key_id(key: bytes) -> str:
    """A short public id for ``key``: a keyed hash that reveals nothing about the key.

    >>> derive_key_id(bytes(32))
    'k8c7337823e'
    """
    return "k" + hmac.new(key, b"rotsink key id", hashlib.sha256).hexdigest()[:10]


@dataclass(frozen=True)
class KeyRefs:
    """Where the keys are: the writing key (with its id) and extra reading keys.

    Holds references only; safe to pickle, print and put in a plan.
    """

    write_ref: str | None = None
    write_id: str | None = None
    read_refs: tuple[str, ...] = ()

    def write_key(self) -> tuple[str, bytes]:
        """(key id, key bytes) of the writing key."""
        if self.write_ref is None:
            raise EncryptionKeyError("option encryption.key is not set")
        key = resolve_key(self.write_ref, option="encryption.key")
        return self.write_id or derive_key_id(key), key

    def ring(self) -> dict[str, bytes]:
        """Every configured key by id: the writing key and each ``id=ref`` or ``ref`` of
        ``encryption.keys`` (a bare reference gets its derived id)."""
        ring: dict[str, bytes] = {}
        if self.write_ref is not None:
            key_id, key = self.write_key()
            ring[key_id] = key
        for item in self.read_refs:
            # "id=env:VAR" names the id; in a bare "file:/a=b" the "=" is part of the path
            key_id, _, ref = item.partition("=") if "=" in item.split(":", 1)[0] else ("", "", item)
            key = resolve_key(ref, option="encryption.keys")
            ring.setdefault(key_id or derive_key_id(key), key)
        return ring

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KeyRefs | None:
        """From (lower-cased) options; None when no key is configured."""
        write_ref = options.get("encryption.key") or None
        write_id = options.get("encryption.keyid") or None
        read_refs = tuple(r.strip() for r in options.get("encryption.keys", "").split(",")
                          if r.strip())
        if write_id is not None and write_ref is None:
            raise EncryptionKeyError(f"option encryption.keyId={write_id!r} needs "
                                     "encryption.key")
        if write_id is not None and not _is_plain_id(write_id):
            raise EncryptionKeyError(f"option encryption.keyId={write_id!r}: expected 1 to 64 "
                                     "characters of letters, digits, '-', '_' or '.'")
        if write_ref is None and not read_refs:
            return None
        return cls(write_ref, write_id, read_refs)


def _is_plain_id(key_id: str) -> bool:
    return 0 < len(key_id) <= 64 and all(c.isalnum() or c in "-_." for c in key_id) \
        and key_id.isascii()


def ring_ids(ring: Mapping[str, bytes]) -> str:
    """The ids of a ring for messages (never the keys)."""
    return ", ".join(sorted(ring)) or "none"
