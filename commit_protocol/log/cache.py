"""Whole states of recent batches, kept in this process (see :class:`_StateCache`)."""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import replace

from commit_protocol.records.state import SinkState


class _StateCache:
    """Whole states of recent batches, by (output path, batch id), in this process.

    Spark runs a query's planning and its commits in two long-lived Python workers on the
    driver: each finds there the state it read or committed for the batch before. An entry
    is used only when a head names its id, so a path rewritten meanwhile is read again.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._states: OrderedDict[tuple[str, int], SinkState] = OrderedDict()

    def get(self, root_uri: str, batch_id: int, state_id: str) -> SinkState | None:
        state = self._states.get((root_uri, batch_id))
        if state is None or not state.state_id or state.state_id != state_id:
            return None
        self._states.move_to_end((root_uri, batch_id))
        return replace(state, extra=copy.deepcopy(state.extra))  # callers own what they get

    def put(self, root_uri: str, state: SinkState) -> None:
        if not state.state_id:
            return
        self._states[(root_uri, state.batch_id)] = state
        self._states.move_to_end((root_uri, state.batch_id))
        while len(self._states) > self.size:
            self._states.popitem(last=False)

    def clear(self) -> None:
        self._states.clear()

    def __len__(self) -> int:
        return len(self._states)


STATES = _StateCache()
