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
the sdist and the wheel, see :func:`jar_path`): the raw columns are read there, from
cycle files reached through Hadoop's FileSystem API, and so are msgpack structs and
method calls of scalar fields; other decoded columns, other schemas and writing are
served by the Python data source, chosen automatically.  When the JVM reader cannot
be used, :func:`register` warns once with the reason (:class:`JvmReaderWarning`) and
``option("engine", "jvm")`` fails with it.

Nothing here is imported by ``import aiochronicle``; PySpark and PyArrow are
imported when this package's members are first used.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ._jar import JVM_SOURCE, NO_JAR, jar_path

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
    "JvmReaderWarning",
    "PythonChronicleDataSource",
    "committed_batch",
    "jar_path",
    "jvm_reader_loaded",
    "register",
]

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


class JvmReaderWarning(UserWarning):
    """:func:`register` could not give the session the JVM reader (the message says
    why): ``format("chronicle")`` reads with the Python data source."""


_warned: list[str] = []  # the reason register() warned with, once per process


def jvm_reader_loaded(spark: SparkSession) -> bool:
    """Whether ``spark``'s JVM can load the JVM reader (then it serves ``format("chronicle")``)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(JVM_SOURCE))


def _load_jvm_reader(spark: SparkSession) -> str | None:
    """Load the JVM reader into ``spark`` unless it is there; None, or why it cannot."""
    try:
        if jvm_reader_loaded(spark):
            return None
    except Exception as e:  # a Spark Connect session has no JVM in this process
        return (f"this session's JVM cannot be reached from Python ({type(e).__name__}); "
                "start its Spark with spark.jars set to aiochronicle.spark.jar_path()")
    jar = jar_path()
    if jar is None:
        return NO_JAR
    try:
        spark.sql(f"ADD JAR '{jar}'")
    except Exception as e:
        return f"Spark refused ADD JAR '{jar}': {e}"
    if not jvm_reader_loaded(spark):
        return f"Spark added {jar} but cannot load {JVM_SOURCE} from it"
    return None


def register(spark: SparkSession) -> None:
    """Register ``format("chronicle")`` with ``spark`` (idempotent).

    When the session's JVM holds the JVM reader (its jar in ``spark.jars``; else
    it is added now with ``ADD JAR``), that reader is ``chronicle`` and the Python
    data source is registered as ``chronicle_python`` for what the JVM hands to
    it.  Otherwise the Python data source is ``chronicle``, and the first such
    call in a process warns with the reason (:class:`JvmReaderWarning`).
    """
    from ._source import ChronicleDataSource, PythonChronicleDataSource

    problem = _load_jvm_reader(spark)
    if problem is None:
        spark.dataSource.register(PythonChronicleDataSource)
        return
    spark.dataSource.register(ChronicleDataSource)
    if not _warned:
        _warned.append(problem)
        warnings.warn(f"aiochronicle.spark: the JVM reader cannot be used: {problem}. "
                      "format('chronicle') reads with the Python data source, and "
                      "option('engine', 'jvm') fails", JvmReaderWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'aiochronicle.spark' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
