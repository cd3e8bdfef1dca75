"""What a task writes, on an executor: one task's rows into part files and its report.

``task_writer`` is the entry (:class:`~commit_protocol.task.task_writer.TaskWriter`); it splits
rows by partition directory (``partitioning``), appends them to the slot's row file
(``part_files``) or stages them for a bulk format (``bulk_files``), writes while Spark still
sends rows (``pipeline``), and encodes a staged file whole when it rolls (``conversion``, which
the driver's commit also uses for the files it rolls itself).
"""
