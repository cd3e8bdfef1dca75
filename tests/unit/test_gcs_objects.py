"""What Cloud Storage's client does beyond the storage contract suite (which runs every
operation on fake-gcs-server too, ``tests/unit/test_storage_contract.py``): composes of many
segments and of a segment's committed part, exclusive onto a name that exists, a retry that
recognises its own object, the hidden intermediates of a compose that died.

fake-gcs-server does not enforce a compose's ``ifGenerationMatch=0`` (Cloud Storage does):
the exclusive compose is tested through :class:`tests.support.gcsfront.GCSFront`, which
enforces it as the service does; the test that shows the emulator alone letting a compose
replace an object says why the front is needed, and fails once the emulator enforces it."""

from __future__ import annotations

import functools
import os
import uuid

import pytest

from commit_protocol.commit.housekeeping import rotsink_upload
from commit_protocol.storage.gcs import MAX_COMPOSE, GCSObjects
from commit_protocol.storage.object_store import ObjectStorage
from commit_protocol.storage.objects import SMALL_BYTES
from commit_protocol.storage.urls import open_object_storage
from tests.support.gcsfront import GCSFront
from tests.support.gcsserver import OPTIONS

SEGMENT = 20 * 1024  # small segments: a file of SMALL_BYTES and more has > 32 of them


@pytest.fixture
def front(gcs_endpoint):
    proxy = GCSFront(gcs_endpoint)
    yield proxy
    proxy.stop()


def storage_at(endpoint: str, bucket: str) -> ObjectStorage:
    storage = open_object_storage(f"gs://{bucket}/{uuid.uuid4().hex}",
                                  {"endpoint_url": endpoint, **OPTIONS})
    storage.segment_bytes = SEGMENT
    return storage


def appended(storage: ObjectStorage, path: str, size: int) -> bytes:
    data = os.urandom(size)
    with storage.open_append(path) as handle:
        for start in range(0, size, SEGMENT):  # a segment a write
            handle.write(data[start:start + SEGMENT])
            handle.flush()
    return data


def hidden_left(storage: ObjectStorage) -> list[str]:
    return [b.path for b in storage._objects.list(storage.root + "/") if "/.compose-" in b.path]


def test_a_large_file_of_many_segments_is_composed_whole_and_its_committed_part_only(
        front, gcs_bucket):
    storage = storage_at(front.endpoint, gcs_bucket)
    data = appended(storage, "_rotsink/inprogress/.a", SMALL_BYTES + 5 * SEGMENT + 123)
    segments = len(storage._segments("_rotsink/inprogress/.a"))
    assert segments > MAX_COMPOSE  # composed in two levels
    committed = len(data) - 1000  # a zombie's bytes past the committed offset stay out
    storage.publish("_rotsink/inprogress/.a", "part-0.jsonl", length=committed)
    assert storage.read("part-0.jsonl") == data[:committed]
    assert hidden_left(storage) == []
    assert any("/compose" in p for p in front.seen)  # composed, not downloaded and uploaded


def test_a_compose_onto_a_name_that_exists_fails_and_leaves_it_as_it_was(front, gcs_bucket):
    storage = storage_at(front.endpoint, gcs_bucket)
    storage.write_exclusive("part-0.jsonl", [b"another writer's file"])
    appended(storage, "_rotsink/inprogress/.a", SMALL_BYTES + SEGMENT)
    with pytest.raises(FileExistsError):
        storage.publish("_rotsink/inprogress/.a", "part-0.jsonl")
    assert storage.read("part-0.jsonl") == b"another writer's file"
    assert front.refused and hidden_left(storage) == []


def test_a_retried_compose_recognises_the_object_its_first_attempt_made(front, gcs_bucket):
    """The first attempt composed the object and its answer was lost: the retry is refused
    (412), finds its own token on the object, and succeeds."""
    storage = storage_at(front.endpoint, gcs_bucket)
    data = appended(storage, "_rotsink/inprogress/.a", SMALL_BYTES + SEGMENT)
    objects = storage._objects
    assert isinstance(objects, GCSObjects)
    pieces = storage._pieces("_rotsink/inprogress/.a")
    dst = f"{storage.root}/part-0.jsonl"
    token = uuid.uuid4().hex
    first = {"rotsink-token": token, "rotsink-source": "x"}
    objects._run(objects._compose_large, dst, pieces, first, token)  # the lost first attempt
    with pytest.raises(FileExistsError):
        objects._settle(FileExistsError(dst), dst, uuid.uuid4().hex)  # someone else's create
    objects._settle(FileExistsError(dst), dst, token)  # ours: no error
    assert storage.read("part-0.jsonl") == data


def test_the_intermediates_of_a_compose_that_died_are_deleted_by_age(front, gcs_bucket):
    storage = storage_at(front.endpoint, gcs_bucket)
    objects = storage._objects
    stale = f"{storage.root}/.compose-part-0.jsonl-{uuid.uuid4().hex}-p0"
    objects.put(stale, b"half a compose")
    objects.put(f"{storage.root}/part-1.jsonl", b"a file")
    assert storage.abort_stale_uploads(0, rotsink_upload) == []  # younger than the cut-off
    future = 1 << 62
    assert storage.abort_stale_uploads(future, rotsink_upload) == \
        [stale[len(storage.root) + 1:]]
    assert [b.path for b in objects.list(storage.root + "/")] == \
        [f"{storage.root}/part-1.jsonl"]


def test_the_emulator_alone_lets_a_compose_replace_an_object(gcs_endpoint, gcs_bucket):
    """Why the front exists: fake-gcs-server ignores ``ifGenerationMatch=0`` on a compose.
    When this fails, the emulator enforces it and the front can go."""
    storage = storage_at(gcs_endpoint, gcs_bucket)
    objects = storage._objects
    assert isinstance(objects, GCSObjects)
    storage.write_exclusive("a", [b"first"])
    storage.write_exclusive("b", [b"second"])
    blob, _ = objects.head(f"{storage.root}/b")
    compose = functools.partial(objects._compose, exclusive=True)
    objects._run(compose, f"{storage.root}/a", [blob.path], {})
    assert storage.read("a") == b"second"
