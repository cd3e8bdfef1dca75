"""What checks and repairs an output from outside the query: ``rotsink verify``
(``verification``, its per-file checks in ``file_checks``), ``--repair`` (``repair``) and telling
a live driver's commit in flight from a dead one's (``in_flight``).

Checks import the steps they check (the commit's recovery, its clean-up); no step imports a
check.
"""
