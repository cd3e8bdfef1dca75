"""The words every step shares and nothing below them: rotsink's exceptions (``errors``), the
names of files and directories (``naming``, ``uris``, ``partition_values``), durations,
failpoints, the query's label, the release and a long check's progress.

Nothing here imports another part of rotsink: every other folder may import it.
"""
