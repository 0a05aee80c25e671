"""Message types the Spark tests decode (imported by name in Spark's workers:
``option("struct", "spark_messages:Tick")``). ``Tick`` is defined once, in
``tests/shared_messages.py``, and re-exported here."""

from __future__ import annotations

from typing import Protocol

import msgspec
from shared_messages import Tick

from aiochronicle import method_id


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


class Quote(msgspec.Struct, rename="camel"):
    """Decoded in the JVM: scalars, an optional field, defaults, a renamed key."""

    venue_id: int
    price: float
    symbol: str
    live: bool = True
    note: str | None = None
    raw: bytes | None = None
    size: int = 100


class Point(msgspec.Struct, array_like=True):
    """Decoded in the JVM from msgpack arrays."""

    x: int
    y: float
    label: str = "p"


class Trading(Protocol):
    """Decoded in the JVM: Struct arguments (map and array), several scalar
    parameters with defaults, no argument, one scalar argument with a method id."""

    def on_quote(self, quote: Quote) -> None: ...

    def on_point(self, point: Point) -> None: ...

    def fill(self, symbol: str, qty: int, price: float = 0.0, note: str | None = None) -> None: ...

    def heartbeat(self) -> None: ...

    @method_id(7)
    def count(self, n: int) -> None: ...


class TradingV2(Trading, Protocol):
    """A newer writer's interface: its ``cancel`` calls are unknown to :class:`Trading`."""

    def cancel(self, order_id: int) -> None: ...
