"""Spark for aiochronicle: the ``chronicle`` data source and an async driver feeder.

Install with the Spark extra (``pip install aiochronicle[spark]``)::

    from aiochronicle.spark import register
    register(spark)                       # or automatic, see below
    df = spark.read.format("chronicle").load("/data/md")
    spark.readStream.format("chronicle").load("/data/md")
    df.write.format("chronicle").mode("append").save("/data/out")

Installed as a package (not editable), the top-level module
``pyspark_aiochronicle`` makes PySpark register the source by itself: PySpark 4
looks up modules named ``pyspark_*`` that define ``DefaultSource``.

:class:`Feeder` tails a queue in an asyncio task on the driver and hands
micro-batches to a callback as Arrow tables or DataFrames.

Reads run in the JVM when Spark can load ``aiochronicle-spark.jar`` (shipped in
the wheel, see :func:`jar_path`): the raw columns are read there, from cycle files
reached through Hadoop's FileSystem API, and so are msgpack structs and method
calls of scalar fields; other decoded columns, other schemas and writing are
served by the Python data source, chosen automatically.

Nothing here is imported by ``import aiochronicle``; PySpark and PyArrow are
imported when this package's members are first used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._feeder import Feeder, FeederStatistics
    from ._sink import ChronicleStreamWriter, ChronicleWriter, CommitMessage, committed_batch
    from ._source import (
        ChronicleDataSource,
        ChronicleReader,
        ChronicleStreamReader,
        PythonChronicleDataSource,
    )

__all__ = [
    "ChronicleDataSource",
    "ChronicleReader",
    "ChronicleStreamReader",
    "ChronicleStreamWriter",
    "ChronicleWriter",
    "CommitMessage",
    "Feeder",
    "FeederStatistics",
    "PythonChronicleDataSource",
    "committed_batch",
    "jar_path",
    "jvm_reader_loaded",
    "register",
]

JVM_SOURCE = "io.aiochronicle.spark.ChronicleSource"
"""The JVM data source's class (``format("chronicle")`` when its jar is loaded)."""

_WHERE = {
    "ChronicleDataSource": "_source",
    "ChronicleReader": "_source",
    "ChronicleStreamReader": "_source",
    "PythonChronicleDataSource": "_source",
    "ChronicleStreamWriter": "_sink",
    "ChronicleWriter": "_sink",
    "CommitMessage": "_sink",
    "committed_batch": "_sink",
    "Feeder": "_feeder",
    "FeederStatistics": "_feeder",
}


def jar_path() -> Path | None:
    """The JVM reader's jar shipped in this package, or None if it was not built
    (no ``javac`` where the wheel was built).  Give it to Spark before the session
    starts: ``.config("spark.jars", str(jar_path()))`` or ``spark-submit --jars``."""
    jar = Path(__file__).resolve().parent / "aiochronicle-spark.jar"
    return jar if jar.is_file() else None


def jvm_reader_loaded(spark: SparkSession) -> bool:
    """Whether ``spark``'s JVM can load the JVM reader (then it serves ``format("chronicle")``)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(JVM_SOURCE))


def register(spark: SparkSession) -> None:
    """Register ``format("chronicle")`` with ``spark`` (idempotent).

    When the session's JVM holds the JVM reader (its jar in ``spark.jars``; else
    it is added now with ``ADD JAR`` if this package carries it), that reader is
    ``chronicle`` and the Python data source is registered as ``chronicle_python``
    for what the JVM hands to it; otherwise the Python data source is ``chronicle``.
    """
    from ._source import ChronicleDataSource, PythonChronicleDataSource

    jar = jar_path()
    if not jvm_reader_loaded(spark) and jar is not None:
        spark.sql(f"ADD JAR '{jar}'")
    if jvm_reader_loaded(spark):
        spark.dataSource.register(PythonChronicleDataSource)
    else:
        spark.dataSource.register(ChronicleDataSource)


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'aiochronicle.spark' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
