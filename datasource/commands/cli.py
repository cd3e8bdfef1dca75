"""The ``rotsink`` command: ``demo``, ``inspect PATH``, ``verify PATH``, ``cat FILE``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TextIO

from commit_protocol.checks.in_flight import COMMIT_TIMEOUT_S, PendingIntent
from commit_protocol.tables import TABLE_FORMATS
from commit_protocol.vocabulary.errors import RotsinkError
from commit_protocol.vocabulary.progress import Step, no_progress


def build_parser() -> argparse.ArgumentParser:
    """The command line: its commands and their flags (docs/operations.md lists them; a test
    checks that every flag listed there exists)."""
    parser = argparse.ArgumentParser(prog="rotsink", description=_plain(__doc__ or ""))
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a local streaming query and read it back")
    demo.add_argument("--dir", help="working directory (default: a new temp directory)")
    demo.add_argument("--batches", type=int, default=12, help="micro-batches to stream")
    demo.add_argument("--rows", type=int, default=500, help="rows per micro-batch")
    demo.add_argument("--table", choices=sorted(TABLE_FORMATS),
                      help="write Parquet into a table of this format too, and read it back "
                           "with its own reader (needs pip install 'rotsink[<format>]')")
    paths = {}
    for name, text in (("inspect", "print the committed batches and in-progress files"),
                       ("verify", "check that storage matches the log: exit 0 if it does, "
                                  "1 on any problem, 2 on a usage error")):
        paths[name] = sub = commands.add_parser(name, help=text)
        sub.add_argument("path", help="output path or URL (s3://bucket/prefix, ...)")
        sub.add_argument("--fs", action="append", default=[], metavar="KEY=VALUE",
                         help="fsspec option, as the fs.* options (e.g. endpoint_url=...)")
    verify = paths["verify"]
    _add_key_option(verify)
    verify.add_argument("--deep", action="store_true",
                        help="also read and decode every committed byte (implied by --key)")
    verify.add_argument("--repair", action="store_true",
                        help="first roll forward commits a dead driver decided but did not "
                             "publish, as a restart of the query would")
    verify.add_argument("--commit-timeout", type=float, default=COMMIT_TIMEOUT_S,
                        metavar="SECONDS",
                        help="how long a commit may stay decided but unpublished before its "
                             "driver counts as dead; a younger one is in flight and waited "
                             f"for (default {COMMIT_TIMEOUT_S:.0f}; 0 when the query is "
                             "known to be stopped)")
    cat = commands.add_parser("cat", help="print one part file's committed content, "
                                          "decrypted and decompressed")
    cat.add_argument("file")
    _add_key_option(cat)
    return parser


def _version() -> str:
    """``rotsink --version``: the release, and the PySpark and Python it runs with (the
    PySpark of a query's driver decides what it may do: README, "Spark versions")."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from commit_protocol.vocabulary.release import RELEASE

    try:
        pyspark = version("pyspark")
    except PackageNotFoundError:
        pyspark = "not installed"
    return f"rotsink {RELEASE} (PySpark {pyspark}, Python {platform.python_version()})"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except BrokenPipeError:
        # the reader of the output went away (`rotsink inspect PATH | head`): end quietly, as
        # a Unix tool does, with the interpreter's last flush of stdout sent nowhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "demo":
            from datasource.commands.demo import run_demo

            return run_demo(args.dir, batches=args.batches, rows=args.rows, table=args.table)
        if args.command == "inspect":
            return _inspect(args.path, _fs_options(args.fs))
        if args.command == "cat":
            return _cat(args.file, args.key)
        return _verify(args.path, _fs_options(args.fs), keys=args.key, deep=args.deep,
                       repair=args.repair, commit_timeout_s=args.commit_timeout)
    except RotsinkError as e:
        print(f"rotsink: {e}", file=sys.stderr)
        return 2


def _add_key_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", action="append", default=[], metavar="REF",
                        help="key reference env:VAR or file:/path (repeat for old keys)")


def _fs_options(items: list[str]) -> dict[str, str]:
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RotsinkError(f"--fs {item!r}: expected KEY=VALUE, e.g. endpoint_url=http://...")
        options[key] = value
    return options


def _inspect(path: str, fs_options: dict[str, str]) -> int:
    from datasource.commands.inspect import batch_summaries, partitions, schema_lines, table_lines

    summaries = batch_summaries(path, fs_options)
    if not summaries:
        print(f"rotsink: {path}: {_NOTHING_COMMITTED}", file=sys.stderr)
        return 1
    for line in schema_lines(path, fs_options) + table_lines(path, fs_options):
        print(line)
    for s in summaries:
        # a compaction file of the log also lists every finalized file before it
        kind = " (log compaction)" if s.compacted else ""
        tasks, rows, size = s.appended
        print(f"batch {s.batch_id:>5}{kind}: finalized {len(s.finalized)} file(s), "
              f"{len(s.in_progress)} in progress; {tasks} task(s) appended {rows} row(s), "
              f"{size} byte(s)")
        for name, size, reason in s.finalized:
            print(f"    + {name} ({size} bytes, rolled by {reason})")
        for directory in s.markers:
            print(f"    * {directory or '(root)'} complete: _SUCCESS written")
    status = partitions(path, fs_options)
    if status.complete or status.awaiting:
        print(f"complete partitions ({len(status.complete)}): "
              + (", ".join(d or "(root)" for d in status.complete) or "none"))
        print(f"partitions awaiting partition.commitDelay ({len(status.awaiting)}): "
              + (", ".join(d or "(root)" for d, _ in status.awaiting) or "none"))
    return 0


def _cat(file: str, keys: list[str]) -> int:
    from datasource.commands.cat import cat

    for chunk in cat(file, keys):
        sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
    return 0


_NOTHING_COMMITTED = ("no rotsink output: no committed batch in its _spark_metadata (a "
                      "wrong path, or a query that has not committed yet)")


def _verify(path: str, fs_options: dict[str, str], *, keys: list[str], deep: bool,
            repair: bool, commit_timeout_s: float) -> int:
    from datasource.commands.inspect import verification_lines, verify

    def waiting(intent: PendingIntent) -> None:
        print(f"rotsink: batch {intent.batch_id} is being committed (decided "
              f"{intent.age_s:.1f} s ago): waiting for its log file; a commit unpublished "
              f"after {commit_timeout_s:.0f} s is reported as its driver's death",
              file=sys.stderr)

    shown = TerminalProgress(sys.stderr) if sys.stderr.isatty() else None
    result = verify(path, fs_options, key_refs=keys, deep=deep, repair=repair,
                    commit_timeout_s=commit_timeout_s, on_wait=waiting,
                    progress=shown or no_progress)
    if shown is not None:
        shown.close()
    try:
        for line in verification_lines(result):
            print(line)
    except BrokenPipeError:  # `rotsink verify PATH | head`: the exit status is still the check's
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if result.ok else 1


class TerminalProgress:
    """A check's progress as one line a terminal redraws (``\r``), at most ten times a
    second, on ``stream``; :meth:`close` ends the line."""

    def __init__(self, stream: TextIO, *, every_s: float = 0.1) -> None:
        self.stream = stream
        self.every_s = every_s
        self._last = 0.0
        self._width = 0

    def __call__(self, step: Step) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s and step.files < step.total_files:
            return
        self._last = now
        line = (f"rotsink verify: {step.what}: {step.files:,} of {step.total_files:,} files, "
                f"{_size(step.bytes)} of {_size(step.total_bytes)}")
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def close(self) -> None:
        if self._width:
            self.stream.write("\n")
            self.stream.flush()


def _size(n: int) -> str:
    """A byte count as a person reads it.

    >>> _size(0), _size(1536), _size(3 << 30)
    ('0 B', '1.5 KiB', '3.0 GiB')
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")



def _plain(text: str) -> str:
    """A docstring as a terminal shows it: without reStructuredText's double backticks.

    >>> _plain("The ``rotsink`` command: ``demo``.")
    'The rotsink command: demo.'
    """
    return text.replace("``", "")


if __name__ == "__main__":
    sys.exit(main())
