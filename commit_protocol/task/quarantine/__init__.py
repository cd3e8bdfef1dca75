"""Rows the output cannot take, kept aside exactly once (``errors.mode=quarantine``).

A value a format cannot hold (a line break in format text, a date ORC's calendar skips) or a
row a table refuses (a null in a NOT NULL column, a generated column given another value)
fails its batch with ``errors.mode=fail``, and the replay fails the same way. With
``errors.mode=quarantine`` such rows go to the *quarantine*: a rotsink output of its own
(JSON lines at ``errors.quarantinePath``, default ``<path>/_quarantine``), one row each with
the row as it came, the column, the reason, the message, the batch id and the query id.

- **Found where they are refused** (:mod:`~commit_protocol.task.quarantine.sorting`): each chunk
  of a task's rows runs the checks it runs today, once; only a chunk that fails one is split
  in halves until each refused row stands alone. A chunk with no bad row costs what it costs
  with ``errors.mode=fail``.
- **Written by the same tasks** (:mod:`~commit_protocol.task.quarantine.writer`) into files of
  the quarantine, reported with the task's own files, every one finished at its batch.
- **Committed exactly once** (:mod:`~commit_protocol.commit.quarantine`): the commit of
  batch N commits the quarantine first (its own log, each of its batches recording the
  output's batch N), then the output's log file N, the commit point. A crash or an error
  between the two leaves the quarantine holding N's refused rows and the output not; the
  replay of N (the same input) refuses the same rows, finds N in the quarantine and commits
  only the output: every input row is in exactly one of the two outputs, once. A batch with
  no refused row adds nothing to the commit.
"""
