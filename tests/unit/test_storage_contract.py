"""One contract for every storage backend: local disk, ``memory://`` and S3 on two local
servers (127.0.0.1): moto, and SeaweedFS, which serves requests concurrently (no lock).

The commit protocol relies on exactly these behaviours; a backend that passes needs no change
above it. Cases that only object stores can (or must) show are run on ``memory`` and S3.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import multiprocessing
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commit_protocol.commit.committer import Committer
from commit_protocol.commit.housekeeping import rotsink_upload
from commit_protocol.commit.publishing import publish_file
from commit_protocol.reading import committed_files, open_committed, read_batches
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.records.plan import WritePlan
from commit_protocol.storage import FileInfo, LocalStorage, open_storage
from commit_protocol.storage.object_store import ObjectStorage
from commit_protocol.storage.objects import parse_fs_options
from commit_protocol.storage.s3 import S3Objects, already_exists
from commit_protocol.storage.urls import open_object_storage
from commit_protocol.task.task_writer import TaskWriter
from commit_protocol.vocabulary.errors import SegmentError, TruncatedFileError, UnsafeStorageError
from commit_protocol.vocabulary.naming import INPROGRESS_DIR

MiB = 1 << 20


S3_SERVERS = ("moto", "seaweedfs")
STORES = (*S3_SERVERS, "gcs", "azure")  # every object store with a server of its own
ENDPOINT_AND_BUCKET = {"moto": ("s3_endpoint", "s3_bucket"),
                       "seaweedfs": ("seaweedfs_endpoint", "seaweedfs_bucket"),
                       "gcs": ("gcs_endpoint", "gcs_bucket"),
                       "azure": ("azure_endpoint", "azure_container")}


def make_storage(kind: str, request, tmp_path):
    if kind == "local":
        return LocalStorage(str(tmp_path))
    if kind == "memory":
        return open_object_storage(f"memory://rotsink-{uuid.uuid4().hex}", {})
    endpoint, bucket = (request.getfixturevalue(name) for name in ENDPOINT_AND_BUCKET[kind])
    if kind == "gcs":
        from tests.support.gcsserver import OPTIONS

        return open_object_storage(f"gs://{bucket}/{uuid.uuid4().hex}",
                                   {"endpoint_url": endpoint, **OPTIONS})
    if kind == "azure":
        from tests.support.azurite import ACCOUNT, options

        # Hadoop's spelling, as Spark's readers name the files (wasbs://container@account...)
        return open_object_storage(
            f"wasbs://{bucket}@{ACCOUNT}.blob.core.windows.net/{uuid.uuid4().hex}",
            options(endpoint))
    return open_object_storage(f"s3://{bucket}/{uuid.uuid4().hex}", {"endpoint_url": endpoint})


def reopen_args(storage) -> tuple[str, dict[str, str]]:
    """URL and fs options that open ``storage`` again (in another process)."""
    if isinstance(storage, LocalStorage):
        return storage.root, {}
    if storage.root_uri.startswith("gs://"):
        from tests.support.gcsserver import OPTIONS

        return storage.root_uri, {"endpoint_url": storage.fs._endpoint, **OPTIONS}
    if storage.root_uri.startswith("wasbs://"):
        return storage.root_uri, {"connection_string": storage.fs.connection_string}
    return storage.root_uri, {"endpoint_url": storage.fs.endpoint_url}


@pytest.fixture(params=["local", "memory", *STORES])
def storage(request, tmp_path):
    st = make_storage(request.param, request, tmp_path)
    yield st
    if request.param == "memory":
        st.delete_tree("")  # the memory store is process-wide


@pytest.fixture(params=["memory", *STORES])
def object_storage(request, tmp_path):
    st = make_storage(request.param, request, tmp_path)
    yield st
    if request.param == "memory":
        st.delete_tree("")


@pytest.fixture(params=S3_SERVERS)
def s3_storage(request, tmp_path):
    return make_storage(request.param, request, tmp_path)


def append(storage, path: str, *chunks: bytes) -> None:
    """One append session: open, write each chunk, close."""
    with storage.open_append(path) as handle:
        for chunk in chunks:
            handle.write(chunk)


def small_segments(storage, size: int = 4) -> None:
    if isinstance(storage, ObjectStorage):
        storage.segment_bytes = size


def objects_below(storage: ObjectStorage, path: str) -> list[str]:
    """Object names below ``path``, straight from the store's listing (not s3fs's ``find``,
    which shows an empty directory SeaweedFS keeps after its objects went as an object)."""
    base = f"{storage.root}/{path}"
    return sorted(b.path[len(base) + 1:] for b in storage._objects.list(base + "/"))


# -- exclusive creates -----------------------------------------------------------------------
def test_write_exclusive_creates_once_and_never_replaces(storage):
    storage.write_exclusive("_rotsink/intent/0", [b"v1\n", b"state\n"])
    with pytest.raises(FileExistsError):
        storage.write_exclusive("_rotsink/intent/0", [b"other"])
    assert storage.read("_rotsink/intent/0") == b"v1\nstate\n"
    assert storage.open_read("_rotsink/intent/0").readline() == b"v1\n"


def test_create_marker_reports_who_created_it(storage):
    assert storage.create_marker("_rotsink/claims/a") is True
    assert storage.create_marker("_rotsink/claims/a") is False
    assert storage.size("_rotsink/claims/a") == 0


RACES = ("create_marker", "write_exclusive", "publish")


def try_create(storage, operation: str, race: str, writer: int) -> bool:
    """One racer's attempt to create ``race/<race>``; True if it won. ``publish`` moves
    ``src/<race>-<writer>``, which the test wrote before."""
    target = f"race/{race}"
    if operation == "create_marker":
        return storage.create_marker(target)
    try:
        if operation == "write_exclusive":
            storage.write_exclusive(target, [f"writer {writer}".encode()])
        else:
            storage.publish(f"src/{race}-{writer}", target)
    except FileExistsError:
        return False
    return True


def prepare_sources(storage, races: list[str], writers: int) -> None:
    for race in races:
        for i in range(writers):
            storage.write_exclusive(f"src/{race}-{i}", [f"writer {i}".encode()])


def check_one_winner(storage, operation: str, race: str, won: list[bool], where: str = "") -> None:
    assert won.count(True) == 1, (where, operation, race, won)
    if operation != "create_marker":
        assert storage.read(f"race/{race}") == f"writer {won.index(True)}".encode()


@pytest.mark.parametrize("kind", ["local", "memory", "moto", "gcs", "azure"])
@pytest.mark.parametrize("operation", RACES)
def test_racing_creators_exactly_one_wins(kind, operation, request, tmp_path):
    """Eight threads create the same name at once, five times: one winner each round. (On
    SeaweedFS racers run as processes, below: there a loser of a race waits for the server's
    lock in steps of a second, so eight threads times fifteen rounds would take 30 s.)"""
    storage = make_storage(kind, request, tmp_path)
    races = [f"{operation}-{round_}" for round_ in range(5)]
    if operation == "publish":
        prepare_sources(storage, races, 8)
    for race in races:
        barrier = threading.Barrier(8)

        def create(i: int, race: str = race, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return try_create(storage, operation, race, i)

        with ThreadPoolExecutor(8) as pool:
            won = list(pool.map(create, range(8)))
        check_one_winner(storage, operation, race, won)
    if kind == "memory":
        storage.delete_tree("")  # the memory store is process-wide


def race_in_process(stores: list[tuple[str, dict[str, str]]], races: list[tuple[int, str, str]],
                    writer: int, start, barrier, results) -> None:
    """A racing process of :func:`test_racing_processes_exactly_one_wins`: its own clients
    (connections, event loop), meeting the others at the barrier before each race."""
    opened = [open_storage(url, options) for url, options in stores]
    start.wait(timeout=60)
    won = []
    for store, operation, race in races:
        barrier.wait(timeout=60)
        won.append(try_create(opened[store], operation, race, writer))
    results.put((writer, won))


def test_racing_processes_exactly_one_wins(request, tmp_path):
    """Four processes, each with its own clients, create the same names at once: exactly one
    winner of every race on every backend processes share. On SeaweedFS no lock stands in
    front of the server (moto serialises its requests, so there it cannot race; local disk
    races in the kernel). One set of processes races on all three (spawning costs seconds)."""
    kinds = ("local", "moto", "seaweedfs")
    stores = [make_storage(kind, request, tmp_path / kind) for kind in kinds]
    writers = 4
    races = [(store, operation, f"{operation}-p{round_}") for store in range(len(stores))
             for operation in RACES for round_ in range(2)]
    # A fork server imports this module once and forks each racer from itself: no fork of this
    # process's threads, and no import per racer (spawn's cost 4-5 s on 2 cores)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([race_in_process.__module__])
    start, barrier, results = context.Event(), context.Barrier(writers), context.Queue()
    processes = [context.Process(target=race_in_process, daemon=True,
                                 args=([reopen_args(s) for s in stores], races, i, start,
                                       barrier, results))
                 for i in range(writers)]
    for process in processes:
        process.start()
    for n, store in enumerate(stores):  # while the processes start
        prepare_sources(store, [race for at, operation, race in races
                                if at == n and operation == "publish"], writers)
    start.set()
    try:
        outcomes = dict(results.get(timeout=120) for _ in processes)
    finally:
        for process in processes:
            process.join(timeout=10)
    for n, (store, operation, race) in enumerate(races):
        won = [outcomes[i][n] for i in range(writers)]
        check_one_winner(stores[store], operation, race, won, where=kinds[store])


# -- appends ---------------------------------------------------------------------------------
def test_appends_across_sessions(storage):
    small_segments(storage)
    append(storage, "t/f", b"hello ", b"world")
    append(storage, "t/f", b"!")
    append(storage, "t/f", b" and more", b" bytes")
    whole = b"hello world! and more bytes"
    assert storage.size("t/f") == len(whole)
    assert storage.read("t/f") == whole
    assert storage.read("t/f", 3, 15) == whole[3:15]
    assert storage.read("t/f", 20) == whole[20:]
    assert storage.read("t/f", 20, 100) == whole[20:]  # clipped at the end, as a file read
    assert storage.open_read("t/f").read() == whole
    assert storage.exists("t/f") and not storage.exists("t/g")
    assert [(i.path, i.size) for i in storage.list("t")] == [("t/f", len(whole))]


def test_a_new_file_is_appended_from_offset_0_and_never_over_an_existing_one(storage):
    small_segments(storage)
    with storage.open_append("t/fresh", at=0) as handle:
        handle.write(b"first ")
        handle.write(b"bytes")
    append(storage, "t/fresh", b" more")  # and continues like any appended file
    assert storage.read("t/fresh") == b"first bytes more"
    with pytest.raises(FileExistsError):  # at open (local) or at its first segment (S3)
        with storage.open_append("t/fresh", at=0) as handle:
            handle.write(b"other")
    with storage.open_append("t/fresh", at=16) as handle:  # its length, just checked
        handle.write(b"!")
    assert storage.read("t/fresh") == b"first bytes more!"


def test_open_read_reads_plain_and_segmented_files_whole(storage):
    small_segments(storage)
    storage.write_exclusive("log/3", [b"v1\n", b"{}\n"])
    append(storage, "t/f", b"segmented ", b"bytes")
    assert storage.open_read("log/3").read() == b"v1\n{}\n"
    assert storage.open_read("t/f").read() == b"segmented bytes"
    with pytest.raises(FileNotFoundError):
        storage.open_read("log/4")


def test_writer_cuts_a_segment_at_the_threshold(object_storage):
    object_storage.segment_bytes = 10
    with object_storage.open_append("f") as handle:
        handle.write(b"a" * 7)
        assert not object_storage.exists("f")  # buffered
        handle.write(b"b" * 7)  # 14 >= 10: the buffer becomes a segment now
        assert object_storage.size("f") == 14
        handle.write(b"c" * 3)
        assert handle.tell() == 17
    append(object_storage, "f", b"d" * 25)
    assert object_storage.read("f") == b"a" * 7 + b"b" * 7 + b"c" * 3 + b"d" * 25
    assert objects_below(object_storage, "f") == [
        "0000000000000000", "0000000000000014", "0000000000000017"]


def test_empty_writer_writes_nothing_on_object_stores(object_storage):
    object_storage.open_append("f").close()
    assert not object_storage.exists("f") and object_storage.list("") == []


@pytest.mark.parametrize("threshold", [100, 1], ids=["fails-at-close", "fails-at-write"])
def test_second_writer_at_the_same_offset_fails(object_storage, threshold):
    append(object_storage, "f", b"committed")
    object_storage.segment_bytes = threshold
    first, second = object_storage.open_append("f"), object_storage.open_append("f")
    first.write(b"+first")
    first.close()
    with pytest.raises(FileExistsError):
        second.write(b"+second")
        second.close()
    with pytest.raises(ValueError):
        second.write(b"more")
    second.close()  # a failed writer closes quietly and writes nothing more
    assert object_storage.read("f") == b"committed+first"


def test_open_append_handle_is_a_pyarrow_sink(storage):
    small_segments(storage, 64)  # many segments
    table = pa.table({"id": list(range(500)), "name": [f"n{i}" for i in range(500)]})
    handle = storage.open_append("p.parquet")
    writer = pq.ParquetWriter(handle, table.schema)
    writer.write_table(table)
    writer.close()
    handle.close()
    assert pq.read_table(io.BytesIO(storage.read("p.parquet"))).equals(table)


# -- link, publish, copy_prefix --------------------------------------------------------------
def test_open_input_reads_ranges_of_a_prefix_and_never_past_it(storage):
    """A read task's stream: seekable, only the first ``length`` bytes, across segments."""
    small_segments(storage)
    append(storage, "f", b"0123456789", b"abcdef")  # two segments on object stores
    with storage.open_input("f", 12) as source:
        assert (source.stored, source.length) == (16, 12)
        source.seek(8)
        assert source.read(3) == b"89a"
        assert source.read() == b"b"  # stops at the prefix, not at the file's end
        source.seek(-4, 2)
        assert source.read(100) == b"89ab"
    with storage.open_input("f") as whole:
        assert whole.read() == b"0123456789abcdef"
    with pytest.raises(FileNotFoundError):
        storage.open_input("missing", 3)


def test_link_gives_dst_the_content_and_keeps_src(storage):
    small_segments(storage)
    append(storage, "in/a", b"0123456789")
    storage.write_exclusive("plain", [b"plain bytes"])
    storage.link("in/a", "out/a")
    storage.link("plain", "out/plain")
    assert storage.read("out/a") == storage.read("in/a") == b"0123456789"
    assert storage.read("out/plain") == b"plain bytes" and storage.exists("plain")
    with pytest.raises(FileExistsError):
        storage.link("plain", "out/a")
    assert storage.read("out/a") == b"0123456789"


def test_publish_moves_src_to_dst(storage):
    small_segments(storage)
    append(storage, "_rotsink/inprogress/.a.tmp", b"first ", b"batch")
    append(storage, "_rotsink/inprogress/.a.tmp", b" second")
    storage.publish("_rotsink/inprogress/.a.tmp", "k=1/part-0.jsonl")
    assert storage.read("k=1/part-0.jsonl") == b"first batch second"
    assert not storage.exists("_rotsink/inprogress/.a.tmp")
    assert storage.list("_rotsink/inprogress") == []
    assert [i.path for i in storage.list("k=1")] == ["k=1/part-0.jsonl"]


def test_read_finished_reads_the_end_of_a_published_file(storage):
    """A table's footer read: bytes from an offset to the known end of a finalized file (one
    ranged GET on an object store); a file shorter than its known size is an error."""
    small_segments(storage)
    append(storage, "_rotsink/inprogress/.f.tmp", b"0123456789", b"abcdef")
    storage.publish("_rotsink/inprogress/.f.tmp", "k=1/part-0.parquet")
    assert storage.read_finished("k=1/part-0.parquet", 16, 10) == b"abcdef"
    assert storage.read_finished("k=1/part-0.parquet", 16, 0) == b"0123456789abcdef"
    with pytest.raises((OSError, EOFError)):
        storage.read_finished("k=1/part-0.parquet", 20, 10)


def test_publish_never_overwrites_a_foreign_dst(storage):
    append(storage, "tmp", b"ours")
    storage.write_exclusive("part-0", [b"someone else's"])
    with pytest.raises(FileExistsError):
        storage.publish("tmp", "part-0")
    assert storage.read("part-0") == b"someone else's"
    assert storage.read("tmp") == b"ours"  # nothing of ours is lost either


def test_publish_retried_after_a_crash_between_link_and_delete(storage):
    """The retry of a publish cut short after ``dst`` appeared recognises its own ``dst``,
    finishes the delete of ``src`` and returns."""
    small_segments(storage)
    append(storage, "_rotsink/inprogress/.p.tmp", b"committed ", b"bytes")
    storage.link("_rotsink/inprogress/.p.tmp", "part-0")  # the crash: src not yet deleted
    storage.publish("_rotsink/inprogress/.p.tmp", "part-0")
    assert storage.read("part-0") == b"committed bytes"
    assert not storage.exists("_rotsink/inprogress/.p.tmp")
    # and through the committer, from the same crash point, and once more after it
    append(storage, "_rotsink/inprogress/.q.tmp", b"other ", b"file")
    storage.link("_rotsink/inprogress/.q.tmp", "part-1")
    for _ in range(2):
        publish_file(storage, "_rotsink/inprogress/.q.tmp", "part-1", 10)
    assert storage.read("part-1") == b"other file"
    assert not storage.exists("_rotsink/inprogress/.q.tmp")


@pytest.mark.parametrize("crash", [None, "after-publish"], ids=["once", "retried"])
def test_publish_of_a_prefix_leaves_out_the_bytes_past_it(storage, crash):
    """A zombie appended past the committed end: only the committed bytes are published,
    and a retry of the whole publish recognises what the first one did."""
    small_segments(storage)
    append(storage, "_rotsink/inprogress/.z.tmp", b"committed ", b"bytes")
    append(storage, "_rotsink/inprogress/.z.tmp", b" and a zombie's")
    storage.publish("_rotsink/inprogress/.z.tmp", "part-0", length=15)
    if crash:
        publish_file(storage, "_rotsink/inprogress/.z.tmp", "part-0", 15)
    assert storage.read("part-0") == b"committed bytes"
    assert storage.list("_rotsink/inprogress") == []
    append(storage, "_rotsink/inprogress/.s.tmp", b"short")
    with pytest.raises(EOFError):
        storage.publish("_rotsink/inprogress/.s.tmp", "part-1", length=15)
    with pytest.raises(TruncatedFileError, match="holds fewer than the 15 committed bytes"):
        publish_file(storage, "_rotsink/inprogress/.s.tmp", "part-1", 15)
    assert not storage.exists("part-1") and storage.read("_rotsink/inprogress/.s.tmp") == b"short"


@pytest.mark.parametrize("length", [0, 3, 4, 6, 13], ids=lambda n: f"{n}-bytes")
def test_copy_prefix_then_append(storage, length):
    small_segments(storage)
    append(storage, "src", b"abcd", b"efgh")  # segments [0,4) [4,8)
    append(storage, "src", b"ijklm")  # [8,13)
    storage.copy_prefix("src", "dst", length)
    if length:
        assert storage.read("dst") == b"abcdefghijklm"[:length]
    append(storage, "dst", b"XYZ")
    assert storage.read("dst") == b"abcdefghijklm"[:length] + b"XYZ"
    assert storage.read("src") == b"abcdefghijklm"


def test_copy_prefix_of_a_short_src_raises_and_creates_nothing(storage):
    append(storage, "src", b"12345")
    with pytest.raises(EOFError, match="src has fewer than 6 bytes"):
        storage.copy_prefix("src", "dst", 6)
    assert not storage.exists("dst")


def test_copy_prefix_never_replaces_dst(storage):
    append(storage, "src", b"12345")
    append(storage, "dst", b"x")
    with pytest.raises(FileExistsError):
        storage.copy_prefix("src", "dst", 3)
    assert storage.read("dst") == b"x"


# -- listing, deleting, times ----------------------------------------------------------------
def test_list_shows_a_segmented_file_as_one_entry(storage):
    small_segments(storage)
    append(storage, "d/seg", b"0123456789", b"abcdef")
    append(storage, "d/seg", b"more")
    storage.write_exclusive("d/plain", [b"xyz"])
    storage.write_exclusive("d/sub/deeper", [b"not listed"])
    listed = sorted((i.path, i.size) for i in storage.list("d"))
    assert listed == [("d/plain", 3), ("d/seg", 20)]
    assert sorted(storage.names("d")) == ["d/plain", "d/seg"]  # the same files, sizes unread
    assert storage.list("missing") == [] and storage.names("missing") == []
    walked = sorted((i.path, i.size) for i in storage.walk())
    assert walked == [("d/plain", 3), ("d/seg", 20), ("d/sub/deeper", 10)]


def test_delete_plain_and_segmented_files(storage):
    small_segments(storage)
    append(storage, "d/seg", b"0123456789")
    storage.write_exclusive("d/plain", [b"xyz"])
    storage.delete("d/seg")
    storage.delete("d/plain")
    storage.delete("d/never-existed")
    assert not storage.exists("d/seg") and not storage.exists("d/plain")
    assert storage.list("d") == []
    if isinstance(storage, ObjectStorage):
        assert objects_below(storage, "d") == []


def test_delete_all_removes_plain_and_segmented_files_of_several_directories(storage):
    small_segments(storage)
    for name in ("a/seg1", "a/seg2", "b/seg"):
        append(storage, name, b"0123", b"4567", b"89")
    for name in ("a/plain", "b/plain", "a/kept", "top"):
        storage.write_exclusive(name, [b"xyz"])
    listed = [i for i in storage.walk() if i.path not in ("a/kept", "b/plain")]
    unlisted = [FileInfo("a/never-existed", 0, 0), FileInfo("b/seg", 0, 0)]  # made by hand
    storage.delete_all([*listed, listed[0], *unlisted])  # one twice
    assert sorted(i.path for i in storage.walk()) == ["a/kept", "b/plain"]
    if isinstance(storage, ObjectStorage):
        assert objects_below(storage, "a") == ["kept"] and objects_below(storage, "b") == \
            ["plain"]
    storage.delete_all([])
    assert sorted(i.path for i in storage.walk()) == ["a/kept", "b/plain"]


class RecordingObjects:
    """An object client that records the prefixes it lists and the objects of each delete."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.listed: builtins.list[str] = []
        self.deleted: builtins.list[builtins.list[str]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def list(self, prefix: str):
        self.listed.append(prefix)
        return self.inner.list(prefix)

    def delete(self, paths: builtins.list[str]) -> None:
        self.deleted.append(builtins.list(paths))
        self.inner.delete(paths)


@pytest.fixture
def memory_storage():
    storage = make_storage("memory", None, None)
    yield storage
    storage.delete_tree("")


def test_delete_all_of_listed_files_lists_nothing_and_deletes_first_segments_first(
        memory_storage):
    """Clean-up deletes what it has just listed: a listed file names its objects, so the
    delete sends no LIST, and two DeleteObjects for them all, not a LIST and a DeleteObjects
    a file. The first segment of each segmented file goes in the first request, so a delete
    cut short between the two leaves no file."""
    storage = memory_storage
    small_segments(storage)
    names = [f"d/{n}" for n in range(10)]
    for name in names:
        append(storage, name, b"0123", b"4567", b"89")  # segments at 0, 4 and 8
    storage.write_exclusive("d/plain", [b"xyz"])
    listed = storage.list("d")
    recording = RecordingObjects(storage._objects)
    storage._objects = recording
    storage.delete_all(listed)
    assert recording.listed == []
    root = storage.root
    firsts, rest = recording.deleted
    assert sorted(firsts) == [f"{root}/{n}/{0:016d}" for n in names]
    assert sorted(rest) == sorted([f"{root}/{n}/{offset:016d}" for n in names
                                   for offset in (4, 8)] + [f"{root}/{p}" for p in names]
                                  + [f"{root}/d/plain"])
    assert objects_below(storage, "d") == []


def test_publish_deletes_the_first_segment_of_its_source_first(memory_storage):
    storage = memory_storage
    small_segments(storage)
    append(storage, "src", b"0123", b"4567", b"89")
    recording = RecordingObjects(storage._objects)
    storage._objects = recording
    storage.publish("src", "dst")
    root = storage.root
    assert recording.deleted == [[f"{root}/src/{0:016d}"],
                                 [f"{root}/src/{4:016d}", f"{root}/src/{8:016d}", f"{root}/src"]]
    assert storage.read("dst") == b"0123456789"


def test_delete_all_cut_short_leaves_no_file_and_the_next_removes_the_remains(memory_storage):
    """A driver killed between delete_all's two requests: every segmented file lost its
    first segment, so none is readable or appendable, and all are still listed, so the next
    clean-up deletes what is left."""
    storage = memory_storage
    small_segments(storage)
    names = [f"d/{n}" for n in range(3)]
    for name in names:
        append(storage, name, b"0123", b"4567", b"89")
    inner = storage._objects

    class KilledAfterTheFirstRequest(RecordingObjects):
        def delete(self, paths: builtins.list[str]) -> None:
            if self.deleted:
                raise SystemExit("killed")
            super().delete(paths)

    storage._objects = KilledAfterTheFirstRequest(inner)
    with pytest.raises(SystemExit):
        storage.delete_all(storage.list("d"))
    storage._objects = inner
    for name in names:
        assert not storage.exists(name)
        with pytest.raises(SegmentError, match="none at offset 0"):
            storage.open_append(name)
    assert sorted(i.path for i in storage.list("d")) == names
    storage.delete_all(storage.list("d"))
    assert objects_below(storage, "d") == []


def test_clean_up_deletes_without_a_listing_of_its_own(memory_storage):
    """A compaction commit's clean-up on an object store deletes the expired log files, old
    intents, orphans and claims it listed without listing any of them again, however many."""
    storage = memory_storage
    small_segments(storage, 4)
    cfg = SinkConfig(path=storage.root_uri, format="jsonl", file_suffix=".jsonl",
                     rotation=RotationPolicy(max_batches=1, interval_ms=0, inactivity_ms=0),
                     compact_interval=5, cleanup_delay_ms=0)
    for batch in range(15):
        plan = WritePlan.from_state(Committer(storage, cfg, "{}").latest_state(),
                                    storage.root_uri)
        rows = pa.RecordBatch.from_pydict({"id": pa.array([batch], pa.int64())})
        report = TaskWriter(storage, cfg, plan, batch_id=batch, partition=0, attempt=0,
                            query_id="q").write([rows])
        if batch == 14:  # a compaction batch: the clean-up runs
            for n in range(3):  # a dead task's temp files, and claims nothing holds
                append(storage, f"{INPROGRESS_DIR}/.orphan-{n}.inprogress", b"0123", b"45")
                storage.write_exclusive(f"_rotsink/claims/{n}", [b""])
            recording = RecordingObjects(storage._objects)
            storage._objects = recording
        now_ms = int(time.time() * 1000) + (60_000 if batch == 14 else 0)  # all expired
        Committer(storage, cfg, "{}").commit(batch, [report], now_ms=now_ms)
    deleted = [p[len(storage.root) + 1:] for request in recording.deleted for p in request]
    # older than the compaction before the newest (9); batch 9's clean-up took 0-3
    assert sorted(p for p in deleted if p.startswith("_spark_metadata/")) == \
        [f"_spark_metadata/{n}" for n in ("4.compact", "5", "6", "7", "8")]
    assert sorted(p for p in deleted if p.startswith("_rotsink/intent/")) == \
        [f"_rotsink/intent/{n}" for n in ("5", "6", "7", "8", "9.compact")]
    assert {f"_rotsink/claims/{n}" for n in range(3)} <= set(deleted)
    assert not [i for i in storage.walk() if "orphan" in i.path or "claims" in i.path]
    listed = [p[len(storage.root) + 1:] for p in recording.listed]
    assert not [p for p in listed if "orphan" in p]  # no LIST of an orphan's segments
    whole = ("_spark_metadata/", "_rotsink/intent/", "_rotsink/claims/")
    assert not [p for p in listed if p.startswith(whole) and p not in whole]  # nor of a file
    ids = sorted(json.loads(line)["id"] for f in storage.walk()
                 if f.path.endswith(".jsonl") for line in storage.read(f.path).splitlines())
    assert ids == list(range(15))  # the rows written, all finalized


def test_delete_tree(storage):
    append(storage, "t/a/f", b"1")
    storage.write_exclusive("t/b", [b"2"])
    storage.write_exclusive("keep", [b"3"])
    storage.delete_tree("t")
    assert list(storage.walk()) and [i.path for i in storage.walk()] == ["keep"]


def test_mtime_ms_is_the_last_write(storage):
    before = time.time() * 1000
    append(storage, "f", b"x")
    storage.write_exclusive("g", [b"y"])
    for path in ("f", "g"):  # S3 keeps seconds: allow a second either side
        assert before - 1000 <= storage.mtime_ms(path) <= time.time() * 1000 + 1000
    assert {i.path: i.mtime_ms for i in storage.list("")} == \
        {"f": storage.mtime_ms("f"), "g": storage.mtime_ms("g")}


def test_missing_files_raise_file_not_found(storage):
    for operation in (storage.size, storage.mtime_ms, storage.read, storage.open_read):
        with pytest.raises(FileNotFoundError):
            operation("nope")
    with pytest.raises(FileNotFoundError):
        storage.publish("nope", "dst")


def test_abort_stale_uploads_on_every_backend(storage):
    assert storage.abort_stale_uploads(int(time.time() * 1000) + 60_000, rotsink_upload) == []


# -- damage ----------------------------------------------------------------------------------
@pytest.mark.parametrize("second, kind", [(7, "gap"), (3, "overlap")])
def test_non_contiguous_segments_are_loud(object_storage, second, kind):
    base = f"{object_storage.root}/f"
    object_storage._objects.put(f"{base}/0000000000000000", b"12345")  # as any writer
    object_storage._objects.put(f"{base}/{second:016d}", b"abc")
    message = rf"f is damaged: a segment starts at offset {second}, expected 5 \({kind}"
    for operation in (object_storage.size, object_storage.read, object_storage.open_append):
        with pytest.raises(SegmentError, match=message):
            operation("f")
    with pytest.raises(SegmentError, match=message):
        object_storage.publish("f", "out")
    assert not object_storage.exists("out")
    assert [i.path for i in object_storage.list("")] == ["f"]  # cleanup still sees it
    object_storage.delete("f")
    assert objects_below(object_storage, "f") == []


def test_remains_of_a_cut_short_delete(object_storage):
    """A delete removes the first segment first: what is left is no file, but is listed
    (so cleanup removes it) and refuses appends."""
    object_storage._objects.put(f"{object_storage.root}/f/0000000000000005", b"tail")
    assert not object_storage.exists("f")
    with pytest.raises(FileNotFoundError):
        object_storage.size("f")
    with pytest.raises(SegmentError, match="none at offset 0"):
        object_storage.open_append("f")
    assert [i.path for i in object_storage.list("")] == ["f"]
    object_storage.delete("f")
    assert object_storage.list("") == []


def test_plain_object_cannot_be_appended_to(object_storage):
    object_storage.write_exclusive("final", [b"done"])
    with pytest.raises(FileExistsError, match="cannot be appended"):
        object_storage.open_append("final")


# -- the protocol above, unchanged ----------------------------------------------------------
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_commit_protocol_runs_unchanged(storage, fmt):
    """Batches that roll, span batches, compact and clean up; a zombie that wins a claim and
    keeps writing after the batch committed; exactly the committed rows are read back."""
    small_segments(storage, 64)
    cfg = SinkConfig(path=storage.root_uri, format=fmt, file_suffix=f".{fmt}",
                     rotation=RotationPolicy(max_records=7, interval_ms=0, inactivity_ms=0),
                     compact_interval=3, cleanup_delay_ms=0)

    def plan() -> WritePlan:
        return WritePlan.from_state(Committer(storage, cfg, "{}").latest_state(),
                                    storage.root_uri)

    def task(batch: int, first: int, attempt: int = 0, at: WritePlan | None = None):
        rows = pa.RecordBatch.from_pydict({"id": pa.array(range(first, first + 5), pa.int64())})
        return TaskWriter(storage, cfg, at or plan(), batch_id=batch, partition=0,
                          attempt=attempt, query_id="q").write([rows])

    for batch in range(5):
        Committer(storage, cfg, "{}").commit(batch, [task(batch, batch * 5)], now_ms=batch)
    shared = plan()
    zombie = task(5, 1000, at=shared)  # wins the claim, never commits
    retry = task(5, 25, attempt=1, at=shared)
    Committer(storage, cfg, "{}").commit(5, [retry], now_ms=5)
    if fmt == "jsonl":
        assert retry.files[0].fenced_from == zombie.files[0].temp
        append(storage, zombie.files[0].temp, b'{"id":999}\n')  # the zombie writes on
    committed = open_committed(storage)
    assert committed is not None
    log, latest, state = committed
    schema = pa.schema([("id", pa.int64())])
    ids = [i for f in committed_files(log, latest, state, include_in_progress=True)
           for batch in read_batches(storage, f, state=state, schema=schema)
           for i in batch.column("id").to_pylist()]
    assert sorted(ids) == list(range(30))
    assert not [i for i in storage.list(INPROGRESS_DIR) if i.path.endswith(".exact")]


# -- S3 specifics ----------------------------------------------------------------------------
def test_compose_mixed_segments_into_one_multipart_object(s3_storage, monkeypatch):
    """Large segments become server-side part copies, small runs are downloaded and joined
    into parts of at least 5 MiB; the result is byte-exact; so is a ranged copy_prefix."""
    large_a, large_b = os.urandom(6 * MiB), os.urandom(5 * MiB + 17)
    small = [os.urandom(n) for n in (1000, 70_000, 3)]
    for chunk in (large_a, small[0], small[1], large_b, small[2]):
        append(s3_storage, "tmp", chunk)
    whole = large_a + small[0] + small[1] + large_b + small[2]
    calls: list[str] = []
    real = s3_storage.fs._call_s3

    async def spy(method, *args, **kwargs):
        calls.append(method)
        return await real(method, *args, **kwargs)

    monkeypatch.setattr(s3_storage.fs, "_call_s3", spy)
    s3_storage.copy_prefix("tmp", "copy", len(whole) - 100_000)
    s3_storage.publish("tmp", "final")
    monkeypatch.undo()
    assert s3_storage.read("final") == whole
    assert s3_storage.read("copy") == whole[:-100_000]
    assert objects_below(s3_storage, "copy") == ["0000000000000000"]  # one atomic segment
    assert not s3_storage.exists("tmp")
    # Both composes copy large_a server-side (part 1) and join the small segments with the
    # head of large_b up to 5 MiB (part 2). copy_prefix ends there (the rest of its prefix
    # is shorter than large_b); publish adds part 3: the 71,017 bytes left of large_b (too
    # few to copy as a part that is not the last) joined with small[2].
    assert calls.count("create_multipart_upload") == calls.count("complete_multipart_upload") == 2
    assert calls.count("upload_part_copy") == 2 and calls.count("upload_part") == 3
    head = s3_storage.fs.call_s3("head_object", Bucket=s3_storage.root.split("/")[0],
                                 Key=s3_storage.root.split("/", 1)[1] + "/final")
    assert head["ETag"].endswith('-3"') and head["ContentLength"] == len(whole)


def test_compose_refuses_to_overwrite_and_aborts_its_upload(s3_storage):
    append(s3_storage, "tmp", os.urandom(6 * MiB))
    append(s3_storage, "tmp", b"tail")
    s3_storage.write_exclusive("final", [b"foreign"])
    with pytest.raises(FileExistsError):
        s3_storage.publish("tmp", "final")
    assert s3_storage.read("final") == b"foreign" and s3_storage.size("tmp") == 6 * MiB + 4
    bucket, prefix = s3_storage.root.split("/", 1)
    uploads = s3_storage.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix)
    assert uploads.get("Uploads", []) == []


def test_a_failing_part_aborts_the_upload_and_creates_nothing(s3_storage, monkeypatch):
    append(s3_storage, "tmp", os.urandom(6 * MiB))
    append(s3_storage, "tmp", os.urandom(6 * MiB))
    real = s3_storage.fs._call_s3

    async def failing(method, *args, **kwargs):
        if method == "upload_part_copy" and kwargs["PartNumber"] == 2:
            raise OSError("store unavailable")
        return await real(method, *args, **kwargs)

    monkeypatch.setattr(s3_storage.fs, "_call_s3", failing)
    with pytest.raises(OSError, match="store unavailable"):
        s3_storage.publish("tmp", "final")
    monkeypatch.undo()
    assert not s3_storage.exists("final") and s3_storage.size("tmp") == 12 * MiB
    bucket, prefix = s3_storage.root.split("/", 1)
    uploads = s3_storage.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix)
    assert uploads.get("Uploads", []) == []


def test_a_412_answering_our_own_create_is_success(s3_storage, monkeypatch):
    """A conditional PUT retried after its first attempt succeeded gets 412; the object then
    carries this create's token, which tells it apart from another writer's object."""
    import commit_protocol.storage.s3 as module

    monkeypatch.setattr(module.uuid, "uuid4", lambda: uuid.UUID(int=7))
    s3_storage.write_exclusive("log/0", [b"v1"])
    s3_storage.write_exclusive("log/0", [b"v1"])  # same token: recognised as ours
    monkeypatch.undo()
    with pytest.raises(FileExistsError):
        s3_storage.write_exclusive("log/0", [b"v1"])


def test_abort_stale_uploads(s3_storage):
    """rotsink's own stale uploads are aborted; another writer's big upload into the
    output's directories (a shared table's backfill) and uploads beside the output are not."""
    bucket, prefix = s3_storage.root.split("/", 1)
    dead, theirs = "g=1/part-00000-000003-000.parquet", "g=1/00000-0-4f2c6a52.parquet"
    for key in (f"{prefix}/{dead}", f"{prefix}/{theirs}", f"{prefix}-other/x"):
        s3_storage.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
    initiated = s3_storage.fs.call_s3("list_multipart_uploads", Bucket=bucket,
                                      Prefix=prefix)["Uploads"][0]["Initiated"]
    # The server's clock, not ours: moto reports every upload as initiated at
    # 2010-11-10T20:48:33Z (S3 and SeaweedFS tell the truth), so "too young to abort" is a
    # cutoff at that moment
    assert s3_storage.abort_stale_uploads(int(initiated.timestamp() * 1000),
                                          rotsink_upload) == []
    assert s3_storage.abort_stale_uploads(int(time.time() * 1000) + 2000,
                                          rotsink_upload) == [dead]
    left = s3_storage.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix)
    assert sorted(u["Key"] for u in left.get("Uploads", [])) == \
        [f"{prefix}-other/x", f"{prefix}/{theirs}"]


@pytest.mark.parametrize("s3_server", S3_SERVERS, indirect=True)
def test_servers_honour_conditional_writes_and_part_minimum(s3_server):
    """What the tests rely on each local server for (it answers as AWS S3 does)."""
    import boto3
    from botocore.exceptions import ClientError

    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint)
    bucket = f"pin-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as put_error:
        s3.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert put_error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412

    def upload(key: str, *sizes: int) -> tuple[str, list[dict]]:
        upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        parts = [{"PartNumber": n, "ETag": s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=b"x" * size)["ETag"]}
            for n, size in enumerate(sizes, 1)]
        return upload_id, parts

    upload_id, parts = upload("k", 1)
    with pytest.raises(ClientError) as complete_error:
        s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload_id,
                                     MultipartUpload={"Parts": parts}, IfNoneMatch="*")
    assert complete_error.value.response["Error"]["Code"] == "PreconditionFailed"
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"
    upload_id, parts = upload("small", 5 * MiB - 1, 1)
    with pytest.raises(ClientError, match="EntityTooSmall"):
        s3.complete_multipart_upload(Bucket=bucket, Key="small", UploadId=upload_id,
                                     MultipartUpload={"Parts": parts})


def translated(code: str, status: int, **error: str) -> OSError:
    """The exception s3fs raises for a botocore error with this code and status."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    response = {"Error": {"Code": code, "Message": f"message of {code}", **error},
                "ResponseMetadata": {"HTTPStatusCode": status}}
    return translate_boto_error(ClientError(response, "PutObject"))  # type: ignore[arg-type]


@pytest.mark.parametrize("error, exists, reason", [
    (translated("PreconditionFailed", 412), True,
     "SeaweedFS: a 412 naming no condition, which s3fs makes an EINVAL"),
    (translated("PreconditionFailed", 412, Condition="If-None-Match"), True,
     "AWS: the 412 names the condition, s3fs raises FileExistsError itself"),
    (translated("412", 412), True, "a 412 without a body (a HEAD's) has its status as code"),
    (translated("ConditionalRequestConflict", 409), True,
     "AWS: another conditional write to the key is in flight"),
    (translated("EntityTooSmall", 400), False, "an EINVAL too, but a real error"),
    (translated("InvalidArgument", 400), False, "an EINVAL too, but a real error"),
    (OSError(errno.EINVAL, "At least one of the pre-conditions you specified did not hold"),
     False, "no botocore error behind it: nothing says the server refused a precondition"),
    (translated("SlowDown", 503), False, "a store failure is not a lost race"),
])
def test_what_counts_as_already_exists(error, exists, reason):
    assert already_exists(error) is exists, reason


class RefusingFs:
    """An s3fs stand-in whose conditional PUTs fail with ``error`` and whose HEAD shows an
    object another create made."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    def call_s3(self, method: str, **kwargs):
        if method == "put_object":
            raise self.error
        return {"ContentLength": 1, "LastModified": datetime.now(),
                "Metadata": {"rotsink-token": "someone else's"}}


def test_a_seaweedfs_412_is_a_lost_race_and_other_einvals_stay_errors():
    objects = S3Objects(RefusingFs(translated("PreconditionFailed", 412)))
    with pytest.raises(FileExistsError):
        objects.put("bucket/k", b"x")
    objects = S3Objects(RefusingFs(translated("InvalidArgument", 400)))
    with pytest.raises(OSError, match="message of InvalidArgument") as raised:
        objects.put("bucket/k", b"x")
    assert raised.type is OSError and raised.value.errno == errno.EINVAL


# -- construction ----------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["adl://a/out", "hdfs://nn/out", "ftp://h/out"])
def test_unsafe_filesystems_are_refused_by_name(url):
    with pytest.raises(UnsafeStorageError, match=f"cannot write to {url}:.*exclusively"):
        open_object_storage(url, {})


def test_s3a_urls_and_string_options(s3_endpoint, s3_bucket):
    storage = open_object_storage(f"s3a://{s3_bucket}/a/", {"endpoint_url": s3_endpoint,
                                                            "use_ssl": "false"})
    assert storage.root_uri == f"s3a://{s3_bucket}/a" and storage.root == f"{s3_bucket}/a"
    storage.write_exclusive("x", [b"1"])
    assert storage.read("x") == b"1"


@pytest.mark.parametrize("options, expected, reason", [
    ({"anon": "TRUE"}, {"anon": True}, "booleans arrive as strings"),
    ({"endpoint_url": "http://127.0.0.1:1"}, {"endpoint_url": "http://127.0.0.1:1"},
     "s3fs takes endpoint_url itself"),
    ({"max_concurrency": "4"}, {"max_concurrency": 4}, "known integer options"),
    ({"client_kwargs.region_name": "eu-west-1"}, {"client_kwargs": {"region_name": "eu-west-1"}},
     "a dotted key is a nested dict"),
])
def test_fs_options_from_spark_strings(options, expected, reason):
    assert parse_fs_options(options) == expected, reason


def test_a_file_deleted_while_listed_is_left_out(tmp_path, monkeypatch):
    """Clean-up deletes log files beside readers that list the log: a file gone between the
    directory read and its stat is not listed, never an error (it failed a read in CI)."""
    storage = LocalStorage(str(tmp_path))
    for name in ("1", "2"):
        storage.write_exclusive(f"d/{name}", [b"x"])
    real_scandir = os.scandir

    def scandir_then_delete(path):
        entries = list(real_scandir(path))
        os.unlink(os.path.join(path, "1"))  # the clean-up wins the race
        return iter(entries)

    monkeypatch.setattr(os, "scandir", scandir_then_delete)
    assert [info.path for info in storage.list("d")] == ["d/2"]


def test_sync_takes_files_and_directories_and_changes_nothing(storage):
    """``sync`` and ``sync_directories`` (``fsync`` on a local disk, nothing to do on object
    stores: what they make durable, ``tests/unit/test_power_loss.py`` checks) take appended
    files, directories new and old, and a missing directory."""
    with storage.open_append("d/e/f") as handle:
        handle.write(b"abc")
    storage.write_exclusive("g", [b"xyz"])
    storage.sync(["d/e/f", "g"])
    storage.sync_directories(["d/e", "", "no/such/dir"])
    assert storage.read("d/e/f") == b"abc" and storage.read("g") == b"xyz"

