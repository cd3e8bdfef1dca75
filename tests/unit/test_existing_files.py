"""Which files storage still holds (``commit_protocol.storage.concurrent.existing``): the
log asks it at every compaction batch of the files a table removed and rotsink's listing
still carries; a directory asked about many of its files is listed once, not asked a file
at a time."""

from __future__ import annotations

from commit_protocol.storage import LocalStorage
from commit_protocol.storage.concurrent import LIST_AT, existing


class Counting(LocalStorage):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.asked: list[str] = []
        self.listed: list[str] = []

    def exists(self, path: str) -> bool:
        self.asked.append(path)
        return super().exists(path)

    def names(self, directory: str) -> list[str]:
        self.listed.append(directory)
        return super().names(directory)


def test_a_directory_asked_about_many_files_is_listed_once(tmp_path):
    storage = Counting(str(tmp_path))
    emptied = [f"day=1/part-{i:03d}.parquet" for i in range(LIST_AT + 10)]
    for path in emptied[::2]:  # the retention job deleted every other one so far
        storage.write_exclusive(path, [b"x"])
    lone = ["day=2/part-000.parquet", "day=2/part-001.parquet", "root.parquet"]
    storage.write_exclusive(lone[0], [b"x"])
    storage.write_exclusive(lone[2], [b"x"])
    gone_dir = [f"day=0/part-{i:03d}.parquet" for i in range(LIST_AT)]  # deleted, and its dir

    asked = gone_dir + lone + emptied
    assert existing(storage, asked) == [lone[0], lone[2], *emptied[::2]]
    assert sorted(storage.listed) == ["day=0", "day=1"]
    assert sorted(storage.asked) == sorted(lone)


def test_nothing_asked_asks_nothing(tmp_path):
    storage = Counting(str(tmp_path))
    assert existing(storage, []) == []
    assert storage.asked == storage.listed == []
