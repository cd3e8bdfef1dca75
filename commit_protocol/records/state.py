"""The sink's committed state, kept in each metadata log file as an ``isDir`` entry.

Spark's readers skip ``isDir`` entries and ignore unknown JSON fields, so one atomic log file
commits both the finalized files (the entries Spark reads) and rotsink's own state (which
in-progress file each slot appends to, and up to which byte it is committed).

In the log, a state is a *head* (:meth:`SinkState.head_json`: the small fields, and the
in-progress files and open partitions that changed since the batch before) and, in a
compaction file, a *snapshot* of those two whole (:meth:`SinkState.snapshot_json`);
:class:`StateHead` reads a head back, and ``MetadataLog.state_of`` puts the whole together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from commit_protocol.vocabulary.partition_terms import PartitionTerm

STATE_VERSION = 2
# extra's key for hidden partitioning's terms: [[name, source, transform], ...]
PARTITION_TERMS = "partition_terms"


def terms_extra(terms: tuple[PartitionTerm, ...]) -> dict[str, Any]:
    """What a first state's ``extra`` records of ``terms`` (nothing without hidden ones)."""
    return {PARTITION_TERMS: [[t.name, t.source, t.transform] for t in terms]} if terms else {}
"""Version 2: a log file carries the changes of the grown parts (in-progress files, open
partitions) since the batch before, a compaction file also the whole of them; version 1 (read,
never written) carried everything in every log file."""

Slot = tuple[int, str]
"""A slot: a Spark task partition id and an output directory (partition values)."""


@dataclass(frozen=True)
class InProgressFile:
    """A part file that is committed up to ``size`` bytes and not yet finalized.

    ``opened_ms`` and ``last_append_ms`` are driver commit times (one clock for every rule).
    """

    partition: int
    directory: str
    name: str
    temp: str
    size: int
    records: int
    batches: int
    opened_ms: int
    last_append_ms: int

    @property
    def slot(self) -> Slot:
        return (self.partition, self.directory)


@dataclass(frozen=True)
class Publish:
    """A rename that the commit of a batch performs: temp file ``temp`` becomes the finalized
    file ``name`` of ``size`` bytes, rolled for ``reason`` (``maxBytes``, ``inactivity``, ...).

    Kept in the log file as ``[temp, name, size, reason]`` under ``extra.publish``, so that a
    commit cut short after its intent is finished by the next driver exactly as decided.
    """

    temp: str
    name: str
    size: int
    reason: str

    def to_json(self) -> list[Any]:
        return [self.temp, self.name, self.size, self.reason]

    @classmethod
    def from_json(cls, row: list[Any]) -> Publish:
        temp, name, size, reason = row
        return cls(str(temp), str(name), int(size), str(reason))


@dataclass(frozen=True)
class SinkState:
    """Everything committed about the sink as of ``batch_id`` besides the finalized files."""

    batch_id: int
    query_id: str
    schema_json: str
    format: str
    compression: str
    partition_by: tuple[str, ...]
    compact_interval: int
    in_progress: tuple[InProgressFile, ...] = field(default=())
    extra: dict[str, Any] = field(default_factory=dict)  # fields of newer writers, kept as read
    encrypted: bool = False
    publish: tuple[Publish, ...] = ()  # the renames this batch's commit performs
    # partition.commitDelay: directories that got rows and have no marker yet, with the
    # commit time of their last rows; and the directories whose marker this batch writes.
    open_partitions: tuple[tuple[str, int], ...] = ()
    markers: tuple[str, ...] = ()
    # what this batch's tasks appended: (tasks, rows, bytes); for `rotsink inspect`
    appended: tuple[int, int, int] = (0, 0, 0)
    # A random id per decided state: the next batch's head names it (``after``), so a chain
    # of heads is checked link by link and a cached state is recognised. "" for states
    # written before heads (version 1).
    state_id: str = ""
    # the query's .queryName(...) when this batch was committed ("" for an unnamed query,
    # and in logs written before names were kept)
    query_name: str = ""

    @property
    def partition_terms(self) -> tuple[PartitionTerm, ...]:
        """The ``partitionBy`` terms under hidden partitioning (``days(ts)``, kept in
        ``extra``: a rotsink before them keeps them as read); empty without."""
        return tuple(PartitionTerm(*term) for term in self.extra.get(PARTITION_TERMS, ()))

    @property
    def all_terms(self) -> tuple[PartitionTerm, ...]:
        """Every partition term in order, identity columns as terms of their own."""
        return self.partition_terms or tuple(PartitionTerm(c, c) for c in self.partition_by)

    @property
    def partitioned_by(self) -> tuple[str, ...]:
        """``partitionBy``'s terms as given: ``days(ts)``, ``region`` (for people)."""
        return tuple(t.ddl for t in self.partition_terms) or self.partition_by

    @property
    def added_columns(self) -> frozenset[str]:
        """Paths of the columns schema changes added (``schema.evolution``): files written
        before a change lack them."""
        from commit_protocol.records.schema_evolution import added_paths

        return added_paths(self.extra)

    def slots(self) -> dict[Slot, InProgressFile]:
        # (not f.slot: a commit builds this for every open file, several times)
        return {(f.partition, f.directory): f for f in self.in_progress}

    def with_batch(self, batch_id: int, in_progress: list[InProgressFile]) -> SinkState:
        return replace(self, batch_id=batch_id, in_progress=_in_slot_order(in_progress))

    # -- in the log ----------------------------------------------------------------------
    def head_json(self, previous: SinkState | None) -> dict[str, Any]:
        """The state as a log file's second line carries it: every field, but of the
        in-progress files and open partitions (the parts that grow with the output) only
        what changed since ``previous`` (None: since nothing, as batch 0)."""
        body = self._fields_json()
        body["after"] = None if previous is None else previous.state_id
        before = {} if previous is None else previous.slots()
        now = self.slots()
        body["in_progress"] = {  # most files are the very objects of ``previous``
            "set": [_file_row(f) for slot, f in now.items()
                    if (b := before.get(slot)) is not f and b != f],
            "drop": [list(slot) for slot in before if slot not in now]}
        opened = dict(previous.open_partitions) if previous is not None else {}
        current = dict(self.open_partitions)
        body["extra"]["partitions"] = {
            "set": [[d, t] for d, t in current.items() if opened.get(d) != t],
            "drop": [d for d in opened if d not in current],
            "markers": list(self.markers)}
        return body

    def snapshot_json(self) -> dict[str, Any]:
        """The grown parts whole, as a compaction file's third line carries them."""
        return {"id": self.state_id, "batch_id": self.batch_id,
                "in_progress": [_file_row(f) for f in self.in_progress],
                "open": [list(p) for p in self.open_partitions]}

    def _fields_json(self) -> dict[str, Any]:
        extra: dict[str, Any] = {**self.extra, "publish": [p.to_json() for p in self.publish],
                                 "appended": list(self.appended)}
        return {"version": STATE_VERSION, "id": self.state_id, "batch_id": self.batch_id,
                "query_id": self.query_id, "query_name": self.query_name,
                "schema_json": self.schema_json,
                "format": self.format, "compression": self.compression,
                "partition_by": list(self.partition_by),
                "compact_interval": self.compact_interval, "encrypted": self.encrypted,
                "extra": extra}


@dataclass(frozen=True)
class StateHead:
    """A log file's second line, read: ``state`` is whole when ``whole`` (a version 1
    state, which carried everything), else its in-progress files and open partitions are
    the changes since the state named ``after`` (None: since nothing), still to apply."""

    state: SinkState
    whole: bool
    after: str | None = None
    dropped: tuple[Slot, ...] = ()
    closed: tuple[str, ...] = ()  # open partitions no longer open
    snapshot: bool = False  # the third line holds the grown parts whole (a compaction)

    def applied_to(self, previous: SinkState | None) -> SinkState:
        """The whole state: ``previous`` (the state named ``after``) with the changes."""
        if self.whole:
            return self.state
        files = {} if previous is None else previous.slots()
        for slot in self.dropped:
            files.pop(slot, None)
        files.update(self.state.slots())
        partitions = {} if previous is None else dict(previous.open_partitions)
        for directory in self.closed:
            partitions.pop(directory, None)
        partitions.update(self.state.open_partitions)
        return replace(self.state, in_progress=_in_slot_order(files.values()),
                       open_partitions=tuple(sorted(partitions.items())))

    def with_snapshot(self, body: dict[str, Any]) -> SinkState:
        """The whole state, from the snapshot line of the same log file."""
        if body.get("id") != self.state.state_id or body.get("batch_id") != self.state.batch_id:
            raise ValueError(f"the snapshot (id {body.get('id')!r}, batch "
                             f"{body.get('batch_id')!r}) is not this head's (id "
                             f"{self.state.state_id!r}, batch {self.state.batch_id})")
        return replace(self.state,
                       in_progress=tuple(_file_of(row) for row in body["in_progress"]),
                       open_partitions=tuple((str(d), int(t)) for d, t in body["open"]))

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> StateHead:
        version = body.get("version")
        if version not in (1, STATE_VERSION):
            raise ValueError(f"expected rotsink state version 1 or {STATE_VERSION}, found "
                             f"{version!r}: written by another (newer?) rotsink; read and "
                             "write this path with that version")
        extra = dict(body.get("extra", {}))
        publish = extra.pop("publish", [])
        partitions = extra.pop("partitions", {})
        appended = extra.pop("appended", [0, 0, 0])
        whole = version == 1
        state = SinkState(
            batch_id=int(body["batch_id"]),
            query_id=body["query_id"],
            query_name=str(body.get("query_name", "")),
            schema_json=body["schema_json"],
            format=body["format"],
            compression=body["compression"],
            partition_by=tuple(body["partition_by"]),
            compact_interval=int(body["compact_interval"]),
            in_progress=tuple(InProgressFile(**f) for f in body["in_progress"]) if whole
            else tuple(_file_of(row) for row in body["in_progress"]["set"]),
            extra=extra,
            encrypted=bool(body.get("encrypted", False)),
            publish=tuple(Publish.from_json(row) for row in publish),
            open_partitions=tuple((str(d), int(t)) for d, t in
                                  partitions.get("open" if whole else "set", [])),
            markers=tuple(str(d) for d in partitions.get("markers", [])),
            appended=(int(appended[0]), int(appended[1]), int(appended[2])),
            state_id=str(body.get("id", "")),
        )
        if whole:
            return cls(state, whole=True)
        after = body["after"]
        return cls(state, whole=False, after=None if after is None else str(after),
                   dropped=tuple((int(p), str(d)) for p, d in body["in_progress"]["drop"]),
                   closed=tuple(str(d) for d in partitions.get("drop", [])),
                   snapshot=bool(body.get("snapshot", False)))


_SLOT_ORDER = attrgetter("partition", "directory")


def _in_slot_order(files: Iterable[InProgressFile]) -> tuple[InProgressFile, ...]:
    """Files by slot: what a state holds (sorting is linear when, as after most commits,
    they are in order but for a few)."""
    return tuple(sorted(files, key=_SLOT_ORDER))


_FILE_FIELDS = ("partition", "directory", "name", "temp", "size", "records", "batches",
                "opened_ms", "last_append_ms")


def _file_row(f: InProgressFile) -> list[Any]:
    """An in-progress file as a row of :data:`_FILE_FIELDS` (no key per field: a snapshot of
    20,000 files is 40% smaller, and parses faster, than as objects)."""
    return [f.partition, f.directory, f.name, f.temp, f.size, f.records, f.batches,
            f.opened_ms, f.last_append_ms]


def _file_of(row: list[Any]) -> InProgressFile:
    if len(row) != len(_FILE_FIELDS):
        raise ValueError(f"an in-progress file row has {len(row)} fields, expected "
                         f"{len(_FILE_FIELDS)} ({', '.join(_FILE_FIELDS)})")
    p, d, name, temp, size, records, batches, opened, last = row
    return InProgressFile(int(p), str(d), str(name), str(temp), int(size), int(records),
                          int(batches), int(opened), int(last))
