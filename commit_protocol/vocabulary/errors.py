"""rotsink's exceptions: flat, specific, each message naming the path, key or value at fault.

Storage problems use the built-in ``FileExistsError`` / ``FileNotFoundError``; these are for
protocol failures.
"""

from __future__ import annotations

from typing import Any


class RotsinkError(Exception):
    """Base class of every error rotsink raises on purpose."""


class OptionError(RotsinkError, ValueError):
    """An option has a bad value; the message names the option and the value."""


class UnsupportedQueryError(RotsinkError):
    """The query asks for something a file sink cannot honour (a continuous trigger,
    complete mode)."""


class UnsupportedSparkVersionError(UnsupportedQueryError):
    """A feature needs a newer PySpark than the one running; the message names the feature,
    the version it needs and the version found."""


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


class RowRefusedError(RotsinkError, ValueError):
    """A row the output cannot take, for a reason of its own (``errors.mode=quarantine``
    keeps such rows aside instead of failing the batch: :mod:`commit_protocol.task.quarantine`).

    ``column`` names the column at fault (None: the row as a whole) and ``reason`` is a short
    stable code (``line_break``, ``not_null``...) the quarantine records and counts. A check
    that knows which rows it refuses gives them: ``rows``, a boolean Arrow array over the
    rows it checked, and ``detail``, what is wrong with each one (the message speaks of the
    batch); without them, the quarantine finds the rows by checking halves.
    """

    def __init__(self, message: str, *, column: str | None = None, reason: str = "refused",
                 rows: Any = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.column = column
        self.reason = reason
        self.rows = rows
        self.detail = detail

    def __reduce__(self) -> tuple:  # pickled between Spark's workers: the rows stay behind
        return (_rebuilt, (type(self), str(self), self.column, self.reason, self.detail))


def _rebuilt(cls: type[RowRefusedError], message: str, column: str | None, reason: str,
             detail: str | None) -> RowRefusedError:
    return cls(message, column=column, reason=reason, detail=detail)


class UnencodableValueError(RowRefusedError):
    """A value cannot be written in the chosen format (e.g. a line break in format text)."""


class KeyRingError(EncryptionKeyError):
    """The key ring is malformed: a bad key id or a key of the wrong length."""


class UnknownKeyIdError(KeyRingError):
    """A key id (the footer key to write with, or a file's master key) is not in the ring."""


class WrongKeyError(EncryptionKeyError):
    """The ring's key for a file's key id does not decrypt the file's data key."""


class UnsafeStorageError(RotsinkError):
    """The URL's filesystem offers no exclusive create rotsink can use, so a commit could
    replace another writer's file; the message names the URL."""


class SegmentError(OSError):
    """A segmented file is damaged (a gap or overlap between segments, or the remains of a
    cut-short delete that a writer tries to append to); the message names path and offsets."""


class FailpointError(RotsinkError):
    """Raised by an armed failpoint with action ``raise``."""


class JavaMissingError(RotsinkError):
    """Spark needs a Java 17+ runtime and none was found."""


class KmsJarBuildError(RotsinkError, RuntimeError):
    """The JVM KMS client could not be compiled or packaged."""


class TableError(RotsinkError):
    """The table at an output path (``table.format``) cannot follow the log: it has another
    schema, other partition columns or another writer, or its commit failed; the message
    names what differs ("expected X, found Y")."""


class StoreAccessError(RotsinkError):
    """The output's store refuses it before anything is written: its bucket or container does
    not exist, or its credentials are missing or refused; the message names the URL."""


class AfterCommitError(CommitError):
    """A step after the commit point (the table commit, the clean-up) failed after its
    retries: the batch is committed and stays so; the message names the batch, the step, the
    cause and what to do (restart the query, whose replay catches the step up)."""


class ConstraintError(RowRefusedError):
    """A row breaks a constraint of the table the output follows (a null in a NOT NULL
    column): the task fails before writing it, so nothing of the batch becomes visible."""


class QuarantineLimitError(RotsinkError):
    """More of a batch's rows were refused than ``errors.maxQuarantinedShare`` allows: the
    batch fails and nothing of it is committed (a broken upstream stops the stream)."""
