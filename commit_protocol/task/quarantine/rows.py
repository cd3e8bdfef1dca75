"""The quarantine's rows: one per refused row, the same columns whatever the output's schema.

A refused row is kept as it came, as a JSON object (``row``) written as rotsink's JSON lines
write rows (Spark's JSON: base64 binaries, ISO dates and instants), so the quarantine's schema
never changes when the output's does, and a row that no column type of the output could
hold still fits. Beside it: the column at fault (null when the row as a whole is refused),
the reason's code, what is wrong with the row, the output's batch and the query that refused
it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pyarrow as pa

from commit_protocol.formats import encode_rows
from commit_protocol.task.quarantine.sorting import Refused

QUARANTINE_SCHEMA = pa.schema([  # as commit.quarantine.QUARANTINE_SCHEMA_JSON says it
    pa.field("row", pa.string()),              # the row as it came, a JSON object
    pa.field("column", pa.string()),           # the column at fault (null: the whole row)
    pa.field("reason", pa.string()),           # line_break, not_null, calendar_gap...
    pa.field("message", pa.string()),          # what is wrong with the row
    pa.field("batch_id", pa.int64()),          # the output's micro-batch
    pa.field("query_id", pa.string()),         # Spark's id of the query
    pa.field("quarantined_at", pa.timestamp("us", "UTC")),
])


def quarantine_rows(refused: Sequence[Refused], *, batch_id: int, query_id: str,
                    now_ms: int) -> pa.Table:
    """The quarantine's rows for ``refused`` (rows of one schema, as a task got them)."""
    if not refused:
        return QUARANTINE_SCHEMA.empty_table()
    rows = pa.Table.from_batches([r.row for r in refused])
    lines = encode_rows("jsonl", rows, with_header=False).decode("utf-8").splitlines()
    count = len(refused)
    return pa.table([
        pa.array(lines, pa.string()),
        pa.array([r.error.column for r in refused], pa.string()),
        pa.array([r.error.reason for r in refused], pa.string()),
        pa.array([r.error.detail or str(r.error) for r in refused], pa.string()),
        pa.array([batch_id] * count, pa.int64()),
        pa.array([query_id] * count, pa.string()),
        pa.array([now_ms * 1000] * count, pa.int64()).cast(pa.timestamp("us", "UTC")),
    ], schema=QUARANTINE_SCHEMA)


def counted(refused: Sequence[Refused]) -> Counter[str]:
    """Refused rows by reason."""
    return Counter(r.error.reason for r in refused)
