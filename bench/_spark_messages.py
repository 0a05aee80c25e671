"""The message bench/spark.py decodes into columns (Spark's Python workers import it
by name: ``option("struct", "_spark_messages:Quote")``)."""

from __future__ import annotations

import msgspec


class Quote(msgspec.Struct):
    symbol: str
    bid: float
    ask: float
    qty: int
    seq: int
