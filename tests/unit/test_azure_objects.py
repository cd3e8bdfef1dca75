"""What Azure's client does beyond the storage contract suite (which runs every operation on
Azurite too, ``tests/unit/test_storage_contract.py``): composes that the service copies itself
(Put Block From URL) from a file's segments and from a segment's committed part, exclusive
onto a name that exists, a retry that recognises its own blob, a client on a SAS instead of
the account key, and the directories a hierarchical namespace lists as blobs (read, and
deleted after what they hold).

Azurite serves a flat account; the directories of a hierarchical namespace (ADLS Gen2) are
made here as the service shows them to the Blob API: zero-length blobs whose metadata says
``hdi_isfolder=true``."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from commit_protocol.storage.azure import AzureObjects
from commit_protocol.storage.object_store import ObjectStorage
from commit_protocol.storage.objects import SMALL_BYTES
from commit_protocol.storage.urls import open_object_storage
from tests.support.azurite import ACCOUNT, KEY, options

SEGMENT = 256 * 1024


def storage_at(fs_options: dict[str, str], container: str) -> ObjectStorage:
    storage = open_object_storage(
        f"abfss://{container}@{ACCOUNT}.dfs.core.windows.net/{uuid.uuid4().hex}", fs_options)
    storage.segment_bytes = SEGMENT
    return storage


def appended(storage: ObjectStorage, path: str, size: int) -> bytes:
    data = os.urandom(size)
    with storage.open_append(path) as handle:
        for start in range(0, size, SEGMENT):  # a segment a write
            handle.write(data[start:start + SEGMENT])
            handle.flush()
    return data


def committed_blocks(storage: ObjectStorage, path: str) -> int:
    """How many blocks the service committed for ``path`` (one per piece it copied)."""
    objects = storage._objects
    assert isinstance(objects, AzureObjects)

    async def count() -> int:
        committed, _ = await objects._blob_client(f"{storage.root}/{path}").get_block_list(
            "committed")
        return len(committed)

    return int(objects._run(count))


def hierarchical_directories(storage: ObjectStorage, *paths: str) -> None:
    """Make ``paths`` directories as ADLS Gen2 shows them to the Blob API."""
    objects = storage._objects
    assert isinstance(objects, AzureObjects)

    async def directory(path: str) -> None:
        await objects._blob_client(f"{storage.root}/{path}").upload_blob(
            b"", metadata={"hdi_isfolder": "true"})

    for path in paths:
        objects._run(directory, path)


def recorded_deletes(objects: AzureObjects) -> list[str]:
    """The blobs ``objects`` deletes from now on, in the order it deletes them."""
    deleted: list[str] = []
    delete = objects._delete

    async def recorded(path: str) -> None:
        deleted.append(path)
        await delete(path)

    objects._delete = recorded  # type: ignore[method-assign]
    return deleted


@pytest.fixture
def storage(azure_endpoint, azure_container) -> ObjectStorage:
    return storage_at(options(azure_endpoint), azure_container)


def test_a_file_of_many_segments_is_composed_by_the_service_and_its_committed_part_only(
        storage):
    data = appended(storage, "_rotsink/inprogress/.a", SMALL_BYTES + 3 * SEGMENT + 123)
    segments = len(storage._segments("_rotsink/inprogress/.a"))
    committed = len(data) - 1000  # a zombie's bytes past the committed offset stay out
    storage.publish("_rotsink/inprogress/.a", "part-0.jsonl", length=committed)
    assert storage.read("part-0.jsonl") == data[:committed]
    # Put Block From URL for each segment but the last, whose 123 bytes lie past the commit
    assert committed_blocks(storage, "part-0.jsonl") == segments - 1
    assert not storage.exists("_rotsink/inprogress/.a")


def test_a_compose_onto_a_name_that_exists_fails_and_leaves_it_as_it_was(storage):
    storage.write_exclusive("part-0.jsonl", [b"another writer's file"])
    appended(storage, "_rotsink/inprogress/.a", SMALL_BYTES + SEGMENT)
    with pytest.raises(FileExistsError):
        storage.publish("_rotsink/inprogress/.a", "part-0.jsonl")
    assert storage.read("part-0.jsonl") == b"another writer's file"
    assert storage.size("_rotsink/inprogress/.a") == SMALL_BYTES + SEGMENT  # source kept


def test_a_retried_compose_recognises_the_blob_its_first_attempt_made(storage):
    """The first attempt committed the block list and its answer was lost: the retry is
    refused (409), finds its own token on the blob, and succeeds."""
    data = appended(storage, "_rotsink/inprogress/.a", SMALL_BYTES + SEGMENT)
    objects = storage._objects
    assert isinstance(objects, AzureObjects)
    pieces = storage._pieces("_rotsink/inprogress/.a")
    dst = f"{storage.root}/part-0.jsonl"
    token = uuid.uuid4().hex
    objects._run(objects._compose_large, dst, pieces, {"rotsink_token": token}, token)  # lost
    with pytest.raises(FileExistsError):
        objects._settle(FileExistsError(dst), dst, uuid.uuid4().hex)  # someone else's create
    objects._settle(FileExistsError(dst), dst, token)  # ours: no error
    assert storage.read("part-0.jsonl") == data


def test_a_client_on_a_sas_composes_with_its_own_signature(azure_endpoint, azure_container):
    """No account key to sign a source SAS with: the client's SAS, in its URLs, lets the
    service read the sources. (A container's SAS: Azurite 3.37 refuses an account SAS on Put
    Block From URL, which Azure takes.)"""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    sas = generate_container_sas(
        ACCOUNT, azure_container, account_key=KEY,
        permission=ContainerSasPermissions(read=True, add=True, create=True, write=True,
                                           delete=True, list=True),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    on_sas = {"connection_string": f"BlobEndpoint={azure_endpoint}/{ACCOUNT};"
                                   f"SharedAccessSignature={sas}"}
    storage = storage_at(on_sas, azure_container)
    data = appended(storage, "_rotsink/inprogress/.a", SMALL_BYTES + SEGMENT)
    storage.publish("_rotsink/inprogress/.a", "part-0.jsonl")
    assert storage.read("part-0.jsonl") == data
    assert committed_blocks(storage, "part-0.jsonl") > 1


def test_the_directories_of_a_hierarchical_namespace_are_no_files(storage):
    """ADLS Gen2 lists a segmented file's directory as a zero-length blob beside its
    segments: it must not read as a file of its own, nor make the file look plain."""
    objects = storage._objects
    assert isinstance(objects, AzureObjects)
    data = appended(storage, "_rotsink/inprogress/.a", 3 * SEGMENT)

    hierarchical_directories(storage, "_rotsink", "_rotsink/inprogress", "_rotsink/inprogress/.a")
    assert [f.path for f in storage.walk("")] == ["_rotsink/inprogress/.a"]
    assert storage.read("_rotsink/inprogress/.a") == data
    with pytest.raises(FileNotFoundError):
        objects.head(f"{storage.root}/_rotsink/inprogress/.a")

    deleted = recorded_deletes(objects)
    storage.delete("_rotsink/inprogress/.a")
    # a directory goes only once empty: its segments first
    assert deleted[-1] == f"{storage.root}/_rotsink/inprogress/.a"
    assert not storage.exists("_rotsink/inprogress/.a")


def test_delete_all_on_a_hierarchical_namespace_empties_each_directory_before_it(storage):
    """Clean-up deletes several segmented files from its listing at once: each file's
    directory goes after its segments, and every first segment before any other object."""
    objects = storage._objects
    assert isinstance(objects, AzureObjects)
    names = ["_rotsink/inprogress/.a", "_rotsink/inprogress/.b"]
    for name in names:
        appended(storage, name, 2 * SEGMENT)

    hierarchical_directories(storage, "_rotsink", "_rotsink/inprogress", *names)
    deleted = recorded_deletes(objects)
    storage.delete_all(storage.list("_rotsink/inprogress"))
    firsts = {f"{storage.root}/{name}/{0:016d}" for name in names}
    assert set(deleted[:2]) == firsts
    for name in names:
        segments = [p for p in deleted if p.startswith(f"{storage.root}/{name}/")]
        assert len(segments) == 2 and deleted.index(f"{storage.root}/{name}") > max(
            deleted.index(p) for p in segments)
    assert storage.list("_rotsink/inprogress") == []
