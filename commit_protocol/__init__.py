"""rotsink's commit protocol, without Spark: what tasks write, what the driver commits, the
metadata log, reading committed output, verification and clean-up.

Folders by the step they serve: ``task`` (what a task writes), ``commit`` (what the driver
commits), ``checks`` (``rotsink verify`` and ``--repair``), ``records`` (what the steps hand
each other) and ``vocabulary`` (what every step shares); beside them the domains the steps use:
``log``, ``tables``, ``reading``, ``metrics``, ``formats``, ``crypto`` and ``storage``.
docs/how-it-works.md, "The code, by the step it serves", maps them and which may import which.
"""
