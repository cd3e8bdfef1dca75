"""The checks a rotsink query's ``start()`` makes before Spark starts the query.

Spark returns from ``start()`` at once and runs the query in a thread of its own: the sink
first sees its options, its schema, its store and its table when the first micro-batch is
planned, in Spark's planning worker, and a refusal there reached the user after ``start()``
had returned, wrapped in 57 to 195 lines (``[PYTHON_DATA_SOURCE_ERROR] ... PicklingError:
Could not serialize object: StoreAccessError: ...``), rotsink's sentence two or three times.
The same checks run here first, in the process that calls ``start()``, so that a query that
cannot start raises rotsink's own error from ``start()`` itself: an option's value, the
schema against the format and the partition columns, the store (bucket or container,
credentials), the committed output (its schema, format, compression, key) and the table
(another writer's, other partitions, other types).

They only read: rolling a decided batch forward, catching a table up, the checks of the
query's identity (one query per path) are the first batch's, as before. Under Spark Connect
the client may not reach the store the server writes to: the server's first batch checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_before_start(session: Any, writer: Any, options: Mapping[str, str]) -> None:
    """Raise what the first micro-batch of ``writer``'s rotsink query (``options`` as given
    to it) would fail with at its start; return when it would start."""
    df = getattr(writer, "_df", None)
    if df is None or type(session).__module__.startswith("pyspark.sql.connect"):
        return
    from pyspark.sql.datasource import CaseInsensitiveDict

    from commit_protocol.commit.committer import Committer
    from commit_protocol.log import open_committed
    from commit_protocol.storage import open_storage
    from commit_protocol.storage.access import check_access
    from datasource.writing.writer import check_compatible, stream_writer

    # the options as the planning worker gets them (any case), the DataFrame's schema
    sink = stream_writer(dict(CaseInsensitiveDict(options)), df.schema)
    config, schema_json = sink.credentialed(), sink.schema_json
    storage = open_storage(config.path, config.fs_options)
    check_access(storage)
    committed = open_committed(storage)
    state = None if committed is None else committed[2]
    # the directories' terms as the first batch's planning lays them out (a joined table's)
    config = sink.laid_out(Committer(storage, config, schema_json), state)
    if state is not None:
        check_compatible(config, schema_json, state)
    committer = Committer(storage, config, schema_json)
    if committer.table is not None:
        committer.table.check(state, schema_json)
