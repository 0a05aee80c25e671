"""The messages and interfaces the three pipeline services exchange.

The feed asks the gateway for bursts of market data over the ``feed`` queue
(``Feed`` calls); market data flows gateway -> strategy over the ``md`` queue
(``MarketData`` calls); orders flow strategy -> router over the ``orders``
queue (``OrderFlow`` calls); the router writes each order with its venue to
the ``routed`` queue (``Routing`` calls).  Each call is one excerpt; the
payloads are msgspec Structs.
"""

from __future__ import annotations

import os
import sys
from typing import Protocol

import msgspec

SYMBOLS = ("EURUSD", "GBPUSD", "USDJPY", "AUDUSD")
VENUES = ("LMAX", "EBS", "HOTSPOT")


class Tick(msgspec.Struct):
    """A top-of-book update."""

    symbol: str
    bid: float
    ask: float
    seq: int


class Order(msgspec.Struct):
    """A child order for the router."""

    symbol: str
    side: str  # "BUY" or "SELL"
    qty: int
    limit: float
    tick_seq: int


class Routed(msgspec.Struct):
    """An order and the venue the router sent it to."""

    venue: str
    order: Order


class Feed(Protocol):
    """What drives the gateway: publish ``count`` ticks from ``first_seq`` on."""

    def on_burst(self, first_seq: int, count: int) -> None: ...

    def end_of_day(self, ticks: int) -> None: ...


class MarketData(Protocol):
    """What the gateway publishes."""

    def on_tick(self, tick: Tick) -> None: ...

    def end_of_day(self, ticks: int) -> None: ...


class OrderFlow(Protocol):
    """What the strategy sends the router."""

    def on_order(self, order: Order) -> None: ...

    def end_of_day(self, orders: int) -> None: ...


class Routing(Protocol):
    """What the router records: each order with its venue."""

    def on_routed(self, routed: Routed) -> None: ...

    def end_of_day(self, orders: int) -> None: ...


def say(text: str) -> None:
    """Print ``text`` in one ``write`` (one write of less than PIPE_BUF bytes
    is never interleaved with another process's)."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (text + "\n").encode())
