"""What the tests install on first use is installed once, by one of the test processes that
need it at the same time, and a folder an interrupted install left is installed again
(``tests/support/install_once.py``): a fresh clone's ``pytest -n 2`` must not run two
``npm install`` into one folder."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import azurite
from tests.support.install_once import install_once

ROOT = Path(__file__).resolve().parents[2]

# A process that installs "the tool" (slowly, appending a line to a log while it does), then
# says whether the tool was whole when it went on.
INSTALLER = """
import sys, time
from pathlib import Path
from tests.support.install_once import install_once
done, log = Path(sys.argv[1]), Path(sys.argv[2])
def install():
    with log.open("a") as f:
        f.write("install\\n")
    time.sleep(1)
    done.write_text("whole")
install_once(done, install)
print(done.read_text())
"""


def test_processes_that_need_a_tool_at_once_install_it_once_and_all_wait_for_it(tmp_path):
    done, log = tmp_path / "tool" / "done", tmp_path / "installs.log"
    children = [subprocess.Popen([sys.executable, "-c", INSTALLER, str(done), str(log)],
                                 cwd=ROOT, stdout=subprocess.PIPE, text=True)
                for _ in range(3)]
    outputs = [child.communicate(timeout=120)[0].strip() for child in children]
    assert [child.returncode for child in children] == [0, 0, 0]
    assert outputs == ["whole"] * 3  # none went on before the install was whole
    assert log.read_text().splitlines() == ["install"]


def test_an_install_that_does_not_finish_its_work_is_an_error_naming_it(tmp_path):
    with pytest.raises(RuntimeError, match="without making .*done"):
        install_once(tmp_path / "done", lambda: None)


def test_azurite_left_half_installed_is_installed_again(tmp_path, monkeypatch):
    """A node_modules without the mark of a whole install (an npm killed half-way, as two
    concurrent installs left it) is removed and installed again, not started."""
    prefix = tmp_path / "npm"
    (prefix / "node_modules" / ".bin").mkdir(parents=True)
    (prefix / "node_modules" / ".bin" / "azurite-blob").write_text("half")
    (prefix / "node_modules" / "leftover").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"  # an npm that installs a stand-in and records its call
    npm.write_text("#!/bin/sh\n"
                   f"echo \"$@\" >> {tmp_path / 'npm.log'}\n"
                   f"mkdir -p {prefix}/node_modules/.bin\n"
                   f"echo whole > {prefix}/node_modules/.bin/azurite-blob\n")
    npm.chmod(npm.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(azurite, "PREFIX", prefix)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("ROTSINK_AZURITE", raising=False)

    installed = azurite.binary()
    assert installed.read_text().strip() == "whole"
    assert not (prefix / "node_modules" / "leftover").exists()
    azurite.binary()  # a whole install is used as it is
    assert len((tmp_path / "npm.log").read_text().splitlines()) == 1
