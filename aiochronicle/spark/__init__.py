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

Nothing here is imported by ``import aiochronicle``; PySpark and PyArrow are
imported when this package's members are first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._feeder import Feeder, FeederStatistics
    from ._sink import ChronicleStreamWriter, ChronicleWriter, CommitMessage, committed_batch
    from ._source import ChronicleDataSource, ChronicleReader, ChronicleStreamReader

__all__ = [
    "ChronicleDataSource",
    "ChronicleReader",
    "ChronicleStreamReader",
    "ChronicleStreamWriter",
    "ChronicleWriter",
    "CommitMessage",
    "Feeder",
    "FeederStatistics",
    "committed_batch",
    "register",
]

_WHERE = {
    "ChronicleDataSource": "_source",
    "ChronicleReader": "_source",
    "ChronicleStreamReader": "_source",
    "ChronicleStreamWriter": "_sink",
    "ChronicleWriter": "_sink",
    "CommitMessage": "_sink",
    "committed_batch": "_sink",
    "Feeder": "_feeder",
    "FeederStatistics": "_feeder",
}


def register(spark: SparkSession) -> None:
    """Register ``format("chronicle")`` with ``spark`` (idempotent)."""
    from ._source import ChronicleDataSource

    spark.dataSource.register(ChronicleDataSource)


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'aiochronicle.spark' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
