"""The ``rotsink`` command (``cli``): ``demo``, ``inspect``, ``verify`` and ``cat``, and the
local Spark sessions the demo, the tests and the benchmarks start (``session``)."""
