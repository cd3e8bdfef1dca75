"""``rotsink inspect`` and ``rotsink verify`` on a path committed without Spark."""

from __future__ import annotations

import pytest

from datasource.commands.cli import main
from tests.unit.test_committer import make, report, task_file

pytestmark = pytest.mark.compat  # what every PySpark release must show (pytest -m compat)


def committed_path(tmp_path):
    c = make(tmp_path, max_batches=1)
    c.commit(0, [report(0, task_file(tmp_path, "_rotsink/inprogress/.a", b'{"id":1}\n'))], now_ms=0)
    return tmp_path


def test_inspect_lists_what_each_batch_rolled(tmp_path, capsys):
    assert main(["inspect", str(committed_path(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert ("batch     0: finalized 1 file(s), 0 in progress; 1 task(s) appended 1 "
            "row(s), 9 byte(s)") in out
    assert "part-00000-000000-000.jsonl (9 bytes, rolled by maxBatches)" in out
    assert "format: jsonl, not partitioned (option partitionBy unset)" in out
    assert ("totals: 1 batch(es) (0 idle), 1 row(s), 9 byte(s); files: 1 created, 1 "
            "finalized, 0 in progress\n") in out
    assert "rows: 1 in finalized files (what Spark's readers of the path return), 0 in open" \
        in out


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_closed_pipe_ends_the_command_quietly(tmp_path, command):
    """``rotsink inspect PATH | head``: the reader is gone before the command writes."""
    import os
    import subprocess
    import sys

    path = committed_path(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to the pipe now fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "datasource.commands.cli", command, str(path)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.stderr == "" and done.returncode == 0


def test_verify_passes_then_names_a_damaged_file(tmp_path, capsys):
    path = committed_path(tmp_path)
    assert main(["verify", str(path)]) == 0
    (path / "part-00000-000000-000.jsonl").write_bytes(b"{")
    assert main(["verify", str(path)]) == 1
    assert "part-00000-000000-000.jsonl: the log commits 9 bytes, storage holds 1" in \
        capsys.readouterr().out


@pytest.mark.parametrize("command", ["inspect", "verify"])
@pytest.mark.parametrize("where", ["empty-dir", "no-such-path"])
def test_a_path_without_output_fails_saying_so(tmp_path, capsys, command, where):
    path = tmp_path if where == "empty-dir" else tmp_path / "no" / "such"
    assert main([command, str(path)]) == 1
    captured = capsys.readouterr()
    assert "no committed batch" in captured.out + captured.err


def test_cat_outside_any_output_fails_saying_so(tmp_path, capsys):
    assert main(["cat", str(tmp_path / "part-0.jsonl")]) == 2
    assert "no rotsink output around it" in capsys.readouterr().err


def test_cat_prints_committed_content_decrypted_and_decompressed(tmp_path, capsysbinary,
                                                                   monkeypatch):
    import base64
    import os

    from commit_protocol.crypto.keys import KeyRefs
    from tests.unit.test_task_writer import commit, config, rows, run_task

    monkeypatch.setenv("CAT_KEY", base64.b64encode(os.urandom(32)).decode())
    cfg = config(tmp_path, compression="zstd", keys=KeyRefs("env:CAT_KEY"),
                 rotation={"max_records": 2})
    report = run_task(tmp_path, cfg, 0, [rows(0, 3)])
    commit(tmp_path, cfg, 0, report)
    done, open_ = sorted(report.files, key=lambda f: not f.closed)
    with open(tmp_path / open_.temp, "ab") as f:
        f.write(b"uncommitted zombie bytes")  # past the committed offset: never printed
    for name, expected in ((done.name, b'{"id":0}\n{"id":1}\n'), (open_.temp, b'{"id":2}\n')):
        assert main(["cat", str(tmp_path / name), "--key", "env:CAT_KEY"]) == 0
        assert capsysbinary.readouterr().out == expected
    assert main(["cat", str(tmp_path / done.name)]) == 2
    assert b"is encrypted: set encryption.key" in capsysbinary.readouterr().err


def test_cat_refuses_a_file_the_log_does_not_list(tmp_path, capsys):
    path = committed_path(tmp_path)
    (path / "stray.jsonl").write_text("{}\n")
    assert main(["cat", str(path / "stray.jsonl")]) == 2
    assert "stray.jsonl is not committed output" in capsys.readouterr().err


def test_inspect_and_verify_on_s3_take_fs_options(tmp_path, s3_endpoint, capsys):
    import uuid

    import s3fs

    from tests.unit.test_task_writer import commit, config, rows, run_task

    bucket = f"rotsink-cli-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(endpoint_url=s3_endpoint).mkdir(bucket)
    cfg = config(tmp_path, path=f"s3://{bucket}/out", fs_options={"endpoint_url": s3_endpoint},
                 rotation={"max_batches": 1})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    fs = ["--fs", f"endpoint_url={s3_endpoint}"]
    assert main(["inspect", cfg.path, *fs]) == 0
    assert "part-00000-000000-000.jsonl" in capsys.readouterr().out
    assert main(["verify", cfg.path, *fs]) == 0
    out = capsys.readouterr().out
    assert "committed up to batch 0: 1 finalized file(s)" in out and "PROBLEM" not in out
    assert main(["verify", cfg.path, "--fs", "endpoint_url"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_cat_prints_encrypted_parquet_rows_as_json_lines(tmp_path, capsysbinary, monkeypatch):
    import json

    from commit_protocol.crypto.keys import KeyRefs
    from tests.unit.test_task_writer import commit, config, rows, run_task

    monkeypatch.setenv("CAT_PQ_KEY", "ab" * 32)
    cfg = config(tmp_path, format="parquet", compression="zstd", file_suffix=".parquet",
                 keys=KeyRefs("env:CAT_PQ_KEY"))
    report = run_task(tmp_path, cfg, 0, [rows(0, 3)])
    commit(tmp_path, cfg, 0, report)
    (f,) = report.files
    assert main(["cat", str(tmp_path / f.name), "--key", "env:CAT_PQ_KEY"]) == 0
    lines = capsysbinary.readouterr().out.decode().splitlines()
    assert [json.loads(line) for line in lines] == [{"id": 0}, {"id": 1}, {"id": 2}]


def test_cat_on_a_path_with_no_committed_batch_says_so(tmp_path, capsys):
    (tmp_path / "_spark_metadata").mkdir()
    (tmp_path / "_rotsink" / "inprogress").mkdir(parents=True)
    (tmp_path / "_rotsink" / "inprogress" / ".part-0.inprogress").write_text("{}\n")
    assert main(["cat", str(tmp_path / "_rotsink" / "inprogress" / ".part-0.inprogress")]) == 2
    assert "has no committed batch yet" in capsys.readouterr().err


def test_help_shows_the_commands_without_markup(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "The rotsink command: demo, inspect PATH, verify PATH, cat FILE." in out
    assert "``" not in out


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "piped"])
def test_verify_shows_its_progress_on_a_terminal_only(tmp_path, terminal):
    """``verify --deep`` (and ``--repair``) over a big lake takes a while: on a terminal its
    standard error shows files and bytes checked of the total, redrawn on one line; piped,
    nothing but the result."""
    import os
    import pty
    import subprocess
    import sys

    c = make(tmp_path, max_batches=1)
    for b in range(3):
        f = task_file(tmp_path, f"_rotsink/inprogress/.{b}", b'{"id":1}\n' * 100,
                      name=f"part-00000-{b:06d}-000.jsonl")
        c.commit(b, [report(b, f)], now_ms=b)
    command = [sys.executable, "-c", "import sys; from datasource.commands.cli import main; "
               "sys.exit(main())", "verify", "--deep", "--repair", str(tmp_path)]
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return
    primary, secondary = pty.openpty()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=secondary) as child:
        os.close(secondary)
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        assert child.wait(timeout=120) == 0
    os.close(primary)
    text = shown.decode()
    assert text.startswith("\r") and text.endswith("\n"), text  # one line, redrawn
    assert "rotsink verify: sizes checked: 3 of 3 files, 2.6 KiB of 2.6 KiB" in text, text
    assert "rotsink verify: bytes decoded: 3 of 3 files, 2.6 KiB of 2.6 KiB" in text, text


def test_version_names_the_release_the_package_and_the_state_record(tmp_path, capsys):
    from importlib.metadata import version

    from commit_protocol.vocabulary.release import RELEASE

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"rotsink {RELEASE} (PySpark ")
    assert version("rotsink") == RELEASE  # pip show rotsink: the same number
    assert main(["inspect", str(committed_path(tmp_path))]) == 0
    assert f"written by: rotsink {RELEASE}\n" in capsys.readouterr().out
