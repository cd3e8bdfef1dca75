"""The sink's committed state, kept in each metadata log file as an ``isDir`` entry.

Spark's readers skip ``isDir`` entries and ignore unknown JSON fields, so one atomic log file
commits both the finalized files (the entries Spark reads) and rotsink's own state (which
in-progress file each slot appends to, and up to which byte it is committed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

STATE_VERSION = 1

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

    @property
    def added_columns(self) -> frozenset[str]:
        """Paths of the columns schema changes added (``schema.evolution``): files written
        before a change lack them."""
        from commit_protocol.schema_evolution import added_paths

        return added_paths(self.extra)

    def slots(self) -> dict[Slot, InProgressFile]:
        return {f.slot: f for f in self.in_progress}

    def with_batch(self, batch_id: int, in_progress: list[InProgressFile]) -> SinkState:
        ordered = tuple(sorted(in_progress, key=lambda f: f.slot))
        return replace(self, batch_id=batch_id, in_progress=ordered)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["version"] = STATE_VERSION
        body["partition_by"] = list(self.partition_by)
        body["in_progress"] = [asdict(f) for f in self.in_progress]
        del body["publish"], body["open_partitions"], body["markers"], body["appended"]
        body["extra"] = {**self.extra, "publish": [p.to_json() for p in self.publish]}
        body["extra"]["appended"] = list(self.appended)
        if self.open_partitions or self.markers:
            body["extra"]["partitions"] = {"open": [list(p) for p in self.open_partitions],
                                           "markers": list(self.markers)}
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SinkState:
        version = body.get("version")
        if version != STATE_VERSION:
            raise ValueError(f"expected rotsink state version {STATE_VERSION}, found "
                             f"{version!r}: written by another (newer?) rotsink; read and "
                             "write this path with that version")
        extra = dict(body.get("extra", {}))
        publish = extra.pop("publish", [])
        partitions = extra.pop("partitions", {})
        appended = extra.pop("appended", [0, 0, 0])
        return cls(
            batch_id=int(body["batch_id"]),
            query_id=body["query_id"],
            schema_json=body["schema_json"],
            format=body["format"],
            compression=body["compression"],
            partition_by=tuple(body["partition_by"]),
            compact_interval=int(body["compact_interval"]),
            in_progress=tuple(InProgressFile(**f) for f in body["in_progress"]),
            extra=extra,
            encrypted=bool(body.get("encrypted", False)),
            publish=tuple(Publish.from_json(row) for row in publish),
            open_partitions=tuple((str(d), int(t)) for d, t in partitions.get("open", [])),
            markers=tuple(str(d) for d in partitions.get("markers", [])),
            appended=(int(appended[0]), int(appended[1]), int(appended[2])),
        )
