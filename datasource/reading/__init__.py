"""The Spark face of the readers: ``spark.read.format("rotsink")`` (``reader``, its filter
pushdown in ``pushdown``), ``pyspark_rotsink.read`` at Spark's own speed (``fast_read``) and
the change feed, ``spark.readStream.format("rotsink")`` (``stream_reader``)."""
