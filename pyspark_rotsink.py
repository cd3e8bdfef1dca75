"""Static registration hook: Spark imports every top-level ``pyspark_*`` module and registers
its ``DefaultSource``, so ``format("rotsink")`` works after ``pip install`` with no
``spark.dataSource.register`` call."""

from datasource.spark.compat import check_supported
from datasource.writing import writer_calls

check_supported()  # a PySpark without the Python streaming sink, named before anything fails
# writeStream.partitionBy(...) reaches rotsink (rotsink_workers.pth installs this at start;
# here for a process that did not run it: PYTHONPATH, a zip shipped with a job)
writer_calls.install()

from datasource.reading.fast_read import read  # noqa: E402
from datasource.source import RotSinkDataSource as DefaultSource  # noqa: E402
from datasource.writing.backfill import backfill  # noqa: E402
from datasource.writing.heartbeat import with_heartbeat  # noqa: E402

__all__ = ["DefaultSource", "backfill", "read", "with_heartbeat"]
