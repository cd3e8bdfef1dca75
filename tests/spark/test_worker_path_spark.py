"""Spark's own Python workers run the installed, compiled PySpark
(datasource/spark/worker_path.py)."""

from __future__ import annotations

from pathlib import Path

import pyspark


def test_spark_python_workers_import_the_installed_pyspark(spark):
    # Spark puts the uncompiled pyspark.zip first on its workers' PYTHONPATH; rotsink's hook
    # moves it behind the installed package, whose bytecode is cached.
    files = (spark.sparkContext.parallelize(range(2), 2)
             .map(lambda _: __import__("pyspark").__file__).distinct().collect())
    assert [Path(f) for f in files] == [Path(pyspark.__file__)]
