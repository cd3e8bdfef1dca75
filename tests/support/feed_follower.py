"""A downstream query that follows the crash loop's output through the change feed
(``readStream.format("rotsink")`` into a second rotsink path), killed with every life of the
upstream driver and restarted with the next: at the end it must hold every upstream row
exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Follower:
    workdir: Path
    upstream_url: str
    read_options: dict[str, str] = field(default_factory=dict)
    kills: int = 0
    _child: subprocess.Popen | None = None

    @property
    def out(self) -> Path:
        return self.workdir / "follower-output"

    def _command(self, mode: str) -> list[str]:
        return [sys.executable, "-m", "tests.crash_job", "--follow", mode, self.upstream_url,
                str(self.out), str(self.workdir / "follower-checkpoint"),
                json.dumps(self.read_options)]

    def start(self, life: int) -> None:
        """Start following (processing-time triggers) beside the upstream's life ``life``."""
        log = open(self.workdir / "logs" / f"follower-{life:04d}.log", "w")  # noqa: SIM115
        self._child = subprocess.Popen(self._command("stream"), cwd=ROOT, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=log,
                                       start_new_session=True)
        log.close()

    def kill(self) -> None:
        """SIGKILL the follower's whole driver (its JVM and Python workers included)."""
        if self._child is None:
            return
        try:
            os.killpg(self._child.pid, signal.SIGKILL)
            self.kills += 1
        except ProcessLookupError:
            pass
        self._child.wait()
        self._child = None

    def finish(self, timeout_s: float = 600) -> int:
        """Run the follower to the upstream's last committed batch (availableNow)."""
        with open(self.workdir / "logs" / "follower-final.log", "w") as log:
            return subprocess.run(self._command("available-now"), cwd=ROOT,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=log, timeout=timeout_s).returncode

    def ids(self, spark) -> Counter:
        rows = spark.read.format("rotsink").load(str(self.out)).select("id").collect()
        return Counter(r.id for r in rows)
