"""Static registration hook: Spark imports every top-level ``pyspark_*`` module and registers
its ``DefaultSource``, so ``format("rotsink")`` works after ``pip install`` with no
``spark.dataSource.register`` call."""

from datasource.fast_read import read
from datasource.heartbeat import with_heartbeat
from datasource.source import RotSinkDataSource as DefaultSource

__all__ = ["DefaultSource", "read", "with_heartbeat"]
