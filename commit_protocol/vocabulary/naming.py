"""Names of part files and partition directories.

Final names are replay-stable: ``<prefix>-<partition>-<batch>-<roll><suffix>`` where
``partition`` is the Spark task partition id, ``batch`` the micro-batch that opened the file
and ``roll`` the index of the file among those the slot opened in that batch. A replay of the
batch therefore produces the same names, and a retried publish recognises its own file.
Temp names carry a random token instead, so that no two attempts ever share a fresh file.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from urllib.parse import unquote

DEFAULT_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"
STATE_DIR = "_rotsink"
INPROGRESS_DIR = f"{STATE_DIR}/inprogress"
CLAIMS_DIR = f"{STATE_DIR}/claims"
INTENT_DIR = f"{STATE_DIR}/intent"
LOG_DIR = "_spark_metadata"

# Spark's ExternalCatalogUtils.charToEscape: these characters are written as %XX in
# partition directory names (so "a/b" and "../x" stay inside their directory).
_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | frozenset(chr(c) for c in range(1, 32))


def escape_partition_value(value: str | None) -> str:
    """Escape a partition value as Spark does.

    >>> escape_partition_value("a/b=c")
    'a%2Fb%3Dc'
    >>> escape_partition_value("")
    '__HIVE_DEFAULT_PARTITION__'
    """
    if value is None or value == "":
        return DEFAULT_PARTITION_NAME
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in value)


def unescape_partition_value(text: str) -> str | None:
    """Inverse of :func:`escape_partition_value` (``None`` for the default partition)."""
    if text == DEFAULT_PARTITION_NAME:
        return None
    return unquote(text)


def partition_dir(columns: tuple[str, ...], values: tuple[str | None, ...]) -> str:
    """``col1=v1/col2=v2`` for the given values, both names and values escaped.

    >>> partition_dir(("day", "kind"), ("2024-01-01", "../x"))
    'day=2024-01-01/kind=..%2Fx'
    """
    return "/".join(
        f"{escape_partition_value(c)}={escape_partition_value(v)}"
        for c, v in zip(columns, values, strict=True)
    )


def parse_partition_dir(directory: str) -> dict[str, str | None]:
    """``{"day": "2024-01-01", "kind": "../x"}`` from ``day=2024-01-01/kind=..%2Fx``."""
    values: dict[str, str | None] = {}
    for part in filter(None, directory.split("/")):
        name, _, value = part.partition("=")
        values[unquote(name)] = unescape_partition_value(value)
    return values


def final_name(*, directory: str, prefix: str, partition: int, batch: int, roll: int,
               suffix: str) -> str:
    """Relative final path of a part file.

    >>> final_name(directory="day=1", prefix="part", partition=3, batch=12, roll=0, suffix=".jsonl")
    'day=1/part-00003-000012-000.jsonl'
    """
    name = f"{prefix}-{partition:05d}-{batch:06d}-{roll:03d}{suffix}"
    return f"{directory}/{name}" if directory else name


_FINAL = re.compile(r"-\d{5}-\d{6}-\d{3}(\.[^/]*)?$")


def is_final_name(path: str) -> bool:
    """Whether ``path`` is named as rotsink names a finalized file (:func:`final_name`),
    unlike other writers' files of a shared table (delta-rs, Spark, Iceberg: uuids).

    >>> is_final_name("day=1/part-00003-000012-000.jsonl")
    True
    >>> is_final_name("day=1/part-00000-47612dd6-397f-4d79-9c75-7502b29c0523-c000.zstd.parquet")
    False
    >>> is_final_name("day=1/00000-0-4f2c6a52-1c3d-4b9f-9b7e-2a6f2b1e0c11.parquet")
    False
    """
    return _FINAL.search(path.rsplit("/", 1)[-1]) is not None


def temp_name(final: str) -> str:
    """A fresh hidden temp path for ``final``: unique per call, never visible to readers."""
    base = final.rsplit("/", 1)[-1]
    return f"{INPROGRESS_DIR}/.{base}.{uuid.uuid4().hex[:12]}.inprogress"


def claim_path(batch_id: int, what: str) -> str:
    """The claim marker for ``what`` in batch ``batch_id``: whoever creates it exclusively
    may append to the file in place (a task for its slot, the driver for a FINAL record).

    >>> claim_path(12, "slot:3:day=1")
    '_rotsink/claims/000012-5ecb9c68dceea05a'
    """
    digest = hashlib.sha1(what.encode()).hexdigest()[:16]
    return f"{CLAIMS_DIR}/{batch_id:06d}-{digest}"


def partition_claim(batch_id: int, partition: int) -> str:
    """The claim of task partition ``partition`` in batch ``batch_id``: its holder (one task
    attempt, or the driver at commit) is the only one that may append in place to that
    partition's committed in-progress files in that batch.

    >>> partition_claim(12, 3)
    '_rotsink/claims/000012-p00003'
    """
    return f"{CLAIMS_DIR}/{batch_id:06d}-p{partition:05d}"


SUCCESS = "_SUCCESS"  # Hadoop's job-success marker name, hidden from Spark's listings


def success_marker(directory: str) -> str:
    """The partition-complete marker of ``directory`` (``""``: the output's root).

    >>> success_marker("day=2024-01-01"), success_marker("")
    ('day=2024-01-01/_SUCCESS', '_SUCCESS')
    """
    return f"{directory}/{SUCCESS}" if directory else SUCCESS
