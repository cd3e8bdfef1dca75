"""The metadata log, in the on-disk format of Spark's ``FileStreamSinkLog`` (version 1).

``_spark_metadata/<batch>`` lists the files finalized by a batch; every ``compact_interval``
batches ``<batch>.compact`` lists all files so far. Spark's readers honour it, so they see
exactly the committed, finalized output. Each file also carries rotsink's state as its first
entry (``isDir: true``, skipped by Spark), so one atomic file commits a batch.

The state grows with the files in progress (a cluster can hold 20,000), so a log file
carries only what its batch changed (the *head*: every small field, and the in-progress
files and open partitions that changed); a compaction file also carries them whole (the
*snapshot*, its third line). The whole state of a batch is the newest snapshot at or before
it with the heads after it applied, or the state of the batch before (kept in this process
after it was read or committed, and checked by the id each head names) with one head
applied: a planning or a commit reads what changed, not the whole state.

A commit that renames files is first staged as an *intent* file under ``_rotsink/intent/``
holding the exact bytes of its log file, which is then created exclusively in
``_spark_metadata``: the batch is committed exactly when the log file exists, and an intent
whose log file is missing is a commit that was decided but cut short. Intents stay for
``compact_interval`` batches after their commit (clean-up deletes them).
"""

from commit_protocol.log.cache import STATES
from commit_protocol.log.metadata_log import MetadataLog, open_committed
from commit_protocol.log.writing import KEPT_BYTES

__all__ = ["KEPT_BYTES", "STATES", "MetadataLog", "open_committed"]
