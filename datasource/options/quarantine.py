"""The options of bad rows: ``errors.mode``, ``errors.quarantinePath``,
``errors.maxQuarantinedShare`` (commit_protocol.task.quarantine says what they do).

The quarantine is a rotsink output of its own, JSON lines, every file finished at the batch
that wrote it; its config is parsed from options as a query's is, taking the output's storage
options, encryption key (a refused row holds the same data as the output's rows), log
settings and query name, so every check a query's options get applies to it too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from commit_protocol.records.config import SinkConfig
from commit_protocol.vocabulary.errors import OptionError
from datasource.options.names import (
    CLEANUP_DELAY,
    COMPACT_INTERVAL,
    ENCRYPTION_KEY,
    ENCRYPTION_KEY_ID,
    ENCRYPTION_KEYS,
    ERRORS_MODE,
    FORMAT,
    FSYNC,
    MAX_BATCHES,
    MAX_QUARANTINED_SHARE,
    PATH,
    QUARANTINE_PATH,
    QUERY_NAME,
    RETENTION,
)
from datasource.options.values import driver_path

FAIL, QUARANTINE = "fail", "quarantine"
DEFAULT_FOLDER = "_quarantine"  # under the output: hidden from Spark's listing of the output
# what the quarantine takes from the query's options as they are
_INHERITED = (ENCRYPTION_KEY, ENCRYPTION_KEY_ID, ENCRYPTION_KEYS, COMPACT_INTERVAL, RETENTION,
              CLEANUP_DELAY, FSYNC, QUERY_NAME)


def with_error_policy(config: SinkConfig, opts: Mapping[str, str],
                      parse: Callable[[Mapping[str, str]], SinkConfig]) -> SinkConfig:
    """``config`` with the quarantine's config (``errors.mode=quarantine``) and its limit;
    ``opts`` are the query's options, lower-cased keys; ``parse`` parses a query's options."""
    mode = opts.get(ERRORS_MODE.lower(), FAIL).strip().lower()
    if mode not in (FAIL, QUARANTINE):
        raise OptionError(f"option {ERRORS_MODE}={opts[ERRORS_MODE.lower()]!r}: expected "
                          f"{FAIL} (a refused row fails the batch, the default) or {QUARANTINE} "
                          f"(refused rows go to {QUARANTINE_PATH})")
    path, share = opts.get(QUARANTINE_PATH.lower()), opts.get(MAX_QUARANTINED_SHARE.lower())
    if mode == FAIL:
        for key, value in ((QUARANTINE_PATH, path), (MAX_QUARANTINED_SHARE, share)):
            if value is not None:
                raise OptionError(f"option {key}={value!r} is for {ERRORS_MODE}={QUARANTINE}; "
                                  f"this query has {ERRORS_MODE}={FAIL}")
        return config
    where = driver_path(path) if path else f"{config.path.rstrip('/')}/{DEFAULT_FOLDER}"
    _check_apart(config.path, where)
    inherited = {key.lower() for key in _INHERITED}
    quarantine = parse({**{key: value for key, value in opts.items() if key in inherited},
                        PATH: where, FORMAT: "jsonl", MAX_BATCHES: "1"})
    return replace(config, quarantine=replace(quarantine, fs_options=config.fs_options),
                   max_quarantined_share=None if share is None else _share(share))


def _share(text: str) -> float:
    """The limit's value.

    >>> _share("0.01"), _share("1")
    (0.01, 1.0)
    """
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0 < share <= 1:
        raise OptionError(f"option {MAX_QUARANTINED_SHARE}={text!r}: expected a share of a "
                          "batch's rows above 0 and at most 1 (0.01: fail a batch when more "
                          "than 1% of its rows are refused)")
    return share


def _check_apart(output: str, quarantine: str) -> None:
    """The quarantine is neither the output nor a folder of it that readers of the output
    list (a name not starting with ``_`` or ``.``), and does not hold the output.

    >>> _check_apart("/data/out", "/data/out/_quarantine")
    >>> _check_apart("/data/out", "/data/out/bad")
    Traceback (most recent call last):
    ...
    commit_protocol.vocabulary.errors.OptionError: option errors.quarantinePath='/data/out/bad' \
is inside the output /data/out, where its files would be listed with the output's: choose a \
folder whose name starts with '_' (the default: /data/out/_quarantine) or one outside
    """
    out, bad = (p.removeprefix("file://").rstrip("/") for p in (output, quarantine))
    if out == bad or out.startswith(bad + "/"):
        raise OptionError(f"option {QUARANTINE_PATH}={quarantine!r} holds the output "
                          f"{output}: the quarantine is a place of its own (the default: "
                          f"{out}/{DEFAULT_FOLDER})")
    if bad.startswith(out + "/") and bad[len(out) + 1:][:1] not in ("_", "."):
        raise OptionError(f"option {QUARANTINE_PATH}={quarantine!r} is inside the output "
                          f"{output}, where its files would be listed with the output's: "
                          f"choose a folder whose name starts with '_' (the default: "
                          f"{out}/{DEFAULT_FOLDER}) or one outside")
