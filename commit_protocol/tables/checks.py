"""``rotsink verify`` of a table that follows the log: does it list exactly the finalized files?

Every file the log lists as of its latest batch must be in the table's current version, with
the logged size, and the table must list nothing else. A table one batch behind is a table
commit in flight while the log file of the latest batch is younger than the commit timeout
(the driver is between its two commit points), and a problem after that: its driver died
there, and the next start of the query or ``rotsink verify --repair`` catches the table up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from commit_protocol.log import MetadataLog
from commit_protocol.records.config import SinkConfig
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.tables import TableHealth, owner_of, table_format_of
from commit_protocol.tables.follow import lagging_files
from commit_protocol.tables.row_deletes import deleted_in_place, row_deletes_line
from commit_protocol.tables.sharing import in_layout, is_elsewhere, outside_layout_problem
from commit_protocol.vocabulary.errors import TableError


@dataclass(frozen=True)
class TableCheck:
    problems: list[str]
    in_flight: bool  # the latest batch's table commit may still be under way
    files: int
    # what other writers changed since the version the log followed: files the table
    # removed, and files it lists that the log does not (the next commit follows them)
    removed_since: int = 0
    added_since: dict[str, int] = field(default_factory=dict)
    health: TableHealth | None = None  # the table's age and what bounds its metadata
    row_deletes: str | None = None  # rows deleted in place that rotsink's reader applies

    @property
    def notes(self) -> list[str]:
        notes = [] if self.row_deletes is None else [self.row_deletes]
        if not (self.removed_since or self.added_since):
            return notes
        return notes + [f"other writers changed the table since the version rotsink's log follows: "
                f"{self.removed_since} finalized file(s) removed, {len(self.added_since)} "
                "added; the query's next commit follows them (a shared table, not a problem)"]


def health_lines(health: TableHealth | None) -> list[str]:
    """What ``inspect`` prints and ``verify`` notes of a table's age (warnings flagged)."""
    if health is None:
        return []
    return [f"table: {fact}" for fact in health.facts] + \
        [f"table grows: {warning}" for warning in health.warnings]


def check_table(storage: Storage, log: MetadataLog, state: SinkState, config: SinkConfig,
                listed: dict[str, int], *, timeout_s: float) -> TableCheck:
    """Compare the table with ``listed`` (path -> size: the log's finalized files as of
    ``state.batch_id``, as the log followed the table's other writers).

    What other writers changed since is no problem: a file the table removed that an
    earlier batch finalized, a file the table lists below the output's root or elsewhere,
    rows deleted in place (noted: rotsink's reader leaves them out, path readers return them).
    What is: a file the table lists that storage lacks or holds at another size, and a batch
    the table lacks once its table commit is no longer in flight (its driver died between the
    two commit points).
    """
    table_format = table_format_of(config)
    name = f"the {table_format.name} table"
    table = table_format.open(storage, config)
    owner = owner_of(state.query_id)
    mark = table.committed_batch(owner)  # before the files: a commit in between is lagging
    files = table.files()
    problems = [f"{path}: {name} lists {files[path]} bytes, the log {size}"
                for path, size in sorted(listed.items()) if path in files and files[path] != size]
    # another output's files (a table shared by several rotsink queries) are not this one's
    added = {path: size for path, size in files.items()
             if path not in listed and not is_elsewhere(path)}
    problems += [f"{path}: listed by {name} (another writer's file) but missing from storage: "
                 "the table's readers fail" for path in sorted(added)
                 if not storage.exists(path)]
    problems += [outside_layout_problem(table_format.name, path) for path in sorted(added)
                 if not in_layout(path, config.directory_keys)]
    with_deletes = table.row_deletes()  # the table's now
    row_deletes = row_deletes_line(table_format.name, with_deletes) if with_deletes else None
    try:  # what rotsink's reader reads of them, as of the version the log followed
        deleted_in_place(storage, state, config.fs_options)
    except TableError as e:  # an equality delete, a followed snapshot expired since
        problems.append(f"rotsink's reader refuses the output: {e}")
    missing = set(listed) - set(files)
    behind = lagging_files(log, mark, state.batch_id)
    lagging = missing if behind is None else behind & missing
    removed = len(missing - lagging)
    health = table.health(owner=owner, now_ms=int(time.time() * 1000))
    check = TableCheck(problems, False, len(files), removed, added, health, row_deletes)
    if not lagging:
        return check
    age_s = time.time() - storage.mtime_ms(log.path_of(state.batch_id)) / 1000
    if (mark is None or mark < state.batch_id) and age_s < timeout_s:
        return replace(check, in_flight=True)
    problems.append(
        f"{name} (holding batches up to {mark}) lacks {len(lagging)} finalized file(s) the "
        f"log lists as of batch {state.batch_id}, first {min(lagging)}: its driver died "
        "between the two commits; restart the query or run `rotsink verify --repair`")
    return check
