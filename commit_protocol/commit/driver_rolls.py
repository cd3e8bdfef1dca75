"""What the driver does to a file a commit rule rolled (age, inactivity, batch count of a slot
no task touched): tasks finish the files they roll themselves, the commit finishes these.

Both steps write to fresh names or after winning a claim, and the intent records the result,
so a roll-forward publishes exactly it and a retried commit does the work again elsewhere.
"""

from __future__ import annotations

from dataclasses import replace

from commit_protocol.commit.merge import Finalized
from commit_protocol.crypto.sealed import MAX_HEADER, Sealer
from commit_protocol.records.config import SinkConfig
from commit_protocol.storage import Storage
from commit_protocol.vocabulary import failpoints
from commit_protocol.vocabulary.naming import claim_path, temp_name


def seal_rolled(storage: Storage, config: SinkConfig, f: Finalized, batch_id: int) -> Finalized:
    """End a driver-rolled encrypted file with its FINAL record (tasks seal their own).

    Appends in place only after winning this (batch, file) claim with the file at its
    committed length, like a task; otherwise (a retried commit, a zombie's bytes) the
    committed prefix is copied to a fresh temp first. The intent records the new size, so a
    roll-forward publishes exactly these bytes.
    """
    if not f.rolled_by_driver or config.keys is None:
        return f
    sealer = Sealer.resume(storage.read(f.temp, 0, MAX_HEADER), config.keys.ring(),
                           path=f.temp)
    claim = claim_path(batch_id, f"final:{f.name}")
    temp = f.temp
    if not (storage.create_marker(claim) and storage.size(temp) == f.size):
        temp = temp_name(f.name)
        storage.copy_prefix(f.temp, temp, f.size)
    final = sealer.final(f.size)
    with storage.open_append(temp) as handle:
        handle.write(final)
    return replace(f, temp=temp, size=f.size + len(final))


def convert_rolled(storage: Storage, config: SinkConfig, f: Finalized) -> Finalized:
    """Encode a staged file that a commit rule rolled (tasks encode what they roll).

    Reads only its committed bytes, so a zombie's appends cannot reach the finished file;
    the finished file goes to a fresh temp name that the intent records, so a roll-forward
    publishes exactly it, and a retried commit encodes again into another temp.
    """
    if not f.rolled_by_driver:
        return f
    from commit_protocol.task.conversion import convert_staged

    failpoints.hit("driver.before_convert")
    temp, size, footer = convert_staged(storage, f.temp, f.size, config, name=f.name)
    failpoints.hit("driver.after_convert")
    return replace(f, temp=temp, size=size, footer=footer)
