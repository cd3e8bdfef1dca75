"""What a task tells the driver: frozen, picklable, checked against storage before commit."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FileReport:
    """One part file a task wrote to.

    Bytes ``[start, end)`` of ``temp`` are this task's; ``[0, start)`` were committed before
    (copied from ``fenced_from`` when the task could not prove it was the file's only writer).
    ``records`` counts the whole file; ``closed`` says the task rolled it, for ``reason``
    (None: a size or record limit, told apart by the records). A rolled staged file of a bulk
    format was encoded into the finished file ``final_temp`` of ``final_size`` bytes, which
    the commit publishes instead of ``temp``; ``final_footer`` is that file's Parquet footer
    (a table that follows the log takes its statistics from it).
    """

    partition: int
    directory: str
    name: str
    temp: str
    start: int
    end: int
    records: int
    new_records: int
    closed: bool
    fenced_from: str | None = None
    reason: str | None = None
    final_temp: str | None = None
    final_size: int = 0
    final_footer: bytes | None = None

    @property
    def slot(self) -> tuple[int, str]:
        return (self.partition, self.directory)


@dataclass(frozen=True)
class PlanBasis:
    """The committed state a batch was planned from, as its tasks received it.

    The planning (``streamWriter()`` on the driver) recovered the log and read its latest
    state; the commit of the same batch continues from that state instead of listing and
    reading the log again: nothing else writes the path between the two (one writer per
    path, and every step of the commit is an exclusive create that a second writer fails).
    ``compact_interval`` is the path's (None for a new path: the query's option).
    """

    latest_batch_id: int | None
    state_id: str
    compact_interval: int | None


@dataclass(frozen=True)
class TaskReport:
    """A task's commit message: the files it touched in micro-batch ``batch_id``.

    ``skipped`` is set when the batch was already committed (a replay): the task wrote nothing.
    ``claimed`` says the task won its (batch, partition) claim: no other attempt of it could
    append in place to the partition's committed in-progress files. ``basis`` is the state
    the task was planned from (None when its plan was not read from the log).
    ``time_zone`` is the zone the task's timestamp partition columns arrived in (Spark's
    session zone, which names their directories), None without one. With
    ``errors.mode=quarantine``, ``quarantined`` are the files of the quarantine the task
    wrote the rows it refused to, and ``refused`` counts those rows by reason.
    """

    batch_id: int
    partition: int
    attempt: int
    query_id: str
    files: tuple[FileReport, ...] = ()
    skipped: bool = False
    claimed: bool = False
    basis: PlanBasis | None = None
    time_zone: str | None = None
    quarantined: tuple[FileReport, ...] = ()
    refused: tuple[tuple[str, int], ...] = ()


def planned_basis(messages: list[TaskReport | None]) -> PlanBasis | None:
    """The state every task of the batch was planned from; None when the reports carry none
    (made without a plan read from the log) or, which one planning cannot give, several."""
    bases = {m.basis for m in messages if m is not None}
    return bases.pop() if len(bases) == 1 else None
