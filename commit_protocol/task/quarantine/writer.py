"""A task's refused rows into files of the quarantine (runs on an executor).

Each file is new (its name says the output's batch and the task partition) and finished in
the task, so the quarantine holds no in-progress file: an attempt that is not committed (a
retry, a zombie, a batch aborted) leaves only hidden temp files, which the quarantine's
clean-up deletes as orphans. Nothing is opened until the first refused row.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from commit_protocol.records.config import SinkConfig
from commit_protocol.records.messages import FileReport
from commit_protocol.storage import Storage, open_storage
from commit_protocol.task.part_files import RowPartFile, RowSize
from commit_protocol.task.quarantine.rows import counted, quarantine_rows
from commit_protocol.task.quarantine.sorting import Refused
from commit_protocol.vocabulary.naming import final_name, temp_name


class QuarantineWriter:
    """The quarantine's share of one task of the output's batch ``batch_id``."""

    def __init__(self, config: SinkConfig, *, batch_id: int, partition: int,
                 query_id: str) -> None:
        self.config = config  # the quarantine's (SinkConfig.quarantine)
        self.batch_id = batch_id
        self.partition = partition
        self.query_id = query_id
        self.counts: Counter[str] = Counter()
        self._storage: Storage | None = None
        self._files: list[RowPartFile] = []
        self._estimate = RowSize()

    def add(self, refused: Sequence[Refused]) -> None:
        """Write ``refused`` (rows of one chunk) to the quarantine's files."""
        if not refused:
            return
        self.counts.update(counted(refused))
        table = quarantine_rows(refused, batch_id=self.batch_id, query_id=self.query_id,
                                now_ms=int(time.time() * 1000))
        for rows in table.to_batches():
            while rows.num_rows:
                f = self._open_file()
                took = f.add(rows)
                rows = rows.slice(took)
                if not took or f.full():
                    f.roll()

    def reports(self) -> tuple[FileReport, ...]:
        """Every file finished; what the task reports of them."""
        for f in self._files:
            if not f.closed:
                f.roll()
        return tuple(f.report() for f in self._files)

    def _open_file(self) -> RowPartFile:
        if self._files and not self._files[-1].closed:
            return self._files[-1]
        if self._storage is None:
            self._storage = open_storage(self.config.path, self.config.fs_options)
        name = final_name(directory="", prefix=self.config.file_prefix,
                          partition=self.partition, batch=self.batch_id,
                          roll=len(self._files), suffix=self.config.file_suffix)
        f = RowPartFile(self._storage, self.config, estimate=self._estimate,
                        partition=self.partition, directory="", name=name,
                        temp=temp_name(name), start=0, records=0, length_known=True)
        self._files.append(f)
        return f
