"""The per-file checks of ``rotsink verify``: every listed file exists with its logged size,
every in-progress file holds its committed bytes, no visible file is unlisted, and (when asked)
every committed byte decodes and authenticates. Each problem is one line naming the file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from commit_protocol.formats import FORMATS
from commit_protocol.reading import CommittedFile, open_plaintext
from commit_protocol.reading.bulk import finished_batches, staged_stream
from commit_protocol.records.state import SinkState
from commit_protocol.storage import Storage
from commit_protocol.vocabulary.errors import RotsinkError
from commit_protocol.vocabulary.progress import Progress, Step, no_progress

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class InProgressCheck:
    """An in-progress file of the latest state: ``committed`` bytes of ``temp`` are committed,
    ``stored`` bytes are on storage (None: the file is missing)."""

    name: str
    temp: str
    committed: int
    stored: int | None

    @property
    def uncommitted(self) -> int:
        """Bytes past the committed offset: a failed or zombie attempt's, never read."""
        return max(0, (self.stored or 0) - self.committed)


def check_finalized(storage: Storage, listed: dict[str, int], problems: list[str],
                    progress: Progress = no_progress) -> list[CommittedFile]:
    """Each listed file exists with exactly its logged size; returns the intact ones."""
    intact = []
    total = sum(listed.values())
    done = 0
    for number, (path, size) in enumerate(listed.items(), start=1):
        done += size
        progress(Step("sizes checked", number, len(listed), done, total))
        stored = _stored_size(storage, path, problems)
        if stored is None:
            problems.append(f"{path}: listed in the log ({size} bytes) but missing")
        elif stored != size:
            why = "modified after its commit" if stored > size else "committed bytes were lost"
            problems.append(f"{path}: the log commits {size} bytes, storage holds {stored} "
                            f"({why})")
        else:
            intact.append(CommittedFile(path, size, "", False))
    return intact


def check_in_progress(storage: Storage, state: SinkState, problems: list[str], *,
                      moved: frozenset[str] = frozenset(),
                      ) -> tuple[list[InProgressCheck], list[CommittedFile]]:
    """Each in-progress file holds at least its committed bytes (more is a failed or zombie
    attempt's tail, which no reader reads); returns the checks and the intact prefixes.

    A temp in ``moved`` was renamed by a commit decided but not yet published (readers
    follow it to its final name): missing there is that commit's, not damage, while its
    final name exists.
    """
    checks, intact = [], []
    for f in state.in_progress:
        stored = _stored_size(storage, f.temp, problems)
        if stored is None and f.temp in moved and storage.exists(f.name):
            stored = _stored_size(storage, f.name, problems)
        checks.append(InProgressCheck(f.name, f.temp, f.size, stored))
        where = f"{f.temp} (in progress, to be {f.name})"
        if stored is None and f.size:
            problems.append(f"{where}: missing; the log commits {f.size} bytes")
        elif stored is not None and stored < f.size:
            problems.append(f"{where}: holds {stored} bytes; the log commits {f.size}")
        elif f.size:
            intact.append(CommittedFile(f.temp, f.size, f.directory, True, final=f.name,
                                        staged=FORMATS[state.format].bulk))
    return checks, intact


def _stored_size(storage: Storage, path: str, problems: list[str]) -> int | None:
    """Size on storage; None when missing (a damaged segmented file is a problem too)."""
    try:
        return storage.size(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        problems.append(f"{path}: cannot read its size ({e})")
        return None


def unlisted_visible(storage: Storage, known: set[str], *,
                     tables_own: tuple[str, ...] = ()) -> list[str]:
    """Visible files that are neither ``known`` nor in a top-level directory a table that
    follows the log keeps its own files in (``tables_own``)."""
    return [unlisted_problem(path) for path in unlisted_paths(storage, known, tables_own)]


def unlisted_paths(storage: Storage, known: set[str], tables_own: tuple[str, ...]) -> list[str]:
    return [info.path for info in sorted(storage.walk(""), key=lambda i: i.path)
            if _visible(info.path) and info.path not in known
            and info.path.split("/", 1)[0] not in tables_own]


def unlisted_problem(path: str) -> str:
    return f"{path}: visible but not committed: readers that list the directory see it"


def _visible(path: str) -> bool:
    """Whether a directory listing shows ``path``: Spark's ``shouldFilterOutPathName`` hides
    names starting with ``.``, and with ``_`` unless they hold ``=`` (a partition directory).

    >>> _visible("day=1/part-0.jsonl"), _visible("_p=1/a"), _visible("_rotsink/a")
    (True, True, False)
    """
    return not any(part.startswith(".") or (part.startswith("_") and "=" not in part)
                   for part in path.split("/"))


def authenticate(storage: Storage, state: SinkState, files: list[CommittedFile],
                 ring: Mapping[str, bytes] | None, problems: list[str],
                 progress: Progress = no_progress) -> int:
    """Decode (decrypt, decompress) the committed bytes of ``files``, streamed; how many
    passed."""
    if state.encrypted and not ring:
        problems.append(f"{storage.root_uri} is encrypted: authenticating its files needs "
                        "its keys (ring)")
        return 0
    passed = 0
    total = sum(f.length for f in files)
    done = 0
    for number, f in enumerate(files, start=1):
        progress(Step("bytes decoded", number - 1, len(files), done, total))
        done += f.length
        try:
            _decode_all(storage, state, f, ring)
        except (RotsinkError, OSError, ValueError, pa.ArrowException) as e:
            # rotsink's errors name the file and byte; pyarrow's name neither
            problems.append(str(e) if f.path in str(e) else f"{f.path}: {type(e).__name__}: {e}")
        else:
            passed += 1
    progress(Step("bytes decoded", len(files), len(files), done, total))
    return passed


def _decode_all(storage: Storage, state: SinkState, f: CommittedFile,
                ring: Mapping[str, bytes] | None) -> None:
    """Read every committed byte of ``f`` as a reader would, keeping nothing: row files to
    their plaintext (authenticated, decompressed), bulk files and staged rows to batches."""
    options: dict[str, Any] = {"layout": state, "ring": ring, "schema": None}
    if f.staged:
        batches = staged_stream(storage, f, **options)
    elif FORMATS[state.format].bulk:
        batches = finished_batches(storage, f, **options)
    else:
        with open_plaintext(storage, f, layout=state, ring=ring) as stream:
            while stream.read(CHUNK_BYTES):
                pass
        return
    for _ in batches:
        pass
