"""Message types the Spark tests decode (imported by name in Spark's workers:
``option("struct", "spark_messages:Tick")``)."""

from __future__ import annotations

from typing import Protocol

import msgspec


class Tick(msgspec.Struct):
    symbol: str
    bid: float
    ask: float
    seq: int


class Order(msgspec.Struct):
    symbol: str
    side: str
    qty: int
    tags: list[str] = []


class MarketData(Protocol):
    def on_tick(self, tick: Tick) -> None: ...

    def on_order(self, order: Order) -> None: ...

    def end_of_day(self, ticks: int, note: str) -> None: ...


class Counter(msgspec.Struct):
    n: int
