"""The URIs the metadata log names files by, exactly as Spark's own file sink writes them.

Spark's readers turn each log entry's ``path`` into a file with ``new Path(new URI(path))``,
so the entry must be a URI: a space, ``%`` or ``#`` in the output path written as it is makes
every read fail (``SparkPath.toUri``), and a literal ``%20`` in a directory name would name
another file. Spark's sink writes ``Path.toUri.toString``: Java's ``java.net.URI`` quoting of
the path, which escapes what RFC 2396 does not allow in a path (space, ``%``, ``#``, ``[``,
``{``, ...) and keeps other non-ASCII letters as they are (``tests/spark/test_paths.py``
compares the two sinks' logs on such a path).

Earlier versions of rotsink escaped the part of a path below the output's root but wrote the
root as it was (and, before that, named S3 files ``s3://``): :class:`EntryPaths` reads both,
and a compaction rewrites such entries the way Spark's readers take them.
"""

from __future__ import annotations

import json
import unicodedata
from functools import cached_property
from urllib.parse import unquote

# Hadoop, and so Spark's readers, know S3 only as s3a:// (open-source Hadoop has no s3://
# filesystem; Spark's MetadataLogFileIndex opens each log entry's URI as written). The log
# therefore names the files of an S3 output s3a:// whichever of the two schemes the output was
# given with; rotsink's readers accept both (earlier versions of rotsink wrote s3:// entries).
_S3_SCHEMES = ("s3", "s3a")

# java.net.URI's characters allowed unquoted in a path (RFC 2396 pchar, ";" and "/"):
# unreserved (alphanumerics and -_.!~*'()), then :@&=+$, and ;/
_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                       "-_.!~*'():@&=+$,;/")
# Non-ASCII characters java.net.URI quotes (Character.isSpaceChar or isISOControl)
_QUOTED_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc"})


def uri_path(path: str) -> str:
    """``path`` quoted as ``java.net.URI``'s multi-argument constructors quote a path (and so
    as Spark's file sink writes it): ASCII outside RFC 2396's path characters and non-ASCII
    spaces and controls as UTF-8 ``%XX``, every other character as it is.

    >>> uri_path("/data/out dir %20 #1 a+b é中/p=a%2Fb")
    '/data/out%20dir%20%2520%20%231%20a+b%20é中/p=a%252Fb'
    >>> uri_path("/x{}[]^`|<>\\"'~!$&()*,;=:@\\u00a0")
    "/x%7B%7D%5B%5D%5E%60%7C%3C%3E%22'~!$&()*,;=:@%C2%A0"
    """
    return "".join(
        ch if ch in _PATH_SAFE or (ch > "\x7f" and unicodedata.category(ch) not in
                                   _QUOTED_CATEGORIES)
        else "".join(f"%{byte:02X}" for byte in ch.encode("utf-8"))
        for ch in path)


def log_root(root_uri: str) -> str:
    """The output's root URI with the scheme the log names it by: ``s3a://`` for S3 (``s3://``
    or ``s3a://``), any other URI as it is (not quoted: see :func:`to_uri`).

    >>> log_root("s3://bucket/out"), log_root("S3A://bucket/out"), log_root("file:///out")
    ('s3a://bucket/out', 's3a://bucket/out', 'file:///out')
    """
    scheme, separator, rest = root_uri.partition("://")
    if separator and scheme.lower() in _S3_SCHEMES:
        return f"s3a://{rest}"
    return root_uri


def to_uri(root_uri: str, relative: str) -> str:
    """URI of ``relative`` under ``root_uri`` as Spark's log stores it: S3 as ``s3a://`` (see
    :func:`log_root`), the path quoted as :func:`uri_path` does, the ``%`` of an escaped
    partition value included.

    >>> to_uri("file:///out", "k=a%2Fb/part-0.jsonl")
    'file:///out/k=a%252Fb/part-0.jsonl'
    >>> to_uri("s3://bucket/a b", "part-0.jsonl")
    's3a://bucket/a%20b/part-0.jsonl'
    >>> to_uri("s3://bucket", "part-0.jsonl")
    's3a://bucket/part-0.jsonl'
    """
    scheme, _, rest = log_root(root_uri).rstrip("/").partition("://")
    authority, _, path = rest.partition("/")
    full = "/".join(part for part in ("", path, relative) if part)
    return f"{scheme}://{authority}{uri_path('/' + full.lstrip('/'))}"


def from_uri(root_uri: str, uri: str) -> str:
    """Relative path of a log entry's URI under ``root_uri`` (inverse of :func:`to_uri`); see
    :meth:`EntryPaths.relative`.

    >>> from_uri("s3://bucket/out", "s3a://bucket/out/part-0.jsonl")
    'part-0.jsonl'
    >>> from_uri("s3a://bucket/out", "s3://bucket/out/k=a%252Fb/part-0.jsonl")
    'k=a%2Fb/part-0.jsonl'
    >>> from_uri("file:///a b", "file:///a b/k=%C3%A9/part-0.jsonl")  # an earlier version's
    'k=é/part-0.jsonl'
    """
    return EntryPaths(root_uri).relative(uri)


class EntryPaths:
    """The URIs of one output's log entries: the one written, and those earlier versions
    wrote (root not quoted; ``s3://``), read and rewritten.

    >>> paths = EntryPaths("file:///data/a b")
    >>> paths.prefix, paths.legacy_prefix
    ('file:///data/a%20b/', 'file:///data/a b/')
    """

    def __init__(self, root_uri: str) -> None:
        self.root_uri = root_uri
        self.prefix = to_uri(root_uri, "").rstrip("/") + "/"
        self.legacy_prefix = log_root(root_uri).rstrip("/") + "/"

    def relative(self, uri: str) -> str:
        """The path under the root that ``uri`` names, percent-decoded.

        Raises
        ------
        ValueError
            If ``uri`` is not under the root, quoted or not.
        """
        entry = log_root(uri)
        for prefix in (self.prefix, self.legacy_prefix):
            if entry.startswith(prefix):
                return unquote(entry[len(prefix):])
        raise ValueError(f"log entry {uri!r} is not under the output path {self.root_uri!r} "
                         f"(expected a URI starting {self.prefix!r})")

    def canonical(self, uri: str) -> str:
        """``uri`` as this version writes it: an entry of an earlier version renamed, any
        other (a foreign file's) as it is.

        >>> EntryPaths("s3://b/a b").canonical("s3://b/a b/part-0")
        's3a://b/a%20b/part-0'
        """
        entry = log_root(uri)
        if self.prefix != self.legacy_prefix and entry.startswith(self.legacy_prefix) \
                and not entry.startswith(self.prefix):
            return self.prefix + entry[len(self.legacy_prefix):]
        return entry

    def canonical_lines(self, lines: bytes) -> bytes:
        """The sink's own entry lines (``{"path":"...`` as ``json.dumps`` writes them), with
        the paths of earlier versions renamed as :meth:`canonical` does. Exact: an own line
        starts with ``{"path":"`` and a path holds no unescaped quote, so the patterns occur
        nowhere else, and a quoted root never starts with the unquoted one (the first
        character quoted differs, or is a ``%`` followed by two hex digits that then do).

        >>> EntryPaths("s3://b/a b").canonical_lines(b'{"path":"s3://b/a b/part-0","size":1}\\n')
        b'{"path":"s3a://b/a%20b/part-0","size":1}\\n'
        """
        if _S3_ENTRY in lines:
            lines = lines.replace(_S3_ENTRY, _S3A_ENTRY)
        if self._legacy_line_prefix is not None and self._legacy_line_prefix in lines:
            lines = lines.replace(self._legacy_line_prefix, self._line_prefix)
        return lines

    @cached_property
    def _line_prefix(self) -> bytes:
        return b'{"path":' + json.dumps(self.prefix).encode()[:-1]

    @cached_property
    def _legacy_line_prefix(self) -> bytes | None:
        """The start of an earlier version's entry line, when it differs from this one's."""
        if self.prefix == self.legacy_prefix:
            return None
        legacy = b'{"path":' + json.dumps(self.legacy_prefix).encode()[:-1]
        return None if self._line_prefix.startswith(legacy) else legacy


# What earlier versions wrote for the files of an S3 output: Spark's readers open no s3:// URI
# (log_root), so a compaction renames them s3a:// as it copies them.
_S3_ENTRY, _S3A_ENTRY = b'{"path":"s3://', b'{"path":"s3a://'
