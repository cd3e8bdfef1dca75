"""The table step of a commit: a table follows rotsink's log, one table commit per batch that
finalizes files, each step safe to repeat.

After the log file of batch N is published (the commit point), in order:

1. read the table's high-water mark: the newest batch it holds, fresh (a zombie or a second
   driver may have moved it);
2. catch up: every batch between the mark and N, from rotsink's own log (each batch's log
   file names the files it finalized), one table commit each -- a driver killed between the
   two commit points left the table behind;
3. commit batch N (a batch that finalizes nothing and changes no column needs no table
   commit, except batch 0, which creates the table).

Each table commit carries its batch id, and the table refuses none of them by itself: the
table module reads the mark again just before committing and skips a batch the table holds,
so a repeated step, a replay or a racing driver never lists a file twice. Where the log
files of the batches to catch up are gone (cleaned up: a table added to an older output, or
one far behind), the table is *reconciled* instead: one commit of every finalized file the
log lists and the table lacks, carrying the latest batch.

The catch-up also runs when a query starts (the first planning in a process) and in
``rotsink verify --repair``; a process remembers how far it brought the table, so steady
commits read only the mark and commit their own batch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from commit_protocol.log import MetadataLog
from commit_protocol.log.files import is_compaction_batch
from commit_protocol.log.lines import file_entry
from commit_protocol.metrics import count, note, timed
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.schema_evolution import recorded, with_columns_of
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.storage.concurrent import existing
from commit_protocol.tables import (
    PARTITION_ZONE_KEY,
    Table,
    TableCommit,
    TableFile,
    owner_of,
    table_format_of,
)
from commit_protocol.tables.footers import described_files
from commit_protocol.tables.row_deletes import row_deletes_line
from commit_protocol.tables.sharing import FOLLOWED_KEY, Followed, in_layout
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.uris import from_uri, to_uri

logger = logging.getLogger("rotsink.table")

# How far this process brought each output's table: root URI -> (owner, batch). Batches up
# to it need no table commit beyond those the table's mark shows. One entry an output (a
# driver writes a few), as below.
_FOLLOWED: dict[str, tuple[str, int]] = {}
# The table versions this process's commits made, by root URI: versions since the one the
# log followed that are all in here need no comparison of listings. Versions up to the one a
# commit follows are dropped then, so a set holds the few made since.
_OWN_VERSIONS: dict[str, set[int]] = {}


@dataclass(frozen=True)
class LogStep:
    """What a batch's log file records of the table's other writers: its state's ``extra``
    entries, the entries of files others added (a compaction batch's listing takes them in)
    and the paths a compaction leaves out (the table removed them)."""

    extra: dict[str, object]
    entries: list[dict[str, object]] = field(default_factory=list)
    dropped: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Batch:
    """What one batch means for the table: the files it finalized (relative path, size),
    whether it changed the columns, and the schema as of it."""

    batch_id: int
    files: tuple[tuple[str, int], ...]
    schema_json: str
    changes_columns: bool
    time_zone: str | None = None  # of timestamp partition directories

    @property
    def needs_commit(self) -> bool:
        return self.batch_id == 0 or bool(self.files) or self.changes_columns

    @classmethod
    def of(cls, state: SinkState) -> _Batch:
        changed = any(batch == state.batch_id for batch, _ in recorded(state.extra))
        return cls(state.batch_id, tuple((p.name, p.size) for p in state.publish),
                   state.schema_json, changed, _zone(state))


class TableFollower:
    """The table of one output path, kept one step behind its log (runs on the driver)."""

    def __init__(self, storage: Storage, config: SinkConfig, log: MetadataLog) -> None:
        self.storage = storage
        self.config = config
        self.log = log
        self._table: Table | None = None
        self._footers: dict[str, bytes] = {}

    @property
    def _name(self) -> str:
        return self.config.table_format or "none"

    @property
    def table(self) -> Table:
        if self._table is None:
            self._table = table_format_of(self.config).open(self.storage, self.config)
        return self._table

    @timed("table")
    def follow(self, state: SinkState, *, now_ms: int,
               footers: dict[str, bytes] | None = None) -> list[int]:
        """After the log file of ``state.batch_id``: catch up, then commit this batch.
        ``footers``: the Parquet footers of files this batch finalized, by final name, as
        their encoders wrote them (the others are read from storage). Returns the batches
        committed to the table."""
        failpoints.hit("table.before_commit")
        self._footers = dict(footers or {})
        done = self._bring_up(state.batch_id, state, now_ms=now_ms)
        failpoints.hit("table.after_commit")
        if done:
            self._maintain(state, now_ms)
        return done

    def _maintain(self, state: SinkState, now_ms: int) -> None:
        """The table's clean-up after this batch's commit (:meth:`Table.maintain`). The batch
        is committed by now: a clean-up that fails is named, and tried again after the next
        commit, never failing the batch."""
        try:
            self.table.maintain(owner=owner_of(state.query_id), now_ms=now_ms)
        except failpoints.FailpointError:
            raise
        except Exception as e:  # noqa: BLE001  any library or storage error: see above
            logger.warning("table %s: the clean-up after batch %d failed (%s: %s); it runs "
                           "again after the next commit", self._name, state.batch_id,
                           type(e).__name__, e)

    def catch_up(self, latest: int, *, now_ms: int) -> list[int]:
        """Bring the table up to committed batch ``latest`` from the log (a query's start,
        ``verify --repair``). Returns the batches committed to the table."""
        return self._bring_up(latest, None, now_ms=now_ms)

    def name_row_deletes(self, found: int | None = None) -> int:
        """When a query starts (and when it follows a table that has them): name rows the
        table deletes in place, which rotsink's reader leaves out and path readers return
        (:mod:`~commit_protocol.tables.row_deletes`); how many files have them."""
        found = self.table.row_deletes() if found is None else found
        if found:
            logger.info("table %s: %s", self._name, row_deletes_line(self._name, found))
        return found

    def check(self, state: SinkState | None, schema_json: str, *,
              planned_columns: bool = False) -> None:
        """Refuse a table this output cannot follow (see :meth:`Table.check`): against the
        committed columns and the query's (an Iceberg batch adds its new ones at planning)."""
        # a table holds no mark of the output before its first table commit: one the output
        # joined still has none after a driver died between batch 0's two commit points
        owner = None if state is None or state.batch_id == 0 else owner_of(state.query_id)
        schema = schema_json if state is None else with_columns_of(state.schema_json,
                                                                   schema_json)
        self.table.check(owner=owner, schema_json=schema, partition_by=self.config.partition_by,
                         partition_terms=self.config.partition_terms,
                         planned_columns=planned_columns)

    # -- the steps -----------------------------------------------------------------------
    def _bring_up(self, latest: int, current: SinkState | None, *, now_ms: int) -> list[int]:
        query_id = current.query_id if current is not None else \
            self.log.read_head(latest).state.query_id
        owner = owner_of(query_id)
        mark = self.table.committed_batch(owner, fresh=False)  # each commit checks afresh
        first = 0 if mark is None else mark + 1
        followed = _FOLLOWED.get(self.storage.root_uri)
        if followed is not None and followed[0] == owner:  # batches after the mark, seen
            first = max(first, followed[1] + 1)
        done: list[int] = []
        for batch_id in range(first, latest + 1):
            batch = _Batch.of(current) if current is not None and batch_id == latest else \
                self._logged_batch(batch_id)
            if batch is None:  # its log file is gone: reconcile with the whole listing
                done += self._reconcile(latest, owner, now_ms=now_ms)
                break
            if batch.needs_commit and self._commit(batch, owner, now_ms=now_ms):
                done.append(batch_id)
        _FOLLOWED[self.storage.root_uri] = (owner, latest)
        if done and (current is None or done != [latest]):
            logger.warning("table %s: committed batch(es) %s that a driver killed between its "
                           "two commit points had left out", self._name, done)
        return done

    def _logged_batch(self, batch_id: int) -> _Batch | None:
        try:
            return _Batch.of(self.log.read_head(batch_id).state)
        except (FileNotFoundError, CorruptLogError):
            if self.storage.exists(self.log.path_of(batch_id)):
                raise  # damaged, not cleaned up: never guess
            return None

    def _commit(self, batch: _Batch, owner: str, *, now_ms: int) -> bool:
        files = self._files(batch.files, now_ms)
        version = self.table.commit(TableCommit(batch.batch_id, owner, batch.schema_json,
                                                self.config.partition_by, tuple(files),
                                                self.config.partition_terms, batch.time_zone))
        if version is None:
            return False
        _OWN_VERSIONS.setdefault(self.storage.root_uri, set()).add(version)
        note("tableVersion", version)
        return True

    # -- other writers ---------------------------------------------------------------------
    def followed(self, previous: SinkState) -> Followed:
        """Before the log file of the batch after ``previous``: the other writers' changes
        the log follows as of the table's current version (see
        :mod:`commit_protocol.tables.sharing`). One request when no one else committed."""
        before = Followed.of(previous.extra)
        version = self.table.version()
        if version is None or version == before.version:
            return before
        own = _OWN_VERSIONS.setdefault(self.storage.root_uri, set())
        ours = False
        if before.version is not None:  # the table's own history only when ours do not say
            span = range(before.version + 1, version + 1)
            ours = all(v in own for v in span)
            if not ours:
                known = own | self.table.appends_since(before.version)
                ours = all(v in known for v in span)
        own.difference_update([v for v in own if v <= version])  # never asked again
        if ours:  # only this process's commits since, or rotsink appends to other outputs
            return replace(before, version=version)
        failpoints.hit("table.before_follow")
        owner = owner_of(previous.query_id)
        mark = self.table.committed_batch(owner)  # before the files: see lagging_files
        table_files = self.table.files()
        listed = self._listing(previous.batch_id, before)
        behind = lagging_files(self.log, mark, previous.batch_id)
        lagging = set(listed) if behind is None else behind
        removed = {p for p in listed if p not in table_files and p not in lagging}
        added = {p: size for p, size in table_files.items()  # elsewhere: verify names it
                 if p not in listed and in_layout(p, self.config.directory_keys)}
        followed = before.with_changes(version, removed, added, self.table.row_deletes())
        if removed or added:
            count("tableFollowed-total")
            count("tableFilesFollowed-total", len(removed) + len(added))
            logger.warning("table %s: following version %d, which other writers changed: "
                           "%d listed file(s) removed, %d added", self._name, version,
                           len(removed), len(added))
        self.name_row_deletes(followed.row_deletes)
        failpoints.hit("table.after_follow")
        return followed

    @timed("follow")
    def log_step(self, previous: SinkState, batch_id: int, now_ms: int) -> LogStep:
        """What the log file of ``batch_id`` (after ``previous``) records of the table: the
        changes followed so far in its state, and on a compaction batch the changes written
        into the listing itself (Spark's readers see them from there on)."""
        followed = self.followed(previous)
        if not is_compaction_batch(batch_id, self.log.interval) or \
                not (followed.changes_listing or followed.retired):
            return LogStep({FOLLOWED_KEY: followed.recorded()})
        root = self.storage.root_uri
        entries = [file_entry(to_uri(root, path), size, now_ms)
                   for path, size in sorted(followed.added.items())]
        retiring = sorted(followed.retiring)  # those the table's clean-up deleted drop out
        on_storage = existing(self.storage, retiring)
        return LogStep({FOLLOWED_KEY: followed.compacted(on_storage, now_ms).recorded()},
                       entries, followed.removed)

    def _listing(self, batch_id: int, followed: Followed) -> dict[str, int]:
        """The finalized files as of ``batch_id`` as rotsink's readers list them."""
        return followed.applied((from_uri(self.storage.root_uri, e["path"]), int(e["size"]))
                                for e in self.log.finalized_entries(batch_id))

    def _reconcile(self, latest: int, owner: str, *, now_ms: int) -> list[int]:
        """One commit of every finalized file as of ``latest`` that the table lacks (but
        those the log followed the table in removing). A removal the log has not followed
        yet cannot be told from a file the table never had here, the log files that would
        tell being gone: such a file would come back. Only a table whose log files were
        deleted by hand, or one added to an output whose early log files were cleaned up,
        gets here: downtime cannot make a table lack log files (docs/tables.md, "Downtime
        brings nothing back", and its test)."""
        state = self.log.read_head(latest).state
        listed = self._listing(latest, Followed.of(state.extra))
        missing = sorted(set(listed) - set(self.table.files()))
        batch = _Batch(latest, tuple((path, listed[path]) for path in missing),
                       state.schema_json, changes_columns=True, time_zone=_zone(state))
        logger.warning("table %s: log files of earlier batches are gone; reconciling: %d "
                       "finalized file(s) the table lacks, committed as batch %d",
                       self._name, len(missing), latest)
        return [latest] if self._commit(batch, owner, now_ms=now_ms) else []

    def _files(self, files: tuple[tuple[str, int], ...], now_ms: int) -> list[TableFile]:
        """The files with their Parquet footers (:func:`described_files`)."""
        return described_files(self.storage, files, self._footers, now_ms)

def lagging_files(log: MetadataLog, mark: int | None, latest: int) -> set[str] | None:
    """The files batches after ``mark`` finalized, up to ``latest``: listed by the log, not
    yet committed to the table (its driver died between the two commit points), so removed
    by no one. Read the mark before the table's files: a commit landing in between makes
    this set larger than needed, never smaller. None when one of those batches' log files is
    gone (cleaned up: the table is far behind, and every file it lacks counts)."""
    files: set[str] = set()
    for batch_id in range(0 if mark is None else mark + 1, latest + 1):
        try:
            files.update(p.name for p in log.read_head(batch_id).state.publish)
        except (FileNotFoundError, CorruptLogError):  # cleaned up (damage: verify names it)
            return None
    return files


def follower(storage: Storage, config: SinkConfig, log: MetadataLog) -> TableFollower | None:
    """The table follower of an output path; None without ``table.format``."""
    return None if config.table_format is None else TableFollower(storage, config, log)


def forget() -> None:
    """Drop what this process remembers (tests that rewrite an output)."""
    _FOLLOWED.clear()
    _OWN_VERSIONS.clear()


def _zone(state: SinkState) -> str | None:
    zone = state.extra.get(PARTITION_ZONE_KEY)
    return None if zone is None else str(zone)
