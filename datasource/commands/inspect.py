"""What the log says about an output path (``rotsink inspect``) and whether storage matches
it (``rotsink verify``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from commit_protocol.checks.in_flight import COMMIT_TIMEOUT_S, PendingIntent
from commit_protocol.checks.verification import Verification, verify_output
from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.metrics.totals import TOTALS, gauges_of
from commit_protocol.reading import open_committed
from commit_protocol.storage import Storage, open_storage
from commit_protocol.vocabulary.errors import CorruptLogError, RotsinkError
from commit_protocol.vocabulary.progress import Progress, no_progress
from commit_protocol.vocabulary.release import writer_line


@dataclass(frozen=True)
class BatchSummary:
    batch_id: int
    finalized: list[tuple[str, int, str]]
    in_progress: list[tuple[str, int, int]]
    compacted: bool
    markers: list[str]  # directories this batch marked complete (partition.commitDelay)
    appended: tuple[int, int, int]  # tasks, rows, bytes


@dataclass(frozen=True)
class Partitions:
    """``partition.commitDelay``: directories with their ``_SUCCESS`` marker (from storage:
    the log keeps each marker only in the batch that wrote it), and those that had rows and
    await it, with the commit time of their last rows."""

    complete: list[str]
    awaiting: list[tuple[str, int]]


def batch_summaries(path: str, fs_options: dict[str, str] | None = None) -> list[BatchSummary]:
    """One summary per log file still on storage (deltas list what their batch finalized)."""
    committed = open_committed(open_storage(path, fs_options))
    if committed is None:
        return []
    log = committed[0]
    summaries = []
    for batch_id in log.batch_ids():
        state = log.read_state(batch_id)
        published = [(p.name, p.size, p.reason) for p in state.publish]
        in_progress = [(f.name, f.size, f.records) for f in state.in_progress]
        compacted = log.path_of(batch_id).endswith(".compact")
        summaries.append(BatchSummary(batch_id, published, in_progress, compacted,
                                      list(state.markers), state.appended))
    return summaries


def schema_lines(path: str, fs_options: dict[str, str] | None = None) -> list[str]:
    """The committed schema, and the columns each schema change added (``schema.evolution``)."""
    import json

    from pyspark.sql.types import StructType

    from commit_protocol.records.schema_evolution import recorded, widenings

    committed = open_committed(open_storage(path, fs_options))
    if committed is None:
        return []
    state = committed[2]
    schema = StructType.fromJson(json.loads(state.schema_json)).simpleString()
    added = [f"    batch {batch} added column(s) {', '.join(columns)}"
             for batch, columns in recorded(state.extra) if columns]
    added += [f"    batch {batch} widened {', '.join(f'{p} from {a} to {b}' for p, a, b in w)}"
              for batch, w in widenings(state.extra)]
    return [query_line(state.query_name, state.query_id),
            writer_line(state.extra, state.batch_id), f"schema: {schema}", *added,
            f"format: {state.format}, {partitioning(state.partitioned_by)}",
            *(totals_lines(gauges_of(state)) if TOTALS in state.extra else
              ["totals: none in this log (its batches were committed by a release that kept "
               "none; the next commit starts them)"]),
            *quarantine_lines(state.extra.get(TOTALS) or {})]


def quarantine_lines(totals: dict) -> list[str]:
    """The rows the output refused, by reason (``errors.mode=quarantine``); none if none.

    >>> print(*quarantine_lines({"quarantined": 5, "lastBatchQuarantined": 0,
    ...     "quarantinedByReason": {"line_break": 4, "not_null": 1}}))
    ... # doctest: +NORMALIZE_WHITESPACE
    quarantined: 5 row(s) refused (line_break 4, not_null 1), 0 in the last batch; kept in
    the quarantine (errors.quarantinePath, default <path>/_quarantine)
    """
    if not totals.get("quarantined"):
        return []
    reasons = ", ".join(f"{reason} {n:,}" for reason, n in
                        sorted((totals.get("quarantinedByReason") or {}).items()))
    return [f"quarantined: {totals['quarantined']:,} row(s) refused ({reasons}), "
            f"{totals.get('lastBatchQuarantined', 0):,} in the last batch; kept in the "
            "quarantine (errors.quarantinePath, default <path>/_quarantine)"]


def totals_lines(gauges: dict[str, int]) -> list[str]:
    """The output's running totals, as the log carries them (the query's metrics' totals),
    and the rows a reader of its finalized files gets; marked partial where an earlier
    release committed batches without counting them.

    >>> print("\\n".join(totals_lines({"batches-total": 12, "batchesIdle-total": 2,
    ...     "rows-total": 5000, "bytes-total": 81920, "filesCreated-total": 4,
    ...     "filesFinalized-total": 3, "filesInProgress": 1, "rowsFinalized-total": 4000,
    ...     "filesInProgress-rows": 1000, "batchesUncounted-total": 0})))
    ... # doctest: +NORMALIZE_WHITESPACE
    totals: 12 batch(es) (2 idle), 5,000 row(s), 81,920 byte(s); files: 4 created,
    3 finalized, 1 in progress
    rows: 4,000 in finalized files (what Spark's readers of the path return), 1,000 in open
    files (rotsink's reader returns both)
    """
    uncounted = gauges["batchesUncounted-total"]
    partial = (f" (partial: {uncounted:,} of the batches were committed by an earlier release "
               "that counted nothing, and are not in these counts)" if uncounted else "")
    return [f"totals: {gauges['batches-total']:,} batch(es) ({gauges['batchesIdle-total']:,} "
            f"idle), {gauges['rows-total']:,} row(s), {gauges['bytes-total']:,} byte(s); "
            f"files: {gauges['filesCreated-total']:,} created, "
            f"{gauges['filesFinalized-total']:,} finalized, {gauges['filesInProgress']:,} in "
            f"progress{partial}",
            f"rows: {'at least ' if uncounted else ''}"
            f"{gauges['rowsFinalized-total']:,} in finalized files (what Spark's readers "
            f"of the path return), "
            f"{gauges['filesInProgress-rows']:,} in open files (rotsink's reader returns both)"]


def query_line(name: str, query_id: str) -> str:
    """Which query writes the output, as Spark names it (``.queryName(...)``) and by id.

    >>> query_line("events", "5b2c")
    'query: events (id 5b2c)'
    >>> query_line("", "5b2c")
    'query: unnamed (id 5b2c)'
    """
    return f"query: {name or 'unnamed'} (id {query_id or 'unknown'})"


def partitioning(partition_by: tuple[str, ...]) -> str:
    """How the output is laid out, said whenever it is shown: Spark drops
    ``writeStream.partitionBy(...)`` for Python sinks, so where rotsink's wrapper of PySpark's
    writer is not in place (``datasource.writing.writer_calls``) an output meant to be
    partitioned is not, unless the ``partitionBy`` option was given.

    >>> partitioning(("day",)), partitioning(())
    ('partitioned by day', 'not partitioned (option partitionBy unset)')
    """
    if partition_by:
        return f"partitioned by {', '.join(partition_by)}"
    return "not partitioned (option partitionBy unset)"


def table_lines(path: str, fs_options: dict[str, str] | None = None) -> list[str]:
    """The table that follows the output (``table.format``): its age and what bounds its
    metadata, with a warning where something grows with every commit; none without one."""
    import time

    from commit_protocol.tables import owner_of, table_format_of
    from commit_protocol.tables.checks import health_lines
    from commit_protocol.tables.recorded import table_config

    storage = open_storage(path, fs_options)
    committed = open_committed(storage)
    if committed is None:
        return []
    state = committed[2]
    config = table_config(storage, state, fs_options)
    if config is None or config.table_format is None:
        return []
    table = table_format_of(config).open(storage, config)
    return health_lines(table.health(owner=owner_of(state.query_id),
                                     now_ms=int(time.time() * 1000)))


def partitions(path: str, fs_options: dict[str, str] | None = None) -> Partitions:
    """Complete and awaiting partition directories of ``path`` (see :class:`Partitions`)."""
    from commit_protocol.vocabulary.naming import SUCCESS

    storage = open_storage(path, fs_options)
    committed = open_committed(storage)
    awaiting = list(committed[2].open_partitions) if committed is not None else []
    complete = sorted(f.path.rsplit("/", 1)[0] if "/" in f.path else ""
                      for f in storage.walk() if f.path.rsplit("/", 1)[-1] == SUCCESS
                      and not f.path.startswith("_"))
    return Partitions(complete, awaiting)


def verify(path: str, fs_options: dict[str, str] | None = None, *,
           key_refs: Sequence[str] = (), deep: bool = False, repair: bool = False,
           commit_timeout_s: float = COMMIT_TIMEOUT_S,
           on_wait: Callable[[PendingIntent], None] | None = None,
           progress: Progress = no_progress) -> Verification:
    """``rotsink verify``: check ``path`` against its log (see :func:`verify_output`, which
    takes ``commit_timeout_s``, ``on_wait`` and ``progress``).

    ``key_refs`` (``env:VAR``, ``file:/path``) authenticate every committed byte. An encrypted
    path needs them: without keys its files could be replaced by anything of the right size.

    Raises
    ------
    RotsinkError
        If the path is encrypted and no key reference is given, or a reference is bad.
    """
    storage = open_storage(path, fs_options)
    ring = KeyRefs(read_refs=tuple(key_refs)).ring() if key_refs else None
    if ring is None and _encrypted(storage):
        raise RotsinkError(f"{path} is encrypted: pass --key REF to authenticate its files")
    return verify_output(storage, ring=ring, deep=deep, repair=repair,
                         commit_timeout_s=commit_timeout_s, on_wait=on_wait,
                         fs_options=fs_options, progress=progress)


def _encrypted(storage: Storage) -> bool:
    try:
        committed = open_committed(storage)
    except CorruptLogError:
        return False  # verify_output names the damaged log file
    return committed is not None and committed[2].encrypted


def verification_lines(result: Verification) -> list[str]:
    """What ``rotsink verify`` prints: a summary, then one line per note (worth knowing,
    not wrong: a shared table's changes the log follows next), problem and repair."""
    head = ("nothing committed" if result.latest is None
            else f"committed up to batch {result.latest}")
    committed = sum(c.committed for c in result.in_progress)
    uncommitted = sum(c.uncommitted for c in result.in_progress)
    summary = (f"{head}: {result.finalized_files} finalized file(s) "
               f"({result.finalized_bytes} bytes), {len(result.in_progress)} in progress "
               f"({committed} committed bytes, {uncommitted} uncommitted)")
    if result.authenticated:
        summary += f", {result.authenticated} authenticated"
    lines = [summary]
    if result.latest is not None:
        at_least = "at least " if result.batches_uncounted else ""
        lines.append(f"rows finalized: {at_least}{result.finalized_rows:,} (the log's totals"
                     + (f"; {result.batches_uncounted:,} batch(es) an earlier release "
                        "committed are not counted" if result.batches_uncounted else "") + ")")
    if result.orphans:  # a healthy output has them: a bulk format's staged rows, a retry's
        lines.append(f"{len(result.orphans)} temp file(s) no committed state names: invisible "
                     "to every reader, deleted by the clean-up after log.cleanupDelay")
    return (lines + [f"TABLE {line}" for line in result.table_health]
            + [f"NOTE {n}" for n in result.notes]
            + [f"PROBLEM {p}" for p in result.problems]
            + [f"REPAIRED batch {b}" for b in result.repaired])
