"""rotsink's commit protocol, without Spark: what tasks write, what the driver commits, the
metadata log, reading committed output, verification and clean-up.

The protocol modules are flat (``task_writer``, ``part_files`` and ``bulk_files``,
``conversion``, ``merge``, ``rotation``, ``committer``, ``log``, ``state``, ``naming``,
``reading``, ``verification`` and ``file_checks``, ``housekeeping``, ``failpoints``,
``errors``); ``storage/``, ``formats/`` and ``crypto/`` group the domains they rely on.
"""
