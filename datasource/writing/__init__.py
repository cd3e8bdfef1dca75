"""The Spark face of the writer: ``writeStream.format("rotsink")`` planned on the driver,
written on executors, committed on the driver (``writer``); ``writeStream.partitionBy`` and
the Arrow setting a query starts with (``writer_calls``, ``arrow_transfer``, ``heap_check``); the
schema a format can hold (``schema_check``); and the helpers ``pyspark_rotsink`` gives:
``backfill`` and ``with_heartbeat``."""
