"""``verify_output`` and ``rotsink verify``: each kind of damage named, repairs rolled forward."""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from commit_protocol.checks.verification import Verification, verify_output
from commit_protocol.commit.committer import Committer
from commit_protocol.crypto.keys import KeyRefs, derive_key_id
from commit_protocol.crypto.sealed import RECORD_OVERHEAD
from commit_protocol.reading import committed_files, open_committed
from commit_protocol.storage import LocalStorage, open_storage
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.naming import INPROGRESS_DIR
from datasource.commands.cli import main
from tests.support.damage import append, flip_byte, truncate
from tests.unit.test_committer import make, report, task_file
from tests.unit.test_task_writer import (
    SCHEMA_JSON,
    commit,
    config,
    rows,
    run_task,
    storage_of,
)


@dataclass(frozen=True)
class Output:
    """A two-batch output: ``finalized[0]`` from batch 0, one in-progress file ``temp``."""

    root: Path
    finalized: list[str]
    temp: str
    temp_name: str
    committed: int

    def file(self, relative: str) -> Path:
        return self.root / relative


def build(tmp_path: Path, **kw) -> Output:
    """Batch 0 rolls a file at 2 records and leaves 1 in progress; batch 1 rolls that one."""
    cfg = config(tmp_path, rotation={"max_records": 2}, **kw)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(3, 2)]))
    return describe(tmp_path)


def describe(root: Path) -> Output:
    committed = open_committed(LocalStorage(str(root)))
    assert committed is not None
    (f,) = committed[2].in_progress
    return Output(root, finalized_paths(root), f.temp, f.name, f.size)


def finalized_paths(root: Path) -> list[str]:
    committed = open_committed(LocalStorage(str(root)))
    assert committed is not None
    log, latest, state = committed
    return [f.path for f in committed_files(log, latest, state, include_in_progress=False)]


def verify(root: Path, **kw) -> Verification:
    return verify_output(LocalStorage(str(root)), **kw)





def write(out: Output, relative: str, data: bytes) -> None:
    out.file(relative).parent.mkdir(parents=True, exist_ok=True)
    out.file(relative).write_bytes(data)


def first_entry(out: Output) -> bytes:
    """Batch 0's log line for its finalized file (line 3: after the version and the state)."""
    return out.file("_spark_metadata/0").read_bytes().splitlines(keepends=True)[2]


def test_healthy_output_is_ok_with_its_counts(tmp_path):
    out = build(tmp_path)
    result = verify(tmp_path)
    assert result.ok, result.problems
    assert (result.latest, result.finalized_files, result.pending, result.orphans) == \
        (1, 2, [], [])
    assert result.finalized_bytes == sum(out.file(f).stat().st_size for f in out.finalized)
    (check,) = result.in_progress
    assert (check.temp, check.committed, check.uncommitted) == (out.temp, out.committed, 0)
    assert result.authenticated == 0  # nothing decoded unless asked


class CommitsDuringCheck(LocalStorage):
    """Storage on which the next batch commits when a check sizes an in-progress file: after
    the check read its state, before it looked at that state's files. Once, or (``every``)
    each time."""

    def __init__(self, root: Path, commit_next: Callable[[], object], *,
                 every: bool = False) -> None:
        super().__init__(str(root))
        self.commit_next: Callable[[], object] | None = commit_next
        self.every = every

    def size(self, path: str) -> int:
        if self.commit_next is not None and path.startswith(INPROGRESS_DIR):
            commit_next = self.commit_next
            if not self.every:
                self.commit_next = None
            commit_next()
        return super().size(path)


@pytest.mark.parametrize("ring", [False, True], ids=["sizes", "authenticated"])
def test_a_commit_landing_during_the_check_is_not_damage(tmp_path, monkeypatch, ring):
    """``rotsink verify`` beside a running query (or a killed driver's commit worker that
    outlives it): a roll that moves an in-progress file mid-check is no problem; the check
    runs again on the newer state."""
    monkeypatch.setenv("VERIFY_KEY", base64.b64encode(os.urandom(32)).decode())
    encrypted = {"compression": "zstd", "keys": KeyRefs("env:VERIFY_KEY"),
                 "file_suffix": ".jsonl.zst.enc"}
    cfg = config(tmp_path, rotation={"max_records": 2}, **(encrypted if ring else {}))
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))  # 1 row in progress

    def roll_it() -> None:
        commit(tmp_path, cfg, 1, run_task(tmp_path, cfg, 1, [rows(3, 3)]))

    keys = cfg.keys.ring() if ring and cfg.keys is not None else None
    result = verify_output(CommitsDuringCheck(tmp_path, roll_it), ring=keys)
    assert result.ok, result.problems
    assert (result.latest, result.finalized_files) == (1, 3)


def test_a_commit_publishing_during_the_check_is_waited_for(tmp_path, monkeypatch):
    """The window the log's listing cannot see: a commit staged its intent before the check
    began, publishes (moves the in-progress file) while the check reads, and writes its log
    file only after the check. The in-progress directory changed, so the check runs again."""
    cfg = config(tmp_path, rotation={"max_records": 2})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))  # 1 row in progress
    rolls_it = run_task(tmp_path, cfg, 1, [rows(3, 3)])
    monkeypatch.setenv(failpoints.ENV_VAR, "driver.after_stage=raise")
    with pytest.raises(failpoints.FailpointError):
        commit(tmp_path, cfg, 1, rolls_it)  # decided (its intent staged), nothing published

    def publish_without_the_log() -> None:
        monkeypatch.setenv(failpoints.ENV_VAR, "driver.before_log_write=raise")
        with pytest.raises(failpoints.FailpointError):
            Committer(storage_of(cfg), cfg, SCHEMA_JSON).recover()
        monkeypatch.delenv(failpoints.ENV_VAR)

    def write_the_log_while_verify_waits(_seconds: float) -> None:
        Committer(storage_of(cfg), cfg, SCHEMA_JSON).recover()

    monkeypatch.delenv(failpoints.ENV_VAR)
    monkeypatch.setattr("commit_protocol.checks.in_flight.time.sleep",
                        write_the_log_while_verify_waits)
    result = verify_output(CommitsDuringCheck(tmp_path, publish_without_the_log))
    assert result.ok, result.problems
    assert (result.latest, result.pending) == (1, [])


def test_a_query_committing_through_every_check_is_said_so(tmp_path, monkeypatch):
    """When every check races a commit, the problems come with the reason to verify again."""
    monkeypatch.setattr("commit_protocol.checks.verification._BACKOFF_S", 0)
    cfg = config(tmp_path, rotation={"max_records": 2})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    batches = iter(range(1, 100))

    def commit_the_next_batch() -> None:
        batch_id = next(batches)
        commit(tmp_path, cfg, batch_id, run_task(tmp_path, cfg, batch_id,
                                                 [rows(3 + 2 * batch_id, 2)]))

    result = verify_output(CommitsDuringCheck(tmp_path, commit_the_next_batch, every=True))
    assert "changed during each of 5 checks (a query is writing)" in result.problems[-1]


Damage = Callable[[Output], object]

DAMAGE: list[tuple[str, Damage, Callable[[Output], str], str]] = [
    ("finalized-deleted", lambda o: o.file(o.finalized[0]).unlink(),
     lambda o: f"{o.finalized[0]}: listed in the log (18 bytes) but missing",
     "a committed file lost: readers fail or miss rows"),
    ("finalized-shortened", lambda o: truncate(o.file(o.finalized[0]), 5),
     lambda o: f"{o.finalized[0]}: the log commits 18 bytes, storage holds 5 (committed bytes "
               "were lost)",
     "committed bytes lost"),
    ("finalized-extended", lambda o: append(o.file(o.finalized[0]), b'{"id":99}\n'),
     lambda o: f"{o.finalized[0]}: the log commits 18 bytes, storage holds 28 (modified after "
               "its commit)",
     "a finalized file is immutable: Spark's readers would return the extra rows"),
    ("stray-visible-file", lambda o: write(o, "day=1/stray.jsonl", b"{}\n"),
     lambda o: "day=1/stray.jsonl: visible but not committed: readers that list the directory "
               "see it",
     "a glob or sub-directory read lists the directory, not the log"),
    ("log-delta-deleted", lambda o: o.file("_spark_metadata/0").unlink(),
     lambda o: "_spark_metadata/0: missing: readers need every log file from batch 0 to 1",
     "Spark's readers assume contiguous ids since the last compaction"),
    ("log-file-garbage", lambda o: o.file("_spark_metadata/0").write_bytes(b"garbage\n"),
     lambda o: "metadata log file _spark_metadata/0: expected version line 'v1', found "
               "'garbage'",
     "an unparseable log file is named, not a crash"),
    ("log-line-not-json", lambda o: append(o.file("_spark_metadata/0"), b"{not json\n"),
     lambda o: "metadata log file _spark_metadata/0 line 4 is not JSON",
     "a torn or edited line is named with its line number"),
    ("latest-log-file-garbage", lambda o: o.file("_spark_metadata/1").write_bytes(b"v2\n"),
     lambda o: "metadata log file _spark_metadata/1: expected version line 'v1', found 'v2'",
     "the latest state is unreadable: named, nothing else checked"),
    ("duplicate-log-file", lambda o: shutil.copy(o.file("_spark_metadata/1"),
                                                 o.file("_spark_metadata/1.compact")),
     lambda o: "_spark_metadata/1 and _spark_metadata/1.compact: two log files for batch 1: "
               "readers may take either",
     "a reader could take the compaction or the delta"),
    ("path-listed-twice", lambda o: append(o.file("_spark_metadata/1"), first_entry(o)),
     lambda o: f"{o.finalized[0]} (batches 0, 1): listed twice: Spark's readers would return "
               "its rows twice",
     "Spark's file index does not deduplicate log entries"),
    ("in-progress-shorter", lambda o: truncate(o.file(o.temp), 1),
     lambda o: f"{o.temp} (in progress, to be {o.temp_name}): holds 1 bytes; the log commits "
               f"{o.committed}",
     "committed bytes of an open file lost: a loud error, never silent loss"),
    ("in-progress-deleted", lambda o: o.file(o.temp).unlink(),
     lambda o: f"{o.temp} (in progress, to be {o.temp_name}): missing; the log commits "
               f"{o.committed} bytes",
     "the committed prefix of an open file is gone"),
]


@pytest.mark.parametrize("damage, expected, reason", [d[1:] for d in DAMAGE],
                         ids=[d[0] for d in DAMAGE])
def test_damage_is_a_problem_naming_the_file(tmp_path, damage, expected, reason):
    out = build(tmp_path)
    damage(out)
    result = verify(tmp_path)
    assert not result.ok
    assert any(expected(out) in p for p in result.problems), (reason, result.problems)


def hidden_strays(out: Output) -> None:
    for relative in (".hidden", "_tmp/x.jsonl", "day=1/.x.jsonl.crc"):
        write(out, relative, b"x")


def leftover_intent(out: Output) -> None:
    write(out, "_rotsink/intent/1", out.file("_spark_metadata/1").read_bytes())


HARMLESS: list[tuple[str, Damage, str]] = [
    ("hidden-stray-files", hidden_strays,
     "names starting with . or _ are hidden from every listing"),
    ("leftover-intent", leftover_intent,
     "the intent of a published commit, kept until clean-up"),
    ("orphan-temp-file", lambda o: write(o, "_rotsink/inprogress/.zombie.inprogress", b"z"),
     "a temp file no committed state references: invisible, removed by cleanup"),
]


@pytest.mark.parametrize("change, reason", [h[1:] for h in HARMLESS], ids=[h[0] for h in HARMLESS])
def test_invisible_leftovers_are_not_problems(tmp_path, change, reason):
    out = build(tmp_path)
    change(out)
    assert verify(tmp_path).ok, reason


def test_orphans_are_listed(tmp_path):
    build(tmp_path)
    (tmp_path / "_rotsink/inprogress/.zombie.inprogress").write_bytes(b"zombie")
    result = verify(tmp_path)
    assert result.ok and result.orphans == ["_rotsink/inprogress/.zombie.inprogress"]


def test_uncommitted_bytes_of_an_in_progress_file_are_reported_not_a_problem(tmp_path):
    out = build(tmp_path)
    append(out.file(out.temp), b'{"id":12')  # a failed attempt's torn append: never read
    result = verify(tmp_path, deep=True)
    assert result.ok, result.problems
    (check,) = result.in_progress
    assert (check.committed, check.stored, check.uncommitted) == \
        (out.committed, out.committed + 8, 8)


def test_nothing_committed_is_a_problem(tmp_path):
    result = verify(tmp_path)
    assert result.latest is None
    assert result.problems == [f"file://{tmp_path}: no committed batch in _spark_metadata"]


def interrupted_commit(tmp_path: Path, monkeypatch, batch_id: int, *,
                       died_s_ago: float = 120) -> None:
    """Commit batches up to ``batch_id``; the driver dies after the last one's renames,
    ``died_s_ago`` seconds ago (its intent that old)."""
    c = make(tmp_path, max_batches=1)
    for b in range(batch_id + 1):
        f = task_file(tmp_path, f"_rotsink/inprogress/.t{b}", b"1\n",
                      name=f"part-00000-{b:06d}-000.jsonl")
        if b == batch_id:
            monkeypatch.setenv(failpoints.ENV_VAR, "driver.before_log_write=raise")
            with pytest.raises(failpoints.FailpointError):
                c.commit(b, [report(b, f)], now_ms=b)
            monkeypatch.delenv(failpoints.ENV_VAR)
        else:
            c.commit(b, [report(b, f)], now_ms=b)
    then = time.time() - died_s_ago
    os.utime(tmp_path / f"_rotsink/intent/{batch_id}", (then, then))


@pytest.mark.parametrize("batch_id", [0, 1], ids=["first-batch", "after-a-committed-batch"])
def test_pending_intent_is_reported_then_rolled_forward(tmp_path, monkeypatch, batch_id):
    interrupted_commit(tmp_path, monkeypatch, batch_id)
    name = f"part-00000-{batch_id:06d}-000.jsonl"
    assert (tmp_path / name).exists()  # renamed, not yet logged: explained by the intent
    result = verify(tmp_path)
    assert result.pending == [batch_id]
    assert result.problems == [
        f"_rotsink/intent/{batch_id}: batch {batch_id} was decided 120 s ago but not published "
        "(its driver died during the commit): restart the query or run `rotsink verify "
        "--repair`"]
    repaired = verify(tmp_path, repair=True)
    assert repaired.ok, repaired.problems
    assert (repaired.repaired, repaired.latest, repaired.pending) == ([batch_id], batch_id, [])
    assert name in finalized_paths(tmp_path)
    assert verify(tmp_path, repair=True).repaired == []  # idempotent


def test_an_intent_after_a_compaction_is_rolled_forward_by_a_new_process(tmp_path,
                                                                          monkeypatch):
    """``verify --repair`` in a process of its own (no state cached) rebuilds the intent's
    state from the heads before it, back to the last compaction: under the path's interval
    (10 here), not an interval guessed from the intent's name (the crash loop once saw
    "cannot repair: metadata log files 0..34 are missing" so, batch 40 of interval 3)."""
    import dataclasses

    from commit_protocol.commit.committer import Committer
    from commit_protocol.log import STATES

    c = make(tmp_path, max_batches=1)  # compaction every 3rd batch, old log files deleted
    c = Committer(c.storage, dataclasses.replace(c.config, compact_interval=3,
                                                 cleanup_delay_ms=0), c.schema_json)
    now = int(time.time() * 1000) + 60_000  # after every log file's mtime: clean-up takes them
    for b in range(14):
        f = task_file(tmp_path, f"_rotsink/inprogress/.t{b}", b"1\n",
                      name=f"part-00000-{b:06d}-000.jsonl")
        if b == 13:
            monkeypatch.setenv(failpoints.ENV_VAR, "driver.before_log_write=raise")
            with pytest.raises(failpoints.FailpointError):
                c.commit(b, [report(b, f)], now_ms=now + b)
            monkeypatch.delenv(failpoints.ENV_VAR)
        else:
            c.commit(b, [report(b, f)], now_ms=now + b)
    assert not (tmp_path / "_spark_metadata" / "0").exists()  # cleaned up
    then = time.time() - 120
    os.utime(tmp_path / "_rotsink/intent/13", (then, then))
    STATES.clear()  # a new process
    result = verify(tmp_path)
    assert result.pending == [13] and len(result.problems) == 1, result.problems
    STATES.clear()
    repaired = verify(tmp_path, repair=True)
    assert repaired.ok, repaired.problems
    assert repaired.repaired == [13]
    assert "part-00000-000013-000.jsonl" in finalized_paths(tmp_path)


def test_a_young_intent_is_waited_for_then_reported_once_it_stalls(tmp_path, monkeypatch):
    """A driver dead a moment ago: its intent is a commit in flight until the timeout, so
    verify waits (saying so), then reports it; ``--repair`` waits too, then finishes it."""
    interrupted_commit(tmp_path, monkeypatch, 1, died_s_ago=0)
    waited: list[int] = []
    started = time.monotonic()
    result = verify(tmp_path, commit_timeout_s=0.5, on_wait=lambda i: waited.append(i.batch_id))
    assert time.monotonic() - started >= 0.4
    assert (waited, result.pending) == ([1], [1])
    assert result.problems[0].startswith("_rotsink/intent/1: batch 1 was decided ")
    assert "s ago but not published (its driver died during the commit)" in result.problems[0]
    repaired = verify(tmp_path, commit_timeout_s=0.5, repair=True)
    assert repaired.ok and repaired.repaired == [1]


def test_a_live_commit_is_waited_for_never_reported_or_repaired(tmp_path, monkeypatch):
    """A driver between its intent and its log file (a live one: it publishes while verify
    waits) is no problem, and ``--repair`` leaves its commit to it."""
    interrupted_commit(tmp_path, monkeypatch, 1, died_s_ago=0)
    cfg = config(tmp_path)
    finished: list[int | None] = []

    def the_driver_publishes(_seconds: float) -> None:
        if not finished:
            finished.append(Committer(storage_of(cfg), cfg, SCHEMA_JSON).recover())

    monkeypatch.setattr("commit_protocol.checks.in_flight.time.sleep", the_driver_publishes)
    for repair in (False, True):
        finished.clear()
        if repair:
            interrupted_commit(tmp_path / "again", monkeypatch, 1, died_s_ago=0)
            cfg = config(tmp_path / "again")
        result = verify(tmp_path / "again" if repair else tmp_path, repair=repair)
        assert result.ok, result.problems
        assert (finished, result.repaired, result.latest) == ([1], [], 1)


def test_intents_of_published_batches_are_no_problem_and_stay(tmp_path):
    """Clean-up deletes them after ``log.compactInterval`` batches; until then a repeated
    commit of their batch fails to stage again."""
    leftover_intent(build(tmp_path))
    result = verify(tmp_path, repair=True)
    assert result.ok and result.repaired == []
    assert (tmp_path / "_rotsink/intent/1").exists()


# -- decoding and authentication --------------------------------------------------------------
@pytest.fixture
def encrypted(tmp_path, monkeypatch) -> Output:
    key = os.urandom(32)
    monkeypatch.setenv("VERIFY_KEY", base64.b64encode(key).decode())
    monkeypatch.setenv("OTHER_KEY", os.urandom(32).hex())
    monkeypatch.setenv("KEY_ID", derive_key_id(key))
    return build(tmp_path, compression="zstd", keys=KeyRefs("env:VERIFY_KEY"),
                 file_suffix=".jsonl.zst.enc")


def test_encrypted_output_authenticates_with_the_right_key(tmp_path, encrypted):
    result = verify(tmp_path, ring=KeyRefs(read_refs=("env:VERIFY_KEY",)).ring())
    assert result.ok, result.problems
    assert result.authenticated == 3  # two finalized files and one committed prefix


def test_a_flipped_bit_names_the_file_and_the_record(tmp_path, encrypted):
    path = encrypted.file(encrypted.finalized[0])
    size = path.stat().st_size
    flip_byte(path, size - 1)  # the tag of the FINAL record
    result = verify(tmp_path, ring=KeyRefs(read_refs=("env:VERIFY_KEY",)).ring())
    assert result.authenticated == 2
    assert f"{encrypted.finalized[0]}: record at byte {size - RECORD_OVERHEAD} fails " \
        "authentication" in result.problems[0]


WRONG_KEYS = [
    ("wrong-key-for-the-id", lambda: (f"{os.environ['KEY_ID']}=env:OTHER_KEY",),
     "wrong key for key id", "the key check in the header catches a wrong key"),
    ("unknown-key-id", lambda: ("env:OTHER_KEY",), "no configured key has that id",
     "a file's key id must be in the ring"),
]


@pytest.mark.parametrize("refs, expected, reason", [w[1:] for w in WRONG_KEYS],
                         ids=[w[0] for w in WRONG_KEYS])
def test_a_wrong_key_is_a_problem(tmp_path, encrypted, refs, expected, reason):
    result = verify(tmp_path, ring=KeyRefs(read_refs=refs()).ring())
    assert result.authenticated == 0 and len(result.problems) == 3, reason
    assert all(expected in p for p in result.problems), result.problems
    assert encrypted.finalized[0] in result.problems[0]


def test_deep_on_an_encrypted_path_needs_the_keys(tmp_path, encrypted):
    assert verify(tmp_path, deep=True).problems == [
        f"file://{tmp_path} is encrypted: authenticating its files needs its keys (ring)"]


CORRUPT_DECODES = [
    ("zstd-frame", {"compression": "zstd", "file_suffix": ".jsonl.zst"}, 5,
     "cannot decompress zstd data", "zstd frames carry checksums; deep reads them"),
    ("parquet-footer", {"format": "parquet", "file_suffix": ".parquet"}, -1,
     "ArrowInvalid", "a damaged Parquet footer fails pyarrow's reader"),
]


@pytest.mark.parametrize("options, offset, expected, reason", [c[1:] for c in CORRUPT_DECODES],
                         ids=[c[0] for c in CORRUPT_DECODES])
def test_deep_decodes_unencrypted_files(tmp_path, options, offset, expected, reason):
    cfg = config(tmp_path, rotation={"max_batches": 1}, **options)
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    assert verify(tmp_path, deep=True).authenticated == 1
    (name,) = finalized_paths(tmp_path)
    flip_byte(tmp_path / name, offset if offset >= 0 else (tmp_path / name).stat().st_size - 1)
    result = verify(tmp_path, deep=True)
    assert result.authenticated == 0, reason
    (problem,) = result.problems
    assert problem.startswith(f"{name}: ") and expected in problem, problem


# -- object storage ---------------------------------------------------------------------------
def test_verify_on_s3_names_a_stray_object_and_a_missing_file(tmp_path, s3_endpoint):
    import uuid

    import s3fs

    bucket = f"rotsink-verify-{uuid.uuid4().hex[:8]}"
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint)
    fs.mkdir(bucket)
    cfg = config(tmp_path, path=f"s3://{bucket}/out", fs_options={"endpoint_url": s3_endpoint},
                 rotation={"max_records": 2})
    commit(tmp_path, cfg, 0, run_task(tmp_path, cfg, 0, [rows(0, 3)]))
    storage = storage_of(cfg)
    healthy = verify_output(storage, deep=True)
    assert healthy.ok, healthy.problems
    assert (healthy.finalized_files, len(healthy.in_progress), healthy.authenticated) == (1, 1, 2)
    fs.pipe(f"{bucket}/out/stray.jsonl", b"{}\n")
    fs.rm(f"{bucket}/out/part-00000-000000-000.jsonl")
    problems = verify_output(open_storage(cfg.path, cfg.fs_options)).problems
    assert problems == [
        "part-00000-000000-000.jsonl: listed in the log (18 bytes) but missing",
        "stray.jsonl: visible but not committed: readers that list the directory see it"]


# -- the command line -------------------------------------------------------------------------
def test_cli_repair_rolls_forward_and_exit_codes_follow(tmp_path, monkeypatch, capsys):
    interrupted_commit(tmp_path, monkeypatch, 0)
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("nothing committed: 0 finalized file(s) (0 bytes)")
    assert "PROBLEM _rotsink/intent/0: batch 0 was decided 120 s ago but not published" in out
    assert main(["verify", str(tmp_path), "--repair"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "committed up to batch 0: 1 finalized file(s) (2 bytes), 0 in progress "
        "(0 committed bytes, 0 uncommitted)",
        "rows finalized: 1 (the log's totals)",
        "REPAIRED batch 0"]
    assert main(["verify", str(tmp_path)]) == 0


def test_cli_reports_uncommitted_bytes_and_deep_counts(tmp_path, capsys):
    out = build(tmp_path)
    append(out.file(out.temp), b"zombie")
    assert main(["verify", str(tmp_path), "--deep"]) == 0
    assert capsys.readouterr().out == (
        f"committed up to batch 1: 2 finalized file(s) (36 bytes), 1 in progress "
        f"({out.committed} committed bytes, 6 uncommitted), 3 authenticated\n"
        "rows finalized: 4 (the log's totals)\n")


def test_cli_on_an_encrypted_path_needs_a_key(tmp_path, encrypted, capsys):
    assert main(["verify", str(tmp_path)]) == 2
    assert f"{tmp_path} is encrypted: pass --key REF to authenticate its files" in \
        capsys.readouterr().err
    assert main(["verify", str(tmp_path), "--key", "env:VERIFY_KEY"]) == 0
    assert "3 authenticated" in capsys.readouterr().out
    assert main(["verify", str(tmp_path), "--key", "env:OTHER_KEY"]) == 1
    out = capsys.readouterr().out
    assert f"PROBLEM {encrypted.finalized[0]} was encrypted with key id" in out
    assert main(["verify", str(tmp_path), "--key", "env:UNSET_VERIFY_KEY"]) == 2
    assert "environment variable 'UNSET_VERIFY_KEY' is not set" in capsys.readouterr().err
