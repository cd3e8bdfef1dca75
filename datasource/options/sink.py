"""Parsing and validating the public options (DESIGN section 5) into a ``SinkConfig``.

Runs once on the driver; executors receive only the frozen result. Every error names the
option and the bad value.
"""

from __future__ import annotations

from collections.abc import Mapping

from commit_protocol.crypto.keys import KeyRefs
from commit_protocol.formats import FORMATS, file_codec, format_named
from commit_protocol.formats.codecs import ROW_CODEC_SUFFIX, RowCodec, bulk_codec
from commit_protocol.records.config import RotationPolicy, SinkConfig
from commit_protocol.storage.urls import check_store_url
from commit_protocol.tables import TableFormat
from commit_protocol.vocabulary.durations import parse_duration_ms
from commit_protocol.vocabulary.errors import OptionError
from commit_protocol.vocabulary.partition_terms import identity_columns
from datasource.options.names import (
    CLEANUP_DELAY,
    COMPACT_INTERVAL,
    COMPRESSION,
    COMPRESSION_LEVEL,
    ENCRYPTED_SUFFIX,
    ENCRYPTION_KEY,
    ENCRYPTION_KEYS,
    FEED_RETENTION,
    FILE_PREFIX,
    FILE_SUFFIX,
    FORMAT,
    FS_PREFIX,
    FSYNC,
    INACTIVITY,
    INTERVAL,
    MAX_BATCHES,
    MAX_BYTES,
    MAX_OPEN_FILES,
    MAX_RECORDS,
    METRICS_MAILBOX,
    PARTITION_BY,
    PARTITION_COMMIT_DELAY,
    PATH,
    QUERY_NAME,
    RETENTION,
    ROLL_ON_IDLE,
    ROW_GROUP_BYTES,
    SCHEMA_EVOLUTION,
    STRIPE_BYTES,
    TABLE_FORMAT,
    TABLE_PREFIX,
    WRITER_PARTITION_COLUMNS,
    reject_unknown,
)
from datasource.options.quarantine import with_error_policy
from datasource.options.tables import check_table_options, table_format
from datasource.options.values import (
    driver_path,
    parse_bool,
    parse_int,
    parse_size,
    partition_terms,
)


def parse_sink_options(options: Mapping[str, str]) -> SinkConfig:
    """Validate the writer's options (case-insensitive keys, as Spark passes them)."""
    opts = {k.lower(): v for k, v in options.items()}
    reject_unknown(opts, reading=False)
    def get(key: str, default: str = "") -> str:
        return opts.get(key.lower(), default)

    def given(key: str) -> str | None:
        return opts.get(key.lower())

    path = get(PATH)
    if not path:
        raise OptionError("option path is required: .option('path', '/data/out') or .start(path)")
    path = driver_path(path)
    check_store_url(path)
    fmt = format_named(get(FORMAT, "jsonl").lower()).name
    level_text = given(COMPRESSION_LEVEL)
    level = None if level_text is None else parse_int(COMPRESSION_LEVEL, level_text, minimum=0)
    compression = _compression(fmt, given(COMPRESSION), level)
    keys = _write_keys(opts)
    if keys is not None and fmt == "orc":
        raise OptionError(f"option {ENCRYPTION_KEY} with format orc: pyarrow has no ORC "
                          "encryption, so rotsink cannot encrypt ORC files; use format parquet "
                          "(Parquet Modular Encryption) or a row format")
    entry = table_format(given(TABLE_FORMAT))
    terms = partition_terms(given(PARTITION_BY), given(WRITER_PARTITION_COLUMNS))
    config = SinkConfig(
        path=path, format=fmt, compression=compression, compression_level=level, keys=keys,
        rotation=RotationPolicy(
            max_bytes=parse_size(MAX_BYTES, get(MAX_BYTES, "134217728")),
            max_records=parse_int(MAX_RECORDS, get(MAX_RECORDS, "0"), minimum=0),
            max_batches=parse_int(MAX_BATCHES, get(MAX_BATCHES, "0"), minimum=0),
            interval_ms=parse_duration_ms(INTERVAL, get(INTERVAL, "60s")),
            inactivity_ms=parse_duration_ms(INACTIVITY, get(INACTIVITY, "60s")),
            roll_on_idle=parse_bool(ROLL_ON_IDLE, get(ROLL_ON_IDLE, "false")),
        ),
        partition_by=identity_columns(terms),
        partition_terms=terms if any(t.hidden for t in terms) else (),
        partition_by_given=given(PARTITION_BY) is not None
        or given(WRITER_PARTITION_COLUMNS) is not None,
        file_prefix=_prefix(get(FILE_PREFIX, "part")),
        file_suffix=get(FILE_SUFFIX) or _default_suffix(fmt, compression, keys is not None),
        max_open_files=parse_int(MAX_OPEN_FILES, get(MAX_OPEN_FILES, "100"), minimum=1),
        row_group_bytes=_row_group_bytes(fmt, given(ROW_GROUP_BYTES), given(STRIPE_BYTES)),
        compact_interval=parse_int(COMPACT_INTERVAL, get(COMPACT_INTERVAL, "10"), minimum=1),
        compact_interval_explicit=given(COMPACT_INTERVAL) is not None,
        retention_ms=None if get(RETENTION) in ("", "off")
        else parse_duration_ms(RETENTION, get(RETENTION)),
        cleanup_delay_ms=parse_duration_ms(CLEANUP_DELAY, get(CLEANUP_DELAY, "10m")),
        feed_retention_ms=None if get(FEED_RETENTION) in ("", "off")
        else parse_duration_ms(FEED_RETENTION, get(FEED_RETENTION)),
        partition_commit_delay_ms=None if get(PARTITION_COMMIT_DELAY) in ("", "off")
        else parse_duration_ms(PARTITION_COMMIT_DELAY, get(PARTITION_COMMIT_DELAY)),
        fs_options=fs_options(options),
        schema_evolution=_schema_evolution(get(SCHEMA_EVOLUTION, "none")),
        fsync=parse_bool(FSYNC, get(FSYNC, "true")),
        table_format=None if entry is None else entry.name,
        table_options=_table_options(options, entry),
        query_name=get(QUERY_NAME).strip(),
        metrics_mailbox=given(METRICS_MAILBOX),
    )
    check_table_options(config)
    return with_error_policy(config, opts, parse_sink_options)


def _table_options(options: Mapping[str, str], entry: TableFormat | None) -> dict[str, str]:
    """The ``table.*`` options without the prefix, each key as its format names it (Spark
    passes them lower-cased)."""
    given = {k[len(TABLE_PREFIX):]: v for k, v in options.items()
             if k.lower().startswith(TABLE_PREFIX) and k.lower() != TABLE_FORMAT.lower()}
    return given if entry is None else {entry.canonical(k): v for k, v in given.items()}


def fs_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``fs.*`` options with the prefix removed: settings of the fsspec filesystem,
    for writers and readers alike."""
    return {k[len(FS_PREFIX):]: v for k, v in options.items() if k.lower().startswith(FS_PREFIX)}


def _row_group_bytes(fmt: str, row_group: str | None, stripe: str | None) -> int:
    """``parquet.rowGroupBytes`` (128 MB) or ``orc.stripeBytes`` (64 MB, ORC's default), the
    one of the path's format: the other format's option is refused rather than ignored."""
    key, text, default = ((STRIPE_BYTES, stripe, "64m") if fmt == "orc"
                          else (ROW_GROUP_BYTES, row_group, "128m"))
    other, other_text = (ROW_GROUP_BYTES, row_group) if fmt == "orc" else (STRIPE_BYTES, stripe)
    if other_text is not None:
        raise OptionError(f"option {other}={other_text!r} is for format "
                          f"{other.split('.')[0]}; this path is format {fmt}"
                          + (f" (its option is {key})" if FORMATS[fmt].bulk else ""))
    size = parse_size(key, text or default)
    if size < 1:
        raise OptionError(f"option {key}={text!r}: expected a byte count >= 1")
    return size



def _compression(fmt: str, value: str | None, level: int | None) -> str:
    """The codec, checked together with its level (a bad pair fails here, not in a task)."""
    if FORMATS[fmt].compressions:  # bulk formats and Avro: codecs inside the file
        return bulk_codec(FORMATS[fmt], value or FORMATS[fmt].default_compression, level)
    return RowCodec((value or "none").lower(), level).name


def _write_keys(opts: Mapping[str, str]) -> KeyRefs | None:
    """The key references, resolved once here so a bad one fails at start; the derived key
    id is fixed now so that every executor writes the same id."""
    keys = KeyRefs.from_options(opts)
    if keys is None:
        return None
    if keys.write_ref is None:
        raise OptionError(f"option {ENCRYPTION_KEYS} is for reading; writing encrypted output "
                          f"needs {ENCRYPTION_KEY}")
    keys.ring()  # resolves every reference: a bad one fails now, naming its option
    key_id, _ = keys.write_key()
    return KeyRefs(keys.write_ref, key_id, keys.read_refs)


def _schema_evolution(text: str) -> str:
    """The mode, in its one spelling (``widenTypes,addColumns`` is ``addColumns,widenTypes``)."""
    from commit_protocol.records.schema_evolution import MODES

    modes = {",".join(sorted(mode.lower().split(","))): mode for mode in MODES}
    given = ",".join(sorted(part.strip().lower() for part in text.split(",")))
    if given not in modes:
        raise OptionError(f"option {SCHEMA_EVOLUTION}={text!r}: expected one of "
                          f"{', '.join(MODES)}")
    return modes[given]


def _prefix(text: str) -> str:
    if not text or text[0] in "._" or "/" in text:
        raise OptionError(f"option file.prefix={text!r}: expected a non-empty name without '/' "
                          "that does not start with '.' or '_' (readers would hide the files)")
    return text


def _default_suffix(fmt: str, compression: str, encrypted: bool) -> str:
    suffix = FORMATS[fmt].suffix
    if FORMATS[fmt].bulk:
        return suffix
    return (suffix + ROW_CODEC_SUFFIX[file_codec(fmt, compression)]
            + (ENCRYPTED_SUFFIX if encrypted else ""))
