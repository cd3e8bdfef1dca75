"""What the driver hands every task of a micro-batch, so tasks never read the log."""

from __future__ import annotations

from dataclasses import dataclass, field

from commit_protocol.records.messages import PlanBasis
from commit_protocol.records.state import InProgressFile, SinkState, Slot


@dataclass(frozen=True)
class WritePlan:
    """The committed state as of planning: latest batch, owner, in-progress files by slot."""

    latest_batch_id: int | None
    query_id: str = ""
    query_name: str = ""
    in_progress: dict[Slot, InProgressFile] = field(default_factory=dict)
    root_uri: str = ""
    # This batch adds columns (schema.evolution) in a format that fixes its columns at the
    # file's head: the committed in-progress files are finished as they are (by the commit,
    # reason "schema") and tasks start new files instead of appending to them.
    retire_in_progress: bool = False
    # The state this plan was read from, returned in every task's report: the commit
    # continues it without reading the log again. None for a plan made by hand (tests).
    basis: PlanBasis | None = None

    @classmethod
    def from_state(cls, state: SinkState | None, root_uri: str, *,
                   retire_in_progress: bool = False) -> WritePlan:
        if state is None:
            return cls(latest_batch_id=None, root_uri=root_uri,
                       basis=PlanBasis(None, "", None))
        return cls(latest_batch_id=state.batch_id, query_id=state.query_id,
                   query_name=state.query_name,
                   in_progress=state.slots(), root_uri=root_uri,
                   retire_in_progress=retire_in_progress,
                   basis=PlanBasis(state.batch_id, state.state_id, state.compact_interval))

    def owner_message(self, query_id: str) -> str:
        owner = (f"{self.query_name} (id {self.query_id})" if self.query_name
                 else self.query_id)
        return (f"{self.root_uri} is written by query {owner} (committed up to batch "
                f"{self.latest_batch_id}); this is query {query_id}. rotsink allows one query "
                "per output path: restart the original query from its checkpoint, or write to "
                "a new path")
