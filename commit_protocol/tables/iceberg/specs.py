"""The partition spec an output's files are added under, when another writer changes the
table's spec while the stream runs (Iceberg's partition evolution).

An output's files are laid out by its partition terms for good: a file in
``ts_day=2026-12-01/`` holds that day's rows of every ``id`` bucket, and files span
micro-batches. When another writer evolves the table (adds ``bucket(8, id)``, replaces
``days(ts)`` by ``hours(ts)``), the output keeps adding its files under the spec they are
laid out by, the table's earlier spec, as Iceberg's own Spark writer does with its
``output-spec-id`` write option: Iceberg readers plan every file by its own spec (the
partition tuple of each file is the old spec's), and old files stay untouched. The new spec
is not taken up under the same path, because path readers could no longer read the output:
new directories beside the old ones (``ts_day=.../id_bucket=3/`` beside ``ts_day=.../``)
make Spark's partition discovery fail ("Conflicting partition column names detected",
measured on PySpark 4.3). A new output path takes it up.

pyiceberg (0.12) writes the manifest of added files under the table's current spec only;
:func:`appending` adds them under the output's spec instead, in a manifest of that spec, as
Iceberg's Java appends do for files of any spec.
"""

from __future__ import annotations

from typing import Any

from commit_protocol.tables.iceberg.transforms import same_spec, terms_of
from commit_protocol.vocabulary.partition_terms import PartitionTerm


def output_spec(metadata: Any, terms: tuple[PartitionTerm, ...]) -> Any | None:
    """The spec of the table's ``metadata`` that partitions as ``terms``: the current one
    when it does, else the newest earlier one that does; None when the table never did.
    A spec whose source column the table has dropped since cannot be the output's."""
    schema = metadata.schema()
    current = metadata.spec()
    earlier = sorted((s for s in metadata.specs().values() if s.spec_id != current.spec_id),
                     key=lambda s: -s.spec_id)
    for spec in (current, *earlier):
        if _sources_known(spec, schema) and same_spec(terms_of(spec, schema), terms):
            return spec
    return None


def spelled(terms: tuple[PartitionTerm, ...]) -> str:
    return ", ".join(t.ddl for t in terms) or "nothing"


def appending(snapshot: Any, *, merging: bool, spec: Any) -> Any:
    """The append of a batch's files (pyiceberg's fast or merging append) that writes their
    manifest under ``spec``, which may be an earlier spec of the table."""
    transaction = snapshot._transaction
    if spec.spec_id == transaction.table_metadata.default_spec_id:
        return snapshot.merge_append() if merging else snapshot.fast_append()
    from pyiceberg.table.snapshots import Operation

    # built as pyiceberg's UpdateSnapshot builds its appends
    return _classes()[merging](spec, operation=Operation.APPEND, transaction=transaction,
                               io=snapshot._io, branch=snapshot._branch,
                               snapshot_properties=snapshot._snapshot_properties)


_CLASSES: dict[bool, type] = {}


def _classes() -> dict[bool, type]:
    """pyiceberg's fast (False) and merging (True) appends, their added files' manifest
    written under ``output_spec`` (an append deletes nothing, so the rest of pyiceberg's
    ``_manifests`` is the snapshot's existing manifests, merged where the table asks)."""
    if _CLASSES:
        return _CLASSES
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus
    from pyiceberg.table.update.snapshot import _FastAppendFiles, _MergeAppendFiles

    class UnderOutputSpec:
        """Mixed in before pyiceberg's append: cooperative, so pyiceberg builds the rest."""

        def __init__(self, spec: Any, **arguments: Any) -> None:
            super().__init__(**arguments)
            self.output_spec = spec

        def _manifests(self) -> list[Any]:
            producer: Any = self
            added = producer._added_data_files
            if not added:
                return producer._process_manifests(producer._existing_manifests())
            with producer.new_manifest_writer(spec=self.output_spec) as writer:
                for data_file in added:
                    writer.add(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=producer.snapshot_id,
                        sequence_number=None, file_sequence_number=None, data_file=data_file))
            return producer._process_manifests([writer.to_manifest_file(),
                                                *producer._existing_manifests()])

    for merging, base in ((False, _FastAppendFiles), (True, _MergeAppendFiles)):
        _CLASSES[merging] = type(f"{base.__name__}UnderOutputSpec", (UnderOutputSpec, base), {})
    return _CLASSES


def _sources_known(spec: Any, schema: Any) -> bool:
    try:
        for field in spec.fields:
            schema.find_field(field.source_id)
    except ValueError:
        return False
    return True
