"""How far a long check has come: ``rotsink verify`` over a big lake (sizes of every listed
file; with ``--deep`` every committed byte decoded) reports its steps to a
:class:`Progress`, which the command line draws on a terminal (and nowhere else)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Step:
    """One step of a check: ``what`` it does, files and bytes done of the totals."""

    what: str
    files: int
    total_files: int
    bytes: int
    total_bytes: int


class Progress(Protocol):
    def __call__(self, step: Step) -> None: ...


def no_progress(step: Step) -> None:
    """Report nothing (the default: a library call, a pipe)."""
