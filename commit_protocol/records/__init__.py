"""What the steps hand each other: the validated options (``config``: driver -> tasks), the
batch's plan (``plan``: driver -> task), a task's report (``messages``: task -> driver), the
committed state (``state``: commit -> log, with ``schema_evolution``'s record) and the
rotation rules both a task and the commit apply to an in-progress file (``rotation``).

Records are plain, frozen and picklable; they read nothing from storage. They import only the
vocabulary and the formats and keys they name.
"""
