"""Durations as options give them: ``"90s"``, ``"15 minutes"``, ``"1h"``, ``"0"`` (off)."""

from __future__ import annotations

import re

from commit_protocol.vocabulary.errors import OptionError

_UNITS_MS = {"ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
             "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
             "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
             "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
             "d": 86_400_000, "day": 86_400_000, "days": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration_ms(key: str, text: str) -> int:
    """``"90s"``, ``"15 minutes"``, ``"1h"``, ``"0"`` (off) as milliseconds.

    >>> parse_duration_ms("rotation.interval", "15 minutes")
    900000
    """
    match = _DURATION.match(text)
    unit = match.group(2).lower() if match else None
    if not match or (unit not in _UNITS_MS and not (unit == "" and float(match.group(1)) == 0)):
        raise OptionError(f"option {key}={text!r}: expected a duration such as '90s', "
                          "'15 minutes' or '1h' (units ms, s, m/min, h, d), or 0 to disable")
    return int(float(match.group(1)) * _UNITS_MS.get(unit, 0))
