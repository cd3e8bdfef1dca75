"""Reading committed output: the rows of one committed state, streamed, never more.

A read goes through these steps; each module says why its step holds while the query goes
on committing, rolling, compacting and cleaning up beside it.

1. **Plan from one state** (:mod:`~commit_protocol.reading.files`): the finalized files the
   log lists as of one batch, plus that batch's in-progress files up to their committed
   offsets. Nothing later is read, so a read returns exactly that state's rows.
2. **Prune** (:mod:`~commit_protocol.reading.predicates`): directories whose partition
   values fail a pushed filter are dropped, exactly; units whose statistics rule a filter
   out are skipped, conservatively.
3. **Split** (:mod:`~commit_protocol.reading.splits`): large files are cut into byte ranges
   that several tasks read, as Spark's file sources do.
4. **Stream the committed bytes** (:mod:`~commit_protocol.reading.inputs`,
   :mod:`~commit_protocol.reading.plaintext`): never past a committed offset, following a
   file the protocol moved mid-read, authenticated and decompressed piece by piece.
5. **Decode** (:mod:`~commit_protocol.reading.rows`, :mod:`~commit_protocol.reading.bulk`,
   :mod:`~commit_protocol.reading.batches`): row files block by block, bulk files unit by
   unit, staged rows stream by stream; a task's memory is bounded by a block or a unit,
   never by a file.
"""

from commit_protocol.log import open_committed
from commit_protocol.reading.batches import (
    NO_FILTERS,
    TaskFilters,
    partition_values,
    read_batches,
    with_partition_columns,
)
from commit_protocol.reading.files import (
    CommittedFile,
    Layout,
    ReadLayout,
    committed_files,
    directory_of,
    in_progress_files,
)
from commit_protocol.reading.inputs import CommittedInput, open_input, read_committed
from commit_protocol.reading.plaintext import open_plaintext, require_ring
from commit_protocol.reading.splits import FileSplit, split_bytes, split_files, spread

__all__ = ["NO_FILTERS", "CommittedFile", "CommittedInput", "FileSplit", "Layout",
           "ReadLayout", "TaskFilters", "committed_files", "directory_of", "in_progress_files",
           "open_committed", "open_input", "open_plaintext", "partition_values",
           "read_batches", "read_committed", "require_ring", "split_bytes", "split_files",
           "spread", "with_partition_columns"]
