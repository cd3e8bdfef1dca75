"""A Delta table rotsink joins: each of its table features honoured, or the table refused at
start naming the feature and what to do.

A table another writer made (Spark, Databricks, delta-rs, Flink) carries the features its
writer chose: in the protocol (``writerFeatures`` from writer version 7; the versions below
imply theirs: 2 ``appendOnly`` and ``invariants``, 3 ``checkConstraints``, 4
``changeDataFeed`` and ``generatedColumns``, 5 ``columnMapping``, 6 ``identityColumns``) and
in use (a constraint in the configuration, a generated column's expression in a field's
metadata). rotsink writes the table's Parquet files itself and hands delta-rs only their
``add`` actions, so whatever a feature asks of the writer about the rows (a constraint, a
generated value, a physical column name) is rotsink's to do, not delta-rs's: a feature is
*written* where rotsink does what it asks, *followed* where the table's readers see another
writer's use of it, and *refused* otherwise, at start, before anything is written -- found
only at the first table commit, the step would fail on every batch after its log commit.

delta-rs 1.6 refuses itself to commit to a table with ``identityColumns``, ``rowTracking``,
``domainMetadata`` (and so liquid clustering) or ``icebergCompatV1`` in its protocol
("Unsupported table features required"); those are refused here by name first. A feature
this module does not know is refused too: it may ask something of a writer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from commit_protocol.tables.delta.generated import SPELLED, Generated, parse_generated
from commit_protocol.tables.delta.mapping import mapping_mode, refusal_reason

# Features rotsink's appends honour, and how (docs/tables.md, "Delta table features")
WRITTEN = {
    "appendOnly": "rotsink only appends to a Delta table",
    "invariants": "NOT NULL columns are checked by the tasks before a file is written",
    "checkConstraints": "supported while the table has no CHECK constraint",
    "changeDataFeed": "an append's rows are inserts in the change data feed (no cdc files)",
    "generatedColumns": "the tasks compute a date, year, month, day or hour of a time "
                        "column, and check a value the stream gives",
    "timestampNtz": "TIMESTAMP_NTZ columns are written as the stream gives them",
    "deletionVectors": "another writer's deletes in place are followed: rotsink's reader "
                       "and the table's readers leave the rows out",
    "v2Checkpoint": "checkpoints as delta-rs writes them",
    "vacuumProtocolCheck": "rotsink never vacuums a table",
    "typeWidening": "the table's widened types are the output's",
    "typeWidening-preview": "the table's widened types are the output's",
    "variantType": "a table may have variant columns the stream does not write",
    "variantType-preview": "a table may have variant columns the stream does not write",
    "timestampNanos": "a table may have nanosecond columns the stream does not write",
    "columnMapping": "the files carry the columns' ids, where each column's physical name "
                     "is its name (a table that turned column mapping on after it was made)",
}
REFUSED = {
    "identityColumns": "identity values are assigned by the writer, and delta-rs commits to "
                       "no table with identity columns",
    "rowTracking": "row ids are assigned by the writer, and delta-rs commits to no table "
                   "with row tracking",
    "domainMetadata": "delta-rs commits to no table with domain metadata",
    "clustering": "liquid clustering needs domain metadata, which delta-rs does not commit",
    "icebergCompatV1": "UniForm writes Iceberg metadata at each commit, which delta-rs "
                       "does not",
    "icebergCompatV2": "UniForm writes Iceberg metadata at each commit, which delta-rs "
                       "does not",
    "inCommitTimestamp": "in-commit timestamps are written by the writer, which delta-rs "
                         "does not do for rotsink's commits",
}
_TIME_TYPES = ("timestamp", "timestamp_ntz", "date")
# writer version below 7 -> the features it implies (Delta's protocol, "Table Features")
_LEGACY = {2: ("appendOnly", "invariants"), 3: ("checkConstraints",),
           4: ("changeDataFeed", "generatedColumns"), 5: ("columnMapping",),
           6: ("identityColumns",)}


def protocol_features(min_writer_version: int, writer_features: list[str] | None,
                      reader_features: list[str] | None) -> set[str]:
    """The features a table's protocol supports.

    >>> sorted(protocol_features(4, None, None))
    ['appendOnly', 'changeDataFeed', 'checkConstraints', 'generatedColumns', 'invariants']
    """
    if min_writer_version >= 7:
        return set(writer_features or ()) | set(reader_features or ())
    return {f for version, names in _LEGACY.items() if version <= min_writer_version
            for f in names}


def check_table_features(uri: str, table: Any) -> None:
    """Refuse, naming it, a feature of ``table`` (a ``DeltaTable``) rotsink cannot honour,
    supported by its protocol or in use."""
    protocol = table.protocol()
    metadata = table.metadata()
    configuration = metadata.configuration or {}
    schema = json.loads(table.schema().to_json())
    supported = protocol_features(protocol.min_writer_version, protocol.writer_features,
                                  protocol.reader_features)
    legacy = protocol.min_writer_version < 7
    for feature in sorted(supported):
        if feature in WRITTEN:
            continue  # column mapping: refused below where a column's physical name differs
        if legacy and feature == "identityColumns":
            continue  # implied by writer version 6: refused below where a column is one
        reason = REFUSED.get(feature, "rotsink does not know what it asks of a writer")
        raise _refusal(uri, f"the table feature {feature!r}", reason)
    mode = mapping_mode(configuration)
    unmapped = None if mode == "none" else refusal_reason(schema)
    if unmapped is not None:
        raise _refusal(uri, f"column mapping (delta.columnMapping.mode={mode})", unmapped)
    for name, expression in sorted(_constraints(configuration).items()):
        raise _refusal(uri, f"the CHECK constraint {name} ({expression})",
                       "rotsink does not evaluate Delta's SQL expressions; drop it "
                       f"(ALTER TABLE ... DROP CONSTRAINT {name}) or check the rows in the "
                       "query before the sink")
    for path, key, value in _field_metadata(schema):
        if key == "delta.generationExpression" and generated_column(schema, path) is None:
            raise _refusal(uri, f"the generated column {path} (GENERATED ALWAYS AS "
                                f"({value}))", "rotsink computes a date, year, month, day or "
                                f"hour of a timestamp or date column ({', '.join(SPELLED)}) "
                                "and no other expression; compute the column in the query "
                                "and drop its expression, or write to a table without it")
        if key.startswith("delta.identity."):
            raise _refusal(uri, f"the identity column {path}", REFUSED["identityColumns"])
        if key == "delta.invariants":
            raise _refusal(uri, f"the invariant on {path} ({value})",
                           "rotsink does not evaluate Delta's SQL expressions")
    for path in _nested_required(schema):
        raise _refusal(uri, f"the NOT NULL nested field {path}",
                       "rotsink checks NOT NULL on top-level columns only")


def generated_columns(table: Any) -> tuple[Generated, ...]:
    """The table's generated columns, each one rotsink computes (the check refused others)."""
    schema = json.loads(table.schema().to_json())
    found = (generated_column(schema, f["name"]) for f in schema["fields"])
    return tuple(g for g in found if g is not None)


def generated_column(schema: dict[str, Any], name: str) -> Generated | None:
    """Top-level column ``name`` of ``schema`` as a generated column rotsink computes; None
    for a column that is not generated, or whose expression it does not compute."""
    fields = {f["name"]: f for f in schema["fields"]}
    field = fields.get(name)
    expression = field and (field.get("metadata") or {}).get("delta.generationExpression")
    if field is None or not expression or not isinstance(field["type"], str):
        return None
    found = parse_generated(name, expression, field["type"])
    source = None if found is None else fields.get(found.source)
    if source is None or source["type"] not in _TIME_TYPES:
        return None
    return found


def required_columns(table: Any) -> tuple[str, ...]:
    """The table's NOT NULL top-level columns, which a task checks before writing rows
    (Delta's invariants: a writer must never commit a null into one)."""
    schema = json.loads(table.schema().to_json())
    return tuple(f["name"] for f in schema["fields"] if not f.get("nullable", True))


def _constraints(configuration: Mapping[str, str]) -> dict[str, str]:
    prefix = "delta.constraints."
    return {k[len(prefix):]: v for k, v in configuration.items() if k.startswith(prefix)}


def _field_metadata(schema: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """(field path, metadata key, value) of every field, nested ones included."""
    for f in schema.get("fields", ()):
        path = f"{prefix}{f['name']}"
        for key, value in (f.get("metadata") or {}).items():
            yield path, key, value
        if isinstance(f["type"], dict) and f["type"].get("type") == "struct":
            yield from _field_metadata(f["type"], f"{path}.")


def _nested_required(schema: dict[str, Any]) -> Iterator[str]:
    """Paths of NOT NULL fields, elements and values below the top level."""
    def below(node: Any, path: str) -> Iterator[str]:
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind == "struct":
            for f in node["fields"]:
                if not f.get("nullable", True):
                    yield f"{path}.{f['name']}"
                yield from below(f["type"], f"{path}.{f['name']}")
        elif kind == "array":
            if not node.get("containsNull", True):
                yield f"{path}[]"
            yield from below(node["elementType"], f"{path}[]")
        elif kind == "map":
            if not node.get("valueContainsNull", True):
                yield f"{path}{{}}"
            yield from below(node["valueType"], f"{path}{{}}")

    for f in schema["fields"]:
        yield from below(f["type"], f["name"])


def _refusal(uri: str, what: str, why: str) -> Exception:
    from commit_protocol.vocabulary.errors import TableError

    return TableError(f"{uri}: the Delta table has {what}, which rotsink cannot honour: "
                      f"{why}. Nothing was written; write to a table without it, or to a new "
                      "path (rotsink creates the table)")
