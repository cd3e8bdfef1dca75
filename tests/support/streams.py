"""Deterministic numbered input streams and a helper to run rotsink queries to completion."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

SCHEMA = "id LONG, name STRING, grp STRING, score DOUBLE"
SCHEMA_V2 = SCHEMA + ", tag STRING"  # the same rows once their producer added a field


def group_of(row_id: int, *, rows_per_file: int = 0) -> str:
    """A row's ``grp``: by row (``g<id % 3>``), or by file when ``rows_per_file`` is given
    (every row of a file in one group, so each micro-batch touches one directory)."""
    return f"g{(row_id // rows_per_file if rows_per_file else row_id) % 3}"


def write_numbered_source(directory: Path, *, files: int, rows_per_file: int,
                          start_file: int = 0, group_by_file: bool = False,
                          tagged: bool = False, null_names: bool = False) -> int:
    """``files`` JSON files of uniquely numbered rows; returns the total row count written.
    ``tagged``: each row also has a field ``tag`` (``t<id>``), which :data:`SCHEMA` leaves
    out and :data:`SCHEMA_V2` reads: the field a producer adds to a topic. ``null_names``:
    the rows :func:`has_null_name` says have a null ``name``."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = rows_per_file if group_by_file else 0
    for f in range(start_file, start_file + files):
        lines = [numbered_row(f * rows_per_file + r, rows_per_file=per_file, tagged=tagged,
                              null_name=null_names and has_null_name(f * rows_per_file + r))
                 for r in range(rows_per_file)]
        (directory / f"in-{f:05d}.json").write_text("\n".join(lines) + "\n")
    return files * rows_per_file


def numbered_row(i: int, *, rows_per_file: int = 0, tagged: bool = False,
                 null_name: bool = False) -> str:
    """Row ``i`` as a JSON line (quotes, a backslash and a non-ASCII letter in its name)."""
    row = {"id": i, "name": None if null_name else f"row \"{i}\", ü\\",
           "grp": group_of(i, rows_per_file=rows_per_file), "score": i / 4}
    return json.dumps({**row, "tag": tag_of(i)} if tagged else row)


def has_null_name(row_id: int) -> bool:
    """Whether a source written with ``null_names`` gives row ``row_id`` a null name."""
    return row_id % 11 == 5


def tag_of(row_id: int) -> str:
    """The value of a tagged row's added field."""
    return f"t{row_id}"


@contextlib.contextmanager
def refused_at_start(match: str) -> Iterator[None]:
    """The block starts a rotsink query that cannot start: rotsink's own error (``match``),
    raised by ``start()`` itself (not by the query after ``start()`` returned: that would be
    a ``StreamingQueryException``), without Spark's wrapping of a planning worker's error."""
    import pytest

    from commit_protocol.vocabulary.errors import RotsinkError

    with pytest.raises(RotsinkError, match=match) as caught:
        yield
    assert not {"PicklingError", "PYTHON_DATA_SOURCE_ERROR"} & set(str(caught.value).split())


def run_to_completion(spark, source: Path, out: Path, checkpoint: Path, *,
                      files_per_batch: int | str = 1, transform=None, schema: str = SCHEMA,
                      **options: str):
    """Run a rotsink query over ``source`` with ``availableNow`` until it has read it all."""
    df = (spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_batch)
          .json(str(source)))
    if transform is not None:
        df = transform(df)
    writer = (df.writeStream.format("rotsink").option("checkpointLocation", str(checkpoint))
              .trigger(availableNow=True))
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start(str(out))
    query.awaitTermination()
    return query


def rotsink_ids(spark, out: Path, **options: str) -> list[int]:
    reader = spark.read.format("rotsink")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(r.id for r in reader.load(str(out)).select("id").collect())


def assert_round_trip(spark, tmp_path: Path, expected, fmt: str) -> None:
    """Stream ``expected`` (a DataFrame) through rotsink as ``fmt``; rotsink's reader must
    return exactly its schema and rows."""
    expected.write.parquet(str(tmp_path / "src"))
    stream = spark.readStream.schema(expected.schema).parquet(str(tmp_path / "src"))
    out = str(tmp_path / "out")
    (stream.writeStream.format("rotsink").option("format", fmt)
     .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
     .start(out).awaitTermination())
    back = spark.read.format("rotsink").load(out)
    assert back.schema.simpleString() == expected.schema.simpleString()
    assert sorted(map(str, back.collect())) == sorted(map(str, expected.collect()))
