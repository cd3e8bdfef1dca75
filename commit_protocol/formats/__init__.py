"""Arrow record batches <-> the bytes of part files, in formats Spark's own readers take.

One registry entry per format (:data:`FORMATS`) says everything the rest of rotsink needs to
know about it: its name (the ``format`` option), the suffix of its files, whether it is a
*row* format or a *bulk* one, the module that implements it, and the modules a task loads
once per Python worker. Options, file names, the task writer, the readers, ``rotsink cat``
and ``rotsink verify`` all read the registry; nothing else branches on a format's name.

* A **row** format (``jsonl``, ``csv``, ``text``, ``avro``) encodes chunk by chunk: a part
  file stays open across micro-batches, and the concatenation of its chunks is one valid file that
  :func:`decode_rows` (and ``spark.read.<format>``) reads back row for row. Its module
  defines ``encode(table, *, with_header) -> bytes``, ``decode(data, schema) -> Table`` and
  ``last_row_end(data) -> int`` (where the last whole row of a block ends: readers decode a
  file block by block). Its entry says whether a file starts with a ``header`` (the reader
  repeats it before each later block; the module's ``header_end(data)`` finds its end) and
  whether every row is one line, so that tasks may
  read byte ranges of one file (``splittable``).
* A **bulk** format (``parquet``, ``orc``) cannot be appended to: a slot's in-progress rows
  are *staged* in its ``staging`` format (Arrow IPC streams, :mod:`commit_protocol.formats.ipc`),
  an appendable row format, and encoded into the finished file when the slot rolls
  (:mod:`commit_protocol.task.conversion`). Its entry names its codecs; its module defines
  ``check_rows(batch)`` (values it cannot hold, refused before staging),
  ``open_writer(handle, table, config, *, encrypt)`` (the finished file's encoder),
  ``open_units(source, *, decryption_properties)`` (its reader: a
  :class:`~commit_protocol.formats.units.BulkFile` of row groups or stripes, with their
  offsets and statistics) and ``iter_file``/``read_file(data, schema, ...)`` (whole files);
  its entry says whether tasks may read its units apart (``splittable``).

Adding a row format is one module with ``encode``/``decode`` and one ``Format`` line below;
a bulk format is one module with the functions above and one line.

Where Spark's readers need a non-default option or cannot restore a value exactly, the
format modules say so; ``tests/spark/test_format_spark_compat.py`` pins each case. The
encoders assume a schema the driver checked when the query started
(:mod:`datasource.writing.schema_check`). This package imports nothing heavy: the driver plans a
batch without pyarrow, and a format's module is imported when first used.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from commit_protocol.vocabulary.errors import OptionError, UnencodableValueError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BULK_FORMATS", "FORMATS", "Format", "OUTPUT_FORMATS", "READ_BATCH_ROWS", "ROW_FORMATS",
           "UnencodableValueError", "check_rows", "decode_rows", "encode_rows", "file_codec",
           "format_named"]


@dataclass(frozen=True)
class Format:
    """One output format: see the package docstring."""

    name: str
    suffix: str
    bulk: bool
    module: str
    preload: tuple[str, ...] = ()
    staging: str | None = None  # bulk formats: the row format their in-progress rows use
    # Bulk formats compress inside the file: the ``compression`` option's values, the
    # default, and whether a level may be set (row formats' codecs are in codecs.py).
    compressions: tuple[str, ...] = ()
    default_compression: str = "none"
    levels: bool = False
    header: bool = False  # row formats: the first chunk of a file starts with a header line
    # every row names its fields (JSON lines): a file continues across a schema change that
    # adds columns; the other formats fix their columns at the file's head
    schema_in_rows: bool = False
    # tasks may read byte ranges of one file: row formats whose every row is one line (no
    # line break inside); bulk formats whose units a task can read alone at low memory
    splittable: bool = False
    # a row format whose chunks are blocks it compresses itself, marked for their file
    # (Avro): its encoder takes the file's name and the codec; no whole-file codec wraps it
    blocks: bool = False

    def implementation(self) -> ModuleType:
        """The module that encodes and decodes this format (imported on first use)."""
        return importlib.import_module(self.module)


# pyarrow imports pandas the first time a Python value becomes an Arrow scalar (its pandas
# check), as in compute calls with a constant: the partitioner's fill_null, CSV's quoting
# check, ORC's date rebase, Parquet's dictionary choice; of the task paths only unpartitioned
# JSON lines avoids it (measured with an import hook; a worker that only iterates its Arrow
# batches never imports pandas). 339 modules, ~29,000 objects: imported after the freeze,
# they cost every later task's full collection ~10 ms of CPU. Preloaded, they are frozen with
# the rest.
_ROW_PRELOAD = ("polars", "pandas")

FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("jsonl", ".jsonl", bulk=False, module="commit_protocol.formats.jsonl",
           preload=_ROW_PRELOAD, splittable=True, schema_in_rows=True),
    # quoted CSV values may hold line breaks: a task cannot find a row's start mid-file
    Format("csv", ".csv", bulk=False, module="commit_protocol.formats.csv",
           preload=_ROW_PRELOAD, header=True),
    Format("text", ".txt", bulk=False, module="commit_protocol.formats.text",
           splittable=True),
    # Avro's own block codecs; snappy is spark-avro's default
    Format("avro", ".avro", bulk=False, module="commit_protocol.formats.avro",
           preload=("numpy",), header=True, blocks=True,
           compressions=("snappy", "deflate", "zstd", "none"), default_compression="snappy"),
    # Spark's Parquet reader ships no brotli codec; pyarrow's "lz4" is LZ4_RAW, offered under
    # that name. snappy is Spark's own Parquet default.
    # pyarrow's Parquet and ORC writers import pandas on first use (0.2 s, ~29,000 objects):
    # preloaded, so it is frozen with the rest (datasource.writing.writer.freeze_task_modules).
    Format("parquet", ".parquet", bulk=True, module="commit_protocol.formats.parquet",
           preload=("pyarrow.parquet", "pandas"), staging="ipc",
           compressions=("snappy", "zstd", "gzip", "lz4_raw", "none"),
           default_compression="snappy", levels=True, splittable=True),
    # zstd is Spark's own ORC default (since 4.0); pyarrow's ORC writer takes no level.
    Format("orc", ".orc", bulk=True, module="commit_protocol.formats.orc",
           preload=("pyarrow.orc", "pandas"), staging="ipc",
           compressions=("zstd", "snappy", "lz4", "zlib", "none"), default_compression="zstd"),
    # Not an output format: the staged form of bulk formats' in-progress rows.
    Format("ipc", ".arrows", bulk=False, module="commit_protocol.formats.ipc"),
)}
OUTPUT_FORMATS = tuple(name for name in FORMATS if name != "ipc")
ROW_FORMATS = tuple(name for name in OUTPUT_FORMATS if not FORMATS[name].bulk)
BULK_FORMATS = tuple(name for name, f in FORMATS.items() if f.bulk)

# Rows per batch a reader hands on: small enough that Spark converts one batch while the
# next decodes (measured: 500,000-row batches read 30% slower), large enough that per-batch
# costs vanish (pyarrow's own default for Parquet).
READ_BATCH_ROWS = 65_536



def format_named(name: str) -> Format:
    """The output format ``name`` (the ``format`` option); an ``OptionError`` naming the
    formats otherwise."""
    if name not in OUTPUT_FORMATS:
        raise OptionError(f"option format={name!r}: expected one of "
                          f"{', '.join(OUTPUT_FORMATS)}")
    return FORMATS[name]


def _row_format(name: str) -> ModuleType:
    entry = FORMATS[name] if name in FORMATS else format_named(name)
    if entry.bulk:
        raise OptionError(f"format {name!r} is a bulk format: its files are written whole, "
                          f"not chunk by chunk ({', '.join(ROW_FORMATS)} are)")
    return entry.implementation()


def file_codec(fmt: str, compression: str) -> str:
    """The codec around a row file's bytes: ``compression``, but ``none`` for a format that
    compresses inside its file (Avro's blocks; bulk formats)."""
    return "none" if FORMATS[fmt].compressions else compression


def encode_rows(fmt: str, batch: pa.RecordBatch | pa.Table, *, with_header: bool,
                file_name: str = "", compression: str = "none",
                level: int | None = None, checked: bool = False) -> bytes:
    """Encode one chunk of a row-format part file. Runs on executors.

    Parameters
    ----------
    fmt : str
        A row format; the schema must have passed
        :func:`datasource.writing.schema_check.check_schema`.
    batch : pyarrow.RecordBatch or pyarrow.Table
        The rows of this chunk.
    with_header : bool
        ``csv`` and ``avro``: start with the file's header. Pass True for the first chunk of
        a file and only then; with zero rows the chunk is then just the header, so the
        caller's rule stays "the first chunk has the header".
    file_name, compression, level
        ``avro`` (``Format.blocks``): the file's final name (its blocks' sync marker comes
        from it) and the codec of its blocks.
    checked : bool
        The caller ran :func:`check_rows` on these rows already (``errors.mode=quarantine``
        sorts refused rows out first): not again.

    Returns
    -------
    bytes
        The chunk; ``b""`` for zero rows (except the csv header). Chunks concatenate.

    Raises
    ------
    UnencodableValueError
        A value the format cannot hold (:func:`check_rows`; ``text``: a line break).
    """
    import pyarrow as pa

    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    if not checked:
        check_rows(fmt, table)
    if FORMATS[fmt].blocks:
        return _row_format(fmt).encode(table, with_header=with_header, file_name=file_name,
                                       compression=compression, level=level)
    return _row_format(fmt).encode(table, with_header=with_header)


def check_rows(fmt: str, batch: pa.RecordBatch) -> None:
    """Refuse the values format ``fmt`` cannot hold (a :class:`RowRefusedError` naming the
    column and the reason); nothing for a format that holds every value Spark sends."""
    check = getattr(FORMATS[fmt].implementation(), "check_rows", None)
    if check is not None:
        check(batch)


def decode_rows(fmt: str, data: bytes, schema: pa.Schema) -> pa.Table:
    """Decode a whole row-format file (concatenated chunks) into exactly ``schema``.

    The result has ``schema``'s types and column order and equals the encoded rows,
    except that ``text`` reads a null back as ``""``.

    Raises
    ------
    SchemaMismatchError
        ``csv`` only: the header names other columns.
    pyarrow.ArrowInvalid
        If ``data`` is not a file this module wrote for ``schema``.
    """
    return _row_format(fmt).decode(data, schema)
