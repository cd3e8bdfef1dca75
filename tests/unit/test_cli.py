"""``rotsink inspect`` and ``rotsink verify`` on a path committed without Spark."""

from __future__ import annotations

from datasource.cli import main
from tests.unit.test_committer import make, report, task_file


def committed_path(tmp_path):
    c = make(tmp_path, max_batches=1)
    c.commit(0, [report(0, task_file(tmp_path, "_rotsink/inprogress/.a", b'{"id":1}\n'))], now_ms=0)
    return tmp_path


def test_inspect_lists_what_each_batch_rolled(tmp_path, capsys):
    assert main(["inspect", str(committed_path(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "batch     0 (delta): finalized 1 file(s), 0 in progress" in out
    assert "part-00000-000000-000.jsonl (9 bytes, rolled by maxBatches)" in out


def test_verify_passes_then_names_a_damaged_file(tmp_path, capsys):
    path = committed_path(tmp_path)
    assert main(["verify", str(path)]) == 0
    (path / "part-00000-000000-000.jsonl").write_bytes(b"{")
    assert main(["verify", str(path)]) == 1
    assert "part-00000-000000-000.jsonl: the log commits 9 bytes, storage holds 1" in \
        capsys.readouterr().out


def test_verify_on_a_path_without_output_fails(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 1
    assert "no committed batch" in capsys.readouterr().out
