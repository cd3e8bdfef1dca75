"""The files a table commit lists, with their Parquet footers (the statistics a table keeps of
each file): as the commit's encoders handed them over, else read from each file's last bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from commit_protocol.storage import Storage
from commit_protocol.storage.concurrent import each
from commit_protocol.tables import TableFile
from commit_protocol.vocabulary.errors import CorruptLogError

if TYPE_CHECKING:
    import pyarrow.parquet as pq


# Bytes read from a file's end for its footer: the footer of a file of a few row groups is a
# few KB; a larger one costs a second read.
FOOTER_GUESS = 64 << 10


def read_footer(storage: Storage, path: str, size: int) -> pq.FileMetaData:
    """The Parquet footer of finalized file ``path`` (``size`` bytes), from its last bytes
    alone: one read, two for a footer over :data:`FOOTER_GUESS`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tail = storage.read_finished(path, size, max(0, size - FOOTER_GUESS))
    if size < 12 or tail[-4:] != b"PAR1":
        raise CorruptLogError(f"{path}: a finalized file of the log is no Parquet file (no "
                              "'PAR1' at its end): the table cannot list it")
    footer = int.from_bytes(tail[-8:-4], "little") + 8
    if footer > len(tail):
        tail = storage.read_finished(path, size, size - footer)
    return pq.read_metadata(pa.BufferReader(tail))


def described_files(storage: Storage, files: tuple[tuple[str, int], ...],
                    footers: Mapping[str, bytes], now_ms: int) -> list[TableFile]:
    """The files with their Parquet footers: as the commit's encoders handed them over,
    else read together where storage gains (one ranged GET each on an object store)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def described(item: tuple[str, int]) -> TableFile:
        path, size = item
        given = footers.get(path)
        footer = read_footer(storage, path, size) if given is None else \
            pq.read_metadata(pa.BufferReader(given))
        return TableFile(path, size, now_ms, footer)

    unread = [item for item in files if item[0] not in footers]
    if len(unread) > 1:  # those read from storage go out together
        read = dict(zip(unread, each(storage, described, unread), strict=True))
        return [read.get(item) or described(item) for item in files]
    return [described(item) for item in files]

