"""Step 5 of a commit: the files a staged state finalizes take their final names, then the
partitions it completes get their ``_SUCCESS`` markers.

Each step is safe to repeat (a roll-forward of a commit cut short does them again): a publish
that an earlier attempt finished is recognised, a marker that exists is left alone. The
files are independent of each other, so they go out together where storage gains from it
(:func:`~commit_protocol.storage.concurrent.each`); every marker follows every publish, so a
``_SUCCESS`` never precedes a file of its partition.
"""

from __future__ import annotations

from collections.abc import Sequence

from commit_protocol.metrics import timed
from commit_protocol.records.state import Publish
from commit_protocol.storage import Storage
from commit_protocol.storage.concurrent import each
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.errors import CommitError, TruncatedFileError
from commit_protocol.vocabulary.naming import success_marker


@timed("publish")
def publish_all(storage: Storage, publishes: Sequence[Publish],
                directories: Sequence[str]) -> None:
    """Publish every finished file, then mark every completed partition directory."""

    def publish(p: Publish) -> None:
        failpoints.hit("driver.before_rename")
        publish_file(storage, p.temp, p.name, p.size)
        failpoints.hit("driver.after_rename")

    def mark(directory: str) -> None:
        failpoints.hit("driver.before_mark")
        storage.create_marker(success_marker(directory))  # False: it exists
        failpoints.hit("driver.after_mark")

    each(storage, publish, publishes)
    each(storage, mark, directories)


def publish_file(storage: Storage, temp: str, name: str, size: int) -> None:
    """Rename the first ``size`` bytes of ``temp`` to ``name`` (bytes past them are a
    zombie's); recognise a rename an earlier attempt already did."""
    try:
        storage.publish(temp, name, length=size)
    except FileNotFoundError:
        if storage.exists(name) and storage.size(name) == size:
            return  # published by an earlier attempt of this commit
        raise CommitError(f"cannot finalize {name}: neither its temp file {temp} nor a "
                          f"published file of {size} bytes exists") from None
    except EOFError as e:
        raise TruncatedFileError(f"cannot finalize {name}: its temp file {temp} holds fewer "
                                 f"than the {size} committed bytes ({e})") from e
    except FileExistsError:
        raise CommitError(f"refusing to overwrite {name}: it exists and is not this "
                          f"commit's file (expected {size} bytes)") from None
