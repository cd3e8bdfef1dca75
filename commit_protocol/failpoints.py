"""Named failpoints: places in the protocol where a test can make the code fail or die.

Inert unless armed. Arming works across processes (Spark runs our code in Python workers),
so the arming state lives in the ``ROTSINK_FAILPOINTS`` environment variable, inherited by
workers started after it is set, or in a file named by ``ROTSINK_FAILPOINTS_FILE`` that is read
on every hit, so a test can arm and disarm points while a query runs.

Syntax: ``name=action[:count],name2=action`` with action ``raise`` (raise ``FailpointError``)
or ``kill`` (``os._exit(137)``, as a SIGKILL would end the process: no cleanup, no flush).
``count`` limits how many hits fire (default: every hit). A file armed with ``raise:1`` fires
once per process; use the file-based form with a marker directory to fire once across processes:
``name=raise:once`` fires for the first process that creates ``<file>.<name>.fired``.
"""

from __future__ import annotations

import os

from commit_protocol.errors import RotsinkError

ENV_VAR = "ROTSINK_FAILPOINTS"
FILE_ENV_VAR = "ROTSINK_FAILPOINTS_FILE"

_hits: dict[str, int] = {}


class FailpointError(RotsinkError):
    """Raised by an armed failpoint with action ``raise``."""


def _armed_spec() -> str:
    spec = os.environ.get(ENV_VAR, "")
    path = os.environ.get(FILE_ENV_VAR)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                spec = ",".join(filter(None, [spec, f.read().strip()]))
        except FileNotFoundError:
            pass
    return spec


def _parse(spec: str) -> dict[str, tuple[str, str | None]]:
    armed: dict[str, tuple[str, str | None]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        action, _, count = action.partition(":")
        armed[name] = (action or "raise", count or None)
    return armed


def _should_fire(name: str, count: str | None) -> bool:
    if count is None:
        return True
    if count == "once":
        marker = f"{os.environ.get(FILE_ENV_VAR, '/tmp/rotsink-failpoints')}.{name}.fired"
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False
    _hits[name] = _hits.get(name, 0) + 1
    return _hits[name] <= int(count)


def hit(name: str) -> None:
    """Pass the failpoint ``name``: do nothing unless a test armed it."""
    if ENV_VAR not in os.environ and FILE_ENV_VAR not in os.environ:
        return
    armed = _parse(_armed_spec())
    if name not in armed:
        return
    action, count = armed[name]
    if not _should_fire(name, count):
        return
    if action == "kill":
        os._exit(137)
    raise FailpointError(f"failpoint {name!r} fired")
