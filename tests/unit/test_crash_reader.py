"""The crash loop's reader flags every kind of wrong read (so a clean loop means something)."""

from __future__ import annotations

from commit_protocol.storage import Storage
from tests.support.crash_reader import BesideReader, ReaderTally
from tests.unit.test_committer import make, report, task_file


def no_storage() -> Storage:
    raise AssertionError("checking ids read must not touch storage")


def test_wrong_reads_are_recorded_not_hidden():
    tally = ReaderTally()
    reader = BesideReader(no_storage, None, tally)
    reader.rows_in = 3
    reader._check([0, 1, 2])
    reader._check([0, 0, 1, 5])
    assert tally.wrong == ["ids read twice: [0]", "ids never written: [5]",
                           "ids an earlier read returned are gone: [2]"]


def test_a_read_checks_every_column(tmp_path):
    c = make(tmp_path)
    good = b'{"id":1,"name":"row \\"1\\", \\u00fc\\\\","grp":"g1","score":0.25}\n'
    bad = b'{"id":2,"name":"row 2","grp":"g2","score":0.5}\n'
    f = task_file(tmp_path, "_rotsink/inprogress/.a", good + bad, records=2)
    c.commit(0, [report(0, f)], now_ms=0)
    tally = ReaderTally()
    reader = BesideReader(lambda: c.storage, None, tally)
    assert reader.read_once() == [1, 2]
    assert len(tally.wrong) == 1 and "'name': 'row 2'" in tally.wrong[0]
