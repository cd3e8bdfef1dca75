"""Damage done by hand to files on local disk, for the hostile-input and verify tests."""

from __future__ import annotations

from pathlib import Path


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
