"""Deleting files on an object store: which objects, and in what order.

A file is a plain object or its segments (:mod:`commit_protocol.storage.segments`). Its
first segment goes first, in a request of its own, so a delete cut short leaves no file
(only remains, which are listed, so clean-up removes them, and which refuse appends).
"""

from __future__ import annotations

from collections.abc import Iterable

from commit_protocol.storage.objects import Objects
from commit_protocol.storage.segments import Blob, segment_offset, segments_of


def delete_files(objects: Objects, paths: Iterable[str]) -> None:
    """Delete the files at ``paths`` (absolute object paths); a missing one is not an error.

    One LIST per directory holding two or more of them (which the caller has usually just
    listed), else one of the file's own segments, and one or two DeleteObjects per 1,000
    objects, instead of a LIST and a DeleteObjects per file: clean-up deletes a compaction
    interval's log files and intents at once.
    """
    by_directory: dict[str, list[str]] = {}
    for path in paths:
        by_directory.setdefault(path.rpartition("/")[0], []).append(path)
    files: list[tuple[str, list[str]]] = []
    for directory, names in by_directory.items():
        listed = segments_by_file(objects.list(directory + "/")) if len(names) > 1 else None
        for path in names:
            segments = segments_of(path, objects.list(path + "/")) if listed is None \
                else listed.get(path, [])
            files.append((path, [blob.path for _, blob in segments]))
    for request in deletion_requests(files):
        objects.delete(request)


def deletion_requests(files: Iterable[tuple[str, list[str]]]) -> list[list[str]]:
    """The delete requests that remove ``files`` (each its path and its segments' objects
    in offset order, none for a plain object), in order: first the first segment of every
    file with more than one, then everything else.

    >>> deletion_requests([("d/f", ["d/f/0", "d/f/4"]), ("d/g", ["d/g/0"]), ("d/p", [])])
    [['d/f/0'], ['d/f/4', 'd/f', 'd/g/0', 'd/g', 'd/p']]
    """
    firsts: list[str] = []
    rest: list[str] = []
    for path, objects in files:
        if len(objects) > 1:
            firsts.append(objects[0])
            objects = objects[1:]
        rest += [*objects, path]
    return [request for request in (firsts, rest) if request]


def segments_by_file(blobs: Iterable[Blob]) -> dict[str, list[tuple[int, Blob]]]:
    """The segments among ``blobs`` by the file they belong to, each file's by offset: one
    listing of a directory, for many of its files.

    >>> blobs = [Blob("d/f/0000000000000004", 2, 0), Blob("d/f/0000000000000000", 4, 0),
    ...          Blob("d/plain", 3, 0)]
    >>> {f: [off for off, _ in found] for f, found in segments_by_file(blobs).items()}
    {'d/f': [0, 4]}
    """
    found: dict[str, list[tuple[int, Blob]]] = {}
    for blob in blobs:
        parent, _, name = blob.path.rpartition("/")
        if (offset := segment_offset(name)) is not None:
            found.setdefault(parent, []).append((offset, blob))
    return {path: sorted(segments) for path, segments in found.items()}
