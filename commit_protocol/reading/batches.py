"""A read task's rows: one split of one committed file, decoded by its kind, with the
directory's partition values added as columns."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from commit_protocol.formats import FORMATS
from commit_protocol.reading.bulk import finished_batches, staged_batches
from commit_protocol.reading.files import CommittedFile, Layout
from commit_protocol.reading.predicates import Predicate, passes
from commit_protocol.reading.rows import row_batches
from commit_protocol.reading.splits import FileSplit
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import CorruptLogError
from commit_protocol.vocabulary.naming import parse_partition_dir
from commit_protocol.vocabulary.partition_values import parse_partition_value


@dataclass(frozen=True)
class TaskFilters:
    """Predicates a read task applies itself: ``partition`` ones on its directory's values
    (those of timestamp columns: the session time zone that reads them is known only in the
    task), exactly; ``data`` ones on units' statistics, to skip units only."""

    partition: tuple[Predicate, ...] = ()
    data: tuple[Predicate, ...] = ()


NO_FILTERS = TaskFilters()


def read_batches(storage: Storage, item: CommittedFile | FileSplit, *, state: Layout,
                 schema: pa.Schema, ring: Mapping[str, bytes] | None = None,
                 time_zone: str = "UTC",
                 filters: TaskFilters = NO_FILTERS) -> Iterator[pa.RecordBatch]:
    """Decode exactly the committed bytes of a file (or one split of it) into batches of
    ``schema`` (partition columns added), decrypting (``ring``: the keys by id) and
    decompressing as the path was written. Timestamp partition values are read in
    ``time_zone``, as Spark's readers read them in the session time zone."""
    split = item if isinstance(item, FileSplit) else FileSplit(item)
    f = split.file
    values = partition_values(f.directory, schema, state.partition_by, time_zone)
    if filters.partition and not passes(filters.partition,
                                        {k: v.as_py() for k, v in values.items()}):
        return
    data_schema = pa.schema([field for field in schema if field.name not in state.partition_by])
    options: dict[str, Any] = {"layout": state, "schema": data_schema, "ring": ring}
    if f.staged:
        batches = staged_batches(storage, f, **options)
    elif FORMATS[state.format].bulk:
        batches = finished_batches(storage, f, start=split.start, end=split.end,
                                   predicates=filters.data, **options)
    else:
        batches = row_batches(storage, f, start=split.start, end=split.end, **options)
    yield from with_values(batches, values, schema)


def with_partition_columns(batches: Iterable[pa.RecordBatch], directory: str, *,
                           schema: pa.Schema, state: Layout,
                           time_zone: str) -> Iterator[pa.RecordBatch]:
    """``batches`` of a file in ``directory`` with its partition columns added, as
    ``schema``."""
    values = partition_values(directory, schema, state.partition_by, time_zone)
    yield from with_values(batches, values, schema)


def with_values(batches: Iterable[pa.RecordBatch], values: Mapping[str, pa.Scalar],
                schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``batches`` with the partition columns ``values`` added, as ``schema``."""
    if not values:
        yield from batches
        return
    for batch in batches:
        columns = [pa.repeat(values[field.name], batch.num_rows) if field.name in values
                   else batch.column(field.name) for field in schema]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def partition_values(directory: str, schema: pa.Schema, partition_by: tuple[str, ...],
                     time_zone: str) -> dict[str, pa.Scalar]:
    """The partition columns' values of the files in ``directory``, typed as ``schema``."""
    if not partition_by:
        return {}
    parsed = parse_partition_dir(directory)
    values = {}
    for name in partition_by:
        kind = schema.field(name).type
        try:
            values[name] = parse_partition_value(parsed.get(name), kind, time_zone=time_zone)
        except (ValueError, ArithmeticError, pa.ArrowException) as e:
            raise CorruptLogError(f"partition directory {directory!r}: cannot read {name}="
                                  f"{parsed.get(name)!r} as {kind} ({e}); renamed by hand?") from e
    return values
