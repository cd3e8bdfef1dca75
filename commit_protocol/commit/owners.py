"""One query per output path: a commit that finds its batch's intent or log file already
there tells this query's own earlier attempt (or a recovery of it: nothing to do) from another
query's commit (refused, naming both queries and what to do).
"""

from __future__ import annotations

from commit_protocol.log import MetadataLog
from commit_protocol.records.messages import TaskReport
from commit_protocol.records.plan import WritePlan
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import ConcurrentWriterError


def refuse_unless_committed_by(storage: Storage, log: MetadataLog, state: SinkState) -> None:
    """The intent of ``state.batch_id`` exists: return if this query committed the batch
    already (a commit repeated from stale reports changes nothing) or decided it (an earlier
    attempt's intent, whose create reached the store after the attempt failed: the caller
    rolls it forward), else refuse."""
    if committed_by(storage, log, state):
        return
    path = log.intent_path(state.batch_id)
    owner = log.read_intent_state(state.batch_id).query_id
    if owner and owner == state.query_id:
        return
    raise ConcurrentWriterError(
        f"batch {state.batch_id} of {storage.root_uri} is being committed by query "
        f"{owner} ({path} exists) while query {state.query_id} commits it: rotsink allows "
        "one query per output path; restart the original query from its checkpoint, or "
        "write to a new path")

def committed_by(storage: Storage, log: MetadataLog, state: SinkState) -> bool:
    """Whether ``state``'s batch is committed already, by its query (another query's
    commit of it is a lost race, raised)."""
    if not storage.exists(log.path_of(state.batch_id)):
        return False
    owner = log.read_head(state.batch_id).state.query_id
    if owner and state.query_id and owner != state.query_id:
        raise lost_race(log, state, owner)
    return True

def check_replay_owner(log: MetadataLog, root_uri: str, batch_id: int, latest: int,
                       messages: list[TaskReport | None]) -> None:
    """A replay is a no-op only for the query that committed the batch: another query
    whose batch ``batch_id`` "is already committed" would otherwise lose its rows."""
    query_ids = {m.query_id for m in messages if m is not None and m.query_id}
    head = log.read_head(latest).state
    owner = head.query_id
    if owner and query_ids - {owner}:
        plan = WritePlan(latest_batch_id=latest, query_id=owner,
                         query_name=head.query_name, root_uri=root_uri)
        raise ConcurrentWriterError(plan.owner_message(sorted(query_ids - {owner})[0]))


def lost_race(log: MetadataLog, state: SinkState,
              owner: str | None = None) -> ConcurrentWriterError:
    """Another query published batch ``state.batch_id`` while this driver committed it
    (the same query's log file means an earlier attempt or a recovery finished ours)."""
    if owner is None:
        owner = log.read_head(state.batch_id).state.query_id
    return ConcurrentWriterError(
        f"{log.path_of(state.batch_id)} was committed by query {owner} while query "
        f"{state.query_id} committed it: rotsink allows one query per output path; "
        "restart the original query from its checkpoint, or write to a new path")
