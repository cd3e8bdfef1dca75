"""What the tests install on first use (Azurite, fake-gcs-server, Maven's jars), installed
once whatever runs at the same time.

The README's test command runs two test processes (``pytest -n 2``), and on a fresh clone
both reach their first Azure test, or their first jar, at about the same moment: two
``npm install`` into one folder broke each other (one exited 254, the other started a
half-installed emulator). An install here runs under an exclusive lock of its own, shared by
every process of the machine; a process that finds it running waits for it, then uses what it
installed. ``done`` marks a whole install: it is written last, so a folder an interrupted
install left behind is installed again, not used.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable
from pathlib import Path


def install_once(done: Path, install: Callable[[], None], *, lock: Path | None = None
                 ) -> None:
    """Run ``install`` unless ``done`` exists; ``install`` must create ``done`` last (it is
    called with the lock held, and only when ``done`` is still missing under it). The lock is
    the file ``lock``, by default beside ``done``: outside any folder ``install`` removes."""
    if done.exists():
        return
    lock = lock or done.with_name(f".{done.name}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if not done.exists():
            install()
    if not done.exists():
        raise RuntimeError(f"the install of {done.name} ended without making {done}")
