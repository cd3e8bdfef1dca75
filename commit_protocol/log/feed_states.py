"""The states a change feed reads, kept ``feed.retention`` after their log files are gone.

A change feed (``commit_protocol/reading/change_feed.py``) reads the state of every sink
batch it has not read yet; the log clean-up deletes a batch's log file ``log.cleanupDelay``
after a newer compaction. A feed paused longer (a consumer's cluster restarted, a weekend)
would find the states gone. Keeping the log files longer is no answer: Spark's readers and
every commit list ``_spark_metadata/``, which would then hold a file per batch of the whole
retention (600,000 for a week of one-second batches).

So with ``feed.retention`` set, the clean-up first copies the whole states of the batches
whose log files it deletes into one segment under ``_rotsink/feed/`` (a clean-up runs
after every compaction: ``log.compactInterval`` batches a segment, gzipped), named by its
first and last batch and the time it was written. A feed that finds a log file gone reads
the state from the segment that holds it. Segments older than the retention are deleted by the
clean-up too: it lists ``_rotsink/feed/`` (a name per segment: bounded by the retention)
at most once every hundredth of the retention, so a segment lives from ``feed.retention``
to 1% longer. A segment written twice (a clean-up killed between the segment and the
deletes, then run again) holds the same states: any copy does.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

from commit_protocol.records.state import SinkState, StateHead
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.naming import STATE_DIR

FEED_DIR = f"{STATE_DIR}/feed"
_SEGMENT = re.compile(r"(\d{20})-(\d{20})-(\d+)\.json\.gz$")
# the output's clean-ups in this process: when each next lists the segments (epoch ms)
_NEXT_SWEEP: dict[str, int] = {}


def segment_name(first: int, last: int, written_ms: int) -> str:
    """
    >>> segment_name(10, 19, 1700000000000)
    '_rotsink/feed/00000000000000000010-00000000000000000019-1700000000000.json.gz'
    """
    return f"{FEED_DIR}/{first:020d}-{last:020d}-{written_ms}.json.gz"


def segment_range(path: str) -> tuple[int, int, int] | None:
    """(first batch, last batch, written ms) of a segment's path; None for another file.

    >>> segment_range('_rotsink/feed/00000000000000000010-00000000000000000019-17.json.gz')
    (10, 19, 17)
    """
    found = _SEGMENT.search(path)
    return None if found is None else (int(found[1]), int(found[2]), int(found[3]))


def _whole_json(state: SinkState) -> dict[str, Any]:
    """``state`` as a whole (version 1) state: its in-progress files and open partitions
    all there, needing no other log file to read."""
    body = state.head_json(None)
    body.pop("after")
    body["version"] = 1
    body["in_progress"] = [asdict(f) for f in state.in_progress]
    body["extra"]["partitions"] = {"open": [list(p) for p in state.open_partitions],
                                   "markers": list(state.markers)}
    return body


def keep_states(storage: Storage, states: list[SinkState], *, now_ms: int) -> str | None:
    """Write the segment of ``states`` (batches the clean-up is about to delete the log files
    of); its path, None when there is nothing to keep."""
    if not states:
        return None
    ordered = sorted(states, key=lambda s: s.batch_id)
    path = segment_name(ordered[0].batch_id, ordered[-1].batch_id, now_ms)
    body = "".join(json.dumps(_whole_json(s), separators=(",", ":")) + "\n" for s in ordered)
    try:
        # gzip: consecutive states repeat their schema and most fields (a segment of ten
        # states of a two-file query: 1.3 kB, measured in benchmarks/log_growth.py)
        storage.write_exclusive(path, [gzip.compress(body.encode(), mtime=0)])
    except FileExistsError:
        pass  # the same clean-up's segment, in the same millisecond: the same states
    return path


class _ReadSegments:
    """The segments this process read lately, whole, by output: a feed catching up reads
    the batches of a segment one after another, so the segment is read once for all of
    them, and the listing once for all the segments it names (a segment never changes, and
    the listing is read again when it does not name the batch wanted)."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.listed: dict[str, list[tuple[int, int, str]]] = {}  # root -> (first, last, path)
        self.states: OrderedDict[str, dict[int, SinkState]] = OrderedDict()  # path -> states

    def state(self, storage: Storage, batch_id: int, *, relist: bool) -> SinkState | None:
        root = storage.root_uri
        if relist or root not in self.listed:
            self.listed[root] = sorted(
                (found[0], found[1], info.path) for info in storage.list(FEED_DIR)
                if (found := segment_range(info.path)))
        for first, last, path in self.listed[root]:
            if first <= batch_id <= last:
                states = self._read(storage, path)
                if batch_id in states:
                    return states[batch_id]
        return None

    def _read(self, storage: Storage, path: str) -> dict[int, SinkState]:
        key = f"{storage.root_uri}/{path}"
        if key in self.states:
            self.states.move_to_end(key)
            return self.states[key]
        try:
            data = storage.read(path)
        except FileNotFoundError:
            return {}  # deleted since the listing (expired): another may hold the batch
        try:
            text = gzip.decompress(data).decode()
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise CorruptLogError(f"change-feed segment {path}: {type(e).__name__}: {e}") from e
        states = {}
        for number, line in enumerate(text.splitlines(), start=1):
            try:
                state = StateHead.from_json(json.loads(line)).state
            except (ValueError, KeyError, TypeError) as e:
                raise CorruptLogError(f"change-feed segment {path}, line {number}: "
                                      f"{type(e).__name__}: {e}") from e
            states[state.batch_id] = state
        self.states[key] = states
        while len(self.states) > self.size:
            self.states.popitem(last=False)
        return states


_READ = _ReadSegments()


def kept_state(storage: Storage, batch_id: int) -> SinkState | None:
    """The state of ``batch_id`` from the segment that keeps it; None when none does."""
    found = _READ.state(storage, batch_id, relist=False)
    return found if found is not None else _READ.state(storage, batch_id, relist=True)


def delete_expired_segments(storage: Storage, *, retention_ms: int, now_ms: int) -> list[str]:
    """Delete the segments written more than ``retention_ms`` ago, listing them at most once
    every hundredth of the retention (per output and process); what was deleted."""
    root = storage.root_uri
    if now_ms < _NEXT_SWEEP.get(root, 0):
        return []
    _NEXT_SWEEP[root] = now_ms + retention_ms // 100
    expired = [info for info in storage.list(FEED_DIR)
               if (found := segment_range(info.path)) and found[2] < now_ms - retention_ms]
    storage.delete_all(expired)
    return [info.path for info in expired]
