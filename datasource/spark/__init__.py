"""What rotsink needs of the Spark it runs in: what each PySpark release brings (``compat``),
its Python workers' import path (``worker_path``), where log lines go (``logs``), rotsink's
metrics in Spark's metrics system (``spark_metrics``) and the jar of the JVM KMS client
(``kms_jar``, from ``jvm/``)."""
