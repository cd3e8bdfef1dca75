"""One line of the metadata log: Spark's ``SinkFileStatus`` as JSON, written and checked.

The sink's own lines are recognised by a strict pattern and read or copied without the JSON
parser (compaction is linear in the log, so its constant matters); every other line -- the
state entry, a hand edit, another writer's spacing -- is parsed and checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.uris import EntryPaths

BLOCK_SIZE = 33554432  # what Hadoop's local filesystem reports; Spark ignores it for reading
CHUNK = 1 << 20  # log bytes handed to storage per write: flat memory, few calls


def _entry_pattern(group: bytes) -> bytes:
    """A finalized entry line exactly as ``dumps(file_entry(...))`` writes it; ``group``
    opens its five field groups (``(`` captures them, ``(?:`` does not).

    json.dumps escapes everything outside printable ASCII, so such a line is valid JSON with a
    string path and a byte count: it is read or compacted without the JSON parser (several
    times faster). Any other line -- the state entry, a hand edit, another writer's spacing --
    goes through ``parse_entry``.
    """
    plain = rb'[\x20\x21\x23-\x5b\x5d-\x7e]*'  # printable ASCII but '"' and '\'
    number = group + rb'0|[1-9][0-9]*)'
    return (rb'\{"path":"' + group + plain + rb'(?:\\(?:["\\bfnrt]|u[0-9a-f]{4})' + plain
            + rb')*)","size":' + number + rb',"isDir":false,"modificationTime":' + number
            + rb',"blockReplication":' + number + rb',"blockSize":' + number
            + rb',"action":"add"\}\n')


OWN_ENTRY = re.compile(_entry_pattern(b"("))
OWN_BLOCK = re.compile(b"(?:" + _entry_pattern(b"(?:") + b")*")  # checked in one match

def file_entry(uri: str, size: int, mtime_ms: int) -> dict[str, Any]:
    """A finalized file as Spark's ``SinkFileStatus`` (all seven fields, ``action: add``)."""
    return {"path": uri, "size": size, "isDir": False, "modificationTime": mtime_ms,
            "blockReplication": 1, "blockSize": BLOCK_SIZE, "action": "add"}


def dumps(entry: dict[str, Any]) -> bytes:
    return (json.dumps(entry, separators=(",", ":")) + "\n").encode()


def joined(lines: Iterable[bytes]) -> Iterator[bytes]:
    """``lines`` concatenated into chunks of about ``CHUNK`` bytes."""
    chunk: list[bytes] = []
    size = 0
    for line in lines:
        chunk.append(line)
        size += len(line)
        if size >= CHUNK:
            yield b"".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


def kept_lines(path: str, first: int, block: bytes, oldest: int | None,
               paths: EntryPaths) -> Iterator[bytes]:
    """The finalized entries of ``block`` modified at ``oldest`` or later, as compaction
    writes them: own lines as they are (but an earlier version's paths as this one writes
    them, :meth:`EntryPaths.canonical_lines`), others parsed and rewritten. Errors name line
    ``first`` + i for the block's i-th line."""
    lines = [line + b"\n" for line in block.split(b"\n")]
    lines[-1] = lines[-1][:-1]  # what followed the last newline: b"", or a cut last line
    for number, raw in enumerate(filter(None, lines), start=first):
        own = OWN_ENTRY.fullmatch(raw)
        if own is not None:
            if oldest is None or int(own[3]) >= oldest:
                yield paths.canonical_lines(raw)
            continue
        entry = parse_entry(path, number, raw)
        if not entry.get("isDir") and (
                oldest is None or entry.get("modificationTime", oldest) >= oldest):
            yield dumps({**entry, "path": paths.canonical(entry["path"])})


def parse_line(path: str, number: int, raw: bytes) -> dict[str, Any]:
    """``parse_entry``, without the JSON parser for the sink's own entries (escape-free)."""
    own = OWN_ENTRY.fullmatch(raw)
    if own is None or b"\\" in own[1]:
        return parse_entry(path, number, raw)
    return {"path": own[1].decode("ascii"), "size": int(own[2]), "isDir": False,
            "modificationTime": int(own[3]), "blockReplication": int(own[4]),
            "blockSize": int(own[5]), "action": "add"}


def parse_entry(path: str, number: int, raw: bytes) -> dict[str, Any]:
    try:
        entry = json.loads(raw)
    except ValueError as e:
        raise CorruptLogError(f"metadata log file {path} line {number} is not JSON "
                              f"({e}): {raw[:80]!r}") from e
    if not (isinstance(entry, dict) and isinstance(entry.get("path"), str)
            and type(entry.get("size")) is int and entry["size"] >= 0):
        raise CorruptLogError(f"metadata log file {path} line {number}: expected an entry "
                              f"with a string 'path' and a byte count 'size', found {raw[:80]!r}")
    return entry
