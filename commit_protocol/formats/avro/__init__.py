"""Avro object container files, as Spark's ``spark-avro`` writes and reads them.

A file is a header (magic, the schema and codec in a metadata map, a 16-byte sync marker)
and then blocks (row count, byte size, the rows, compressed by the file's codec, then the
sync marker). So it is a row format: a chunk is one block, appended after the file's
earlier ones, and every committed offset is a block boundary, a valid file any Avro reader
reads. Later chunks of a file come from other tasks and processes: the marker is derived
from the file's final name (a hash: as unpredictable for the data as a random one), so
every writer of a file marks its blocks alike without reading the file back.

Types as ``spark-avro`` maps them (its ``SchemaConverters.toAvroType``): the top-level record
``topLevelRecord``; a nullable column a union ``[type, "null"]``, value first; byte and short
``int``; date ``int``/``date``; timestamp ``long``/``timestamp-micros``; timestamp without
time zone ``long``/``local-timestamp-micros``; decimal a ``fixed`` of the fewest bytes that
hold its precision, named ``<namespace>.<column>.fixed``, with ``decimal``; void ``null``; a
struct a record named after its column in the namespace of the record holding it; arrays and
maps (string keys) with their items' nullability.

Encoding is vectorized (no per-row Python): each column becomes, per row, the bytes of its
value (a union index, a zigzag varint, fixed bytes, a length and the bytes), built in numpy
from Arrow's buffers, and pyarrow joins the columns row by row into the block (a struct's
fields row by row, an array's or a map's items per row by their offsets). Codecs are
Avro's own, per block: ``null``, ``deflate`` (raw deflate: ISA-L's fast level unless a level
is set), ``snappy`` (raw snappy and the CRC32 of the rows, Spark's default) and
``zstandard``. Decoding (rotsink's readers) uncompresses the blocks and hands a ``null``-codec
container to fastavro.
"""

from commit_protocol.formats.avro.container import (
    CODECS,
    MAGIC,
    header,
    header_end,
    last_row_end,
    read_header,
    sync_marker,
)
from commit_protocol.formats.avro.decoder import decode
from commit_protocol.formats.avro.encoder import encode
from commit_protocol.formats.avro.schema import avro_schema, fixed_size

__all__ = ["CODECS", "MAGIC", "avro_schema", "decode", "encode", "fixed_size", "header",
           "header_end", "last_row_end", "read_header", "sync_marker"]
