"""Log entry URIs: quoted as Java's ``URI`` quotes a path (what Spark's sink writes), and
read back whichever way a rotsink version wrote them."""

from __future__ import annotations

import pytest

from commit_protocol.vocabulary.uris import EntryPaths, uri_path

# (path, what Hadoop's Path(...).toUri().toString() printed for it, why)
JAVA_QUOTED = [
    ("/a b %20 #1 é中 +", "/a%20b%20%2520%20%231%20é中%20+", "space, %, #; + and letters kept"),
    ("/{}[]^`|<>\"", "/%7B%7D%5B%5D%5E%60%7C%3C%3E%22", "ASCII outside RFC 2396"),
    ("/'~!$&()*,;=:@", "/'~!$&()*,;=:@", "marks and sub-delimiters kept"),
    ("/\u00a0\u3000\u0085", "/%C2%A0%E3%80%80%C2%85", "non-ASCII spaces and controls"),
    ("/k=a%2Fb", "/k=a%252Fb", "an escaped partition value's %"),
]


@pytest.mark.parametrize("path, quoted, why", JAVA_QUOTED, ids=[c[2] for c in JAVA_QUOTED])
def test_paths_are_quoted_as_java_quotes_them(path, quoted, why):
    assert uri_path(path) == quoted


@pytest.mark.parametrize("entry", [
    "file:///data/a%20b%20%2520/k=x%2520y/part-0",  # this version's
    "file:///data/a b %20/k=x%2520y/part-0",  # an earlier version's: the root unquoted
])
def test_entries_are_read_however_a_version_wrote_them(entry):
    assert EntryPaths("file:///data/a b %20").relative(entry) == "k=x%20y/part-0"


def test_an_entry_outside_the_output_is_refused_naming_both():
    with pytest.raises(ValueError, match="not under the output path 'file:///out'"):
        EntryPaths("file:///out").relative("file:///elsewhere/part-0")


def test_compaction_rewrites_an_earlier_version_s_lines_only():
    paths = EntryPaths("s3://b/a b é")
    legacy = b'{"path":"s3://b/a b \\u00e9/part-0","size":1}\n'
    current = b'{"path":"s3a://b/a%20b%20\\u00e9/part-1","size":2}\n'  # as written now
    foreign = b'{"path":"file:///a b \\u00e9/part-2","size":3}\n'
    assert paths.canonical_lines(legacy + current + foreign) == (
        b'{"path":"s3a://b/a%20b%20\\u00e9/part-0","size":1}\n' + current + foreign)
