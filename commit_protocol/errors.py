"""rotsink's exceptions: flat, specific, each message naming the path, key or value at fault.

Storage problems use the built-in ``FileExistsError`` / ``FileNotFoundError``; these are for
protocol failures.
"""

from __future__ import annotations


class RotsinkError(Exception):
    """Base class of every error rotsink raises on purpose."""


class OptionError(RotsinkError, ValueError):
    """An option has a bad value; the message names the option and the value."""


class UnsupportedQueryError(RotsinkError):
    """The query asks for something a file sink cannot honour (continuous trigger, complete mode)."""


class CorruptLogError(RotsinkError):
    """A metadata log file cannot be parsed; the message names the file and the line."""


class CommitError(RotsinkError):
    """A commit message does not match storage ("expected X, found Y")."""


class TruncatedFileError(CommitError):
    """A part file is shorter than its committed length: committed bytes were lost."""


class ConcurrentWriterError(RotsinkError):
    """Another query owns the output path."""


class SchemaMismatchError(RotsinkError):
    """The stream's schema differs from the schema committed at the output path."""


class EncryptionKeyError(RotsinkError, ValueError):
    """A key reference does not resolve, or no configured key fits a file (names the key id,
    never key bytes)."""


class IntegrityError(RotsinkError):
    """A part file fails authentication or decoding: it was modified, truncated, reordered,
    spliced, or is read with the wrong key. The message names the file and the byte offset."""

