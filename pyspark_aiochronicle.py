"""PySpark's automatic registration hook for aiochronicle's ``chronicle`` data source.

PySpark 4 imports every top-level module whose name starts with ``pyspark_``
the first time a session looks up a Python data source, and registers the
``DefaultSource`` it defines under ``DefaultSource.name()``.  Installing
aiochronicle with the Spark extra so makes ``format("chronicle")`` available
in every session without calling ``aiochronicle.spark.register(spark)``.

Without PyArrow (aiochronicle installed without the extra) this module defines
nothing, so PySpark's lookup of other sources is not disturbed.
"""

try:
    from aiochronicle.spark._source import ChronicleDataSource as DefaultSource
except ImportError:  # pragma: no cover - the Spark extra is not installed
    pass
else:
    __all__ = ["DefaultSource"]
