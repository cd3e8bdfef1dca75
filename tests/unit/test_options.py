"""Options: defaults, parsing, and errors that name the option and the value."""

from __future__ import annotations

import re

import pytest

from commit_protocol.vocabulary.durations import parse_duration_ms
from commit_protocol.vocabulary.errors import OptionError, RotsinkError
from datasource.options.sink import parse_sink_options


def test_defaults_match_the_design():
    config = parse_sink_options({"path": "/out"})
    assert (config.format, config.compression, config.file_suffix) == ("jsonl", "none", ".jsonl")
    assert config.rotation.max_bytes == 134217728 and config.rotation.interval_ms == 60_000
    assert (config.compact_interval, config.cleanup_delay_ms, config.max_open_files) == \
        (10, 600_000, 100)
    assert parse_sink_options({"path": "/o", "format": "parquet"}).compression == "snappy"
    assert config.row_group_bytes == 128 << 20
    assert parse_sink_options({"path": "/o", "parquet.rowGroupBytes": "8mb"}).row_group_bytes \
        == 8 << 20
    avro = parse_sink_options({"path": "/o", "format": "avro"})
    assert (avro.compression, avro.file_suffix) == ("snappy", ".avro")  # codec inside the file
    assert config.fsync  # durable through power loss unless traded away
    assert not parse_sink_options({"path": "/o", "commit.fsync": "FALSE"}).fsync


def test_a_relative_path_is_taken_from_the_drivers_working_directory(tmp_path, monkeypatch):
    # tasks run in their executors' working directories (docs/cluster.md)
    monkeypatch.chdir(tmp_path)
    assert parse_sink_options({"path": "out"}).path == str(tmp_path / "out")
    assert parse_sink_options({"path": "s3://bucket/out"}).path == "s3://bucket/out"


@pytest.mark.parametrize("text, ms", [("90s", 90_000), ("15 minutes", 900_000), ("1h", 3_600_000),
                                      ("0", 0), ("250ms", 250), ("1.5m", 90_000)])
def test_durations(text, ms):
    assert parse_duration_ms("rotation.interval", text) == ms


@pytest.mark.parametrize("options, message", [
    ({}, "option path is required"),
    ({"format": "xml"}, "option format='xml'"),
    ({"compression": "lz4"}, "option compression='lz4'.*crash"),
    ({"format": "parquet", "compression": "zip"}, "option compression='zip' for format parquet"),
    ({"rotation.maxBytes": "big"}, "option rotation.maxBytes='big'"),
    ({"rotation.maxRecords": "-1"}, "option rotation.maxRecords='-1'"),
    ({"rotation.interval": "soon"}, "option rotation.interval='soon'"),
    ({"rotation.inactivity": "5 fortnights"}, "option rotation.inactivity='5 fortnights'"),
    ({"maxOpenFiles": "0"}, "option maxOpenFiles='0'"),
    ({"parquet.rowGroupBytes": "0"}, "option parquet.rowGroupBytes='0'"),
    ({"log.compactInterval": "0"}, "option log.compactInterval='0'"),
    ({"file.prefix": ".hidden"}, "option file.prefix='.hidden'"),
    ({"partitionBy": "a,a"}, "option partitionBy='a,a'"),
    ({"rotation.maxbatchez": "1"}, "unknown option rotation.maxbatchez='1'"),
    ({"commit.fsync": "maybe"}, "option commit.fsync='maybe'"),
    ({"format": "avro", "compression": "gzip"},
     "option compression='gzip' for format avro: expected one of snappy, deflate, zstd, none"),
    ({"compression": "zstd", "compression.level": "40"},
     "option compression.level=40 for compression=zstd: expected 1..22"),
    ({"compression.level": "3"}, "option compression.level=3: compression is none"),
    ({"encryption.key": "c2VjcmV0LWtleQ=="}, "option encryption.key='c2VjcmV0LWtleQ==': expected "
                                             "a key reference env:... or file:..."),
    ({"encryption.key": "env:ROTSINK_UNSET_VAR"}, "environment variable 'ROTSINK_UNSET_VAR' is "
                                                  "not set"),
    ({"encryption.keyId": "k1"}, "option encryption.keyId='k1' needs encryption.key"),
    ({"table.format": "hudi"}, "option table.format='hudi': expected one of delta, iceberg"),
    ({"table.format": "delta"}, "option table.format='delta' with option format='jsonl'"),
    ({"table.format": "delta", "format": "parquet", "log.retention": "7d"},
     "with option log.retention: retention drops files from rotsink's log but not from the "
     "table"),
    ({"table.format": "delta", "format": "parquet", "partition.commitDelay": "1m"},
     "with option partition.commitDelay: the _SUCCESS markers"),
    ({"table.format": "delta", "format": "parquet", "encryption.key": "env:HOME"},
     "with option encryption.key: delta readers cannot decrypt"),
    ({"table.fromat": "delta"}, "unknown option table.fromat='delta'; did you mean table.format"),
    ({"table.identifer": "a.b"}, "unknown option table.identifer='a.b'; did you mean "
                                 "table.identifier"),
    ({"table.format": "delta", "format": "parquet", "table.snapshotRetention": "2d"},
     r"option table.snapshotRetention='2d' is not taken by table.format=delta \(it takes "
     r"table.identifier, table.storage.\*, table.catalog.\*\)"),
    ({"format": "parquet", "table.identifier": "lake.events"},
     "option table.identifier='lake.events' is for a table: set table.format"),
], ids=["no-path", "format", "row-lz4", "parquet-codec", "size", "negative", "duration",
        "unit", "open-files", "row-group-bytes", "interval", "hidden-prefix",
        "duplicate-partition", "typo", "fsync-not-a-boolean", "avro-codec",
        "level-range", "level-without-codec", "raw-key-bytes", "unset-key-env", "id-without-key",
        "table-unknown", "table-row-format", "table-retention", "table-markers",
        "table-encrypted", "table-typo", "table-typo-of-a-format-s-option",
        "table-option-of-another-format",
        "table-option-without-a-table"])
def test_bad_options_name_option_and_value(options, message, monkeypatch):
    monkeypatch.setenv("HOME", "0" * 64)  # a key by reference (the table-encrypted case)
    base = {} if options == {} else {"path": "/out"}
    with pytest.raises(RotsinkError, match=message) as caught:
        parse_sink_options({**base, **options})
    assert isinstance(caught.value, ValueError)  # OptionError and EncryptionKeyError both are


@pytest.mark.parametrize("path, table_format, message", [
    ("wasbs://lake@acct.blob.core.windows.net/out", "iceberg",
     r"option path='wasbs://lake@acct.blob.core.windows.net/out' with table.format=iceberg: "
     r"pyiceberg opens no wasbs:// URL \(it opens abfs, abfss, .*\); write the output to one "
     r"of those \(the same container: abfss://container@account.dfs.core.windows.net/...\)"),
    ("wasb://lake@acct.blob.core.windows.net/out", "iceberg", "pyiceberg opens no wasb://"),
    ("gs://bucket/out", "delta", r"option path='gs://bucket/out': option table.format=delta at "
                                 r"gs://bucket/out: rotsink writes no Delta table on gs://"),
], ids=["iceberg-wasbs", "iceberg-wasb", "delta-gs"])
def test_a_table_whose_library_cannot_open_the_output_is_refused_at_start(path, table_format,
                                                                          message):
    """Found after the first log commit, the table step failed on every batch (issue 67:
    pyiceberg on wasb://); refused with the options, before anything is written."""
    with pytest.raises(OptionError, match=message):
        parse_sink_options({"path": path, "format": "parquet", "table.format": table_format,
                            "table.catalog.type": "sql", "table.catalog.uri": "sqlite://"}
                           if table_format == "iceberg" else
                           {"path": path, "format": "parquet", "table.format": table_format})
    assert parse_sink_options({"path": "wasbs://lake@acct.blob.core.windows.net/out",
                               "format": "parquet", "table.format": "delta"}).table_format


@pytest.mark.parametrize("path, message", [
    ("abfss://lake@/out", r"names no storage account after 'lake@' \(expected "
                          r"abfs\[s\]://CONTAINER@ACCOUNT\.dfs\.core\.windows\.net/PATH\)"),
    ("wasb://acct.blob.core.windows.net/out", r"names no container and account: hadoop-azure, "
                                              r"and so Spark's readers, need both"),
    ("abfss://lake/out", "names no container and account"),
    ("wasbs://@acct.blob.core.windows.net/out", "names no container"),
    ("abfss://Lake_1@acct.dfs.core.windows.net/out", "names the container 'Lake_1', which is no "
                                                     "valid container name"),
    ("abfss://lake@my-acct.dfs.core.windows.net/out", "names the storage account 'my-acct', which "
                                                      "is no valid account name"),
    ("az:///out", r"names no container \(expected az://CONTAINER/PATH"),
    ("s3:///out", r"names no bucket \(expected s3://BUCKET/PATH\)"),
    ("gs:///out", "names no bucket"),
], ids=["abfss-no-account", "wasb-no-container", "abfss-container-only", "wasbs-empty-container",
        "container-name", "account-name", "az-no-container", "s3-no-bucket", "gs-no-bucket"])
def test_a_store_url_spark_cannot_open_is_refused_naming_it(path, message):
    """adlfs took ``abfss://lake@/out`` (no account) and wrote 222 blobs under a root no
    Spark reader opens; a ``wasb://`` URL without its container failed at the first write
    with Azure's raw "invalid characters". Refused with the options, as opening the store
    (a reader, ``verify``) refuses them too."""
    from commit_protocol.storage import open_storage

    with pytest.raises(OptionError, match=f"path: '{re.escape(path)}' " + message):
        parse_sink_options({"path": path, "format": "jsonl"})
    with pytest.raises(OptionError, match=message):
        open_storage(path)


def test_an_azure_url_whose_account_no_option_names_is_refused_saying_how_to_name_it():
    """``fs.account_key`` with ``fs.account_host`` but no account: adlfs's raw
    ``ValueError: unable to connect to account for Must provide either ...``."""
    from commit_protocol.storage import open_storage

    with pytest.raises(OptionError, match=r"path: 'az://lake/out': no Azure storage account is "
                                          r"named \(options given: fs.account_host, "
                                          r"fs.account_key\); .* by fs.account_name"):
        open_storage("az://lake/out", {"account_key": "a2V5", "account_host": "127.0.0.1"})


@pytest.mark.parametrize("path", [
    "abfss://lake@acct.dfs.core.windows.net/out", "abfs://lake@ACCT.DFS.core.windows.net/out",
    "wasbs://$root@acct.blob.core.windows.net/out", "az://lake/out", "s3a://b/out",
    "gs://b/out", "memory://b/out", "/local/out"])
def test_the_store_urls_spark_opens_are_taken(path):
    assert parse_sink_options({"path": path, "format": "jsonl"}).path == path


def test_encrypted_compressed_row_files_are_named_for_what_they_hold(monkeypatch):
    monkeypatch.setenv("OPT_KEY", "ab" * 32)
    config = parse_sink_options({"path": "/o", "format": "csv", "compression": "gzip",
                                 "encryption.key": "env:OPT_KEY"})
    assert config.file_suffix == ".csv.gz.enc" and config.encrypted
    assert config.keys is not None and config.keys.write_id is not None
    assert config.keys.write_id.startswith("k") and "ab" * 32 not in repr(config)


@pytest.mark.parametrize("options, reading, message", [
    ({"rotation.maxbyte": "1"}, False,
     r"unknown option rotation.maxbyte='1'; did you mean rotation.maxBytes\?"),
    ({"Rotation.MaxBatchez": "1"}, False, r"did you mean rotation.maxBatches\?"),
    ({"includeInProgress": "false"}, False, "is a reader option"),
    ({"numpartitions": "4"}, True, None),
    ({"encryption.keyId": "k1"}, True, "is a sink option"),
    ({"colour": "red"}, True, "unknown option colour='red'. See docs/options.md"),
    ({"fs.endpoint_url": "http://127.0.0.1:1"}, True, None),
    # the same word under another prefix: the last segment, any case
    ({"rotation.maxOpenFiles": "10"}, False,
     r"unknown option rotation.maxOpenFiles='10'; did you mean maxOpenFiles\?"),
    ({"MAXBYTES": "1m"}, False, r"did you mean rotation.maxBytes\?"),
], ids=["sink-typo", "sink-typo-any-case", "reader-option-on-sink", "reader-option",
        "sink-option-on-reader", "unknown", "filesystem-option", "other-prefix",
        "missing-prefix"])
def test_unknown_options_are_refused_with_a_suggestion(options, reading, message):
    from datasource.options.names import reject_unknown

    if message is None:
        reject_unknown(options, reading=reading)
        return
    with pytest.raises(RotsinkError, match=message):
        reject_unknown(options, reading=reading)


@pytest.mark.parametrize("missing, options, expected", [
    ("deltalake", {}, r"needs the deltalake package in the driver's Python: pip install "
                      r"'rotsink\[delta\]'"),
    ("boto3", {"table.catalog.type": "glue", "table.identifier": "db.events"},
     r"table.catalog.type='glue' needs boto3 on the driver: pip install 'rotsink\[glue\]'"),
], ids=["delta-rs", "boto3-for-a-name-in-glue"])
def test_a_table_whose_library_is_missing_says_how_to_install_it(monkeypatch, missing,
                                                                   options, expected):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == missing else real(name, *a))
    with pytest.raises(RotsinkError, match=expected):
        parse_sink_options({"path": "s3://b/out", "format": "parquet", "table.format": "delta",
                            **options})


def test_what_sparks_writer_api_puts_among_the_options_is_accepted():
    """``DataStreamWriter`` passes ``path`` (start(path)), ``queryName`` (.queryName) and
    ``checkpointLocation`` as options, lower-cased as Spark passes every key."""
    config = parse_sink_options({"path": "/o", "queryname": "events",
                                 "checkpointlocation": "/ck"})
    assert config.query_name == "events"
    assert parse_sink_options({"path": "/o"}).query_name == ""


@pytest.mark.parametrize("options, columns", [
    ({"partitionBy": "day,hour"}, ("day", "hour")),
    ({"__partition_columns": '["day", "hour"]'}, ("day", "hour")),
    ({"partitionBy": "day, hour", "__partition_columns": '["day","hour"]'}, ("day", "hour")),
    ({}, ()),
], ids=["option", "writer call", "both, the same columns", "neither"])
def test_partition_columns_from_the_option_or_the_writers_partition_by(options, columns):
    assert parse_sink_options({"path": "/o", **options}).partition_by == columns


@pytest.mark.parametrize("options, message", [
    ({"partitionBy": "hour", "__partition_columns": '["day"]'},
     r"option partitionBy='hour' and \.partitionBy\('day'\) name different columns"),
    ({"partitionBy": "hour,day", "__partition_columns": '["day","hour"]'},
     r"option partitionBy='hour,day' and \.partitionBy\('day', 'hour'\)"),  # order matters
    ({"__partition_columns": '["day","day"]'}, r'\.partitionBy\("day","day"\): a column is '
                                               r'listed twice'),
    ({"__partition_columns": "day"}, r"option __partition_columns='day': expected a JSON list"),
    ({"queryNme": "events"}, r"unknown option querynme='events'; did you mean queryName\?"),
], ids=["different columns", "another order", "twice", "not JSON", "misspelt queryName"])
def test_writer_api_options_that_cannot_be_taken(options, message):
    with pytest.raises(RotsinkError, match=message):
        parse_sink_options({"path": "/o", **options})


def test_table_options_are_taken_in_any_case_as_spark_passes_them():
    """Spark lower-cases option names: ``table.snapshotRetention`` arrives as
    ``table.snapshotretention`` and is taken as the format names it."""
    config = parse_sink_options({"path": "/o", "format": "parquet", "table.format": "iceberg",
                                 "table.snapshotretention": "2 days"})
    assert config.table_options == {"snapshotRetention": "2 days"}
    with pytest.raises(RotsinkError, match=r"option table.snapshotRetention='soon': expected"):
        parse_sink_options({"path": "/o", "format": "parquet", "table.format": "iceberg",
                            "table.snapshotretention": "soon"})
