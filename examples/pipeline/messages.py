"""The messages and interfaces the three pipeline services exchange.

Market data flows gateway -> strategy over the ``md`` queue (``MarketData``
calls); orders flow strategy -> router over the ``orders`` queue (``OrderFlow``
calls).  Each call is one excerpt; the payloads are msgspec Structs.
"""

from __future__ import annotations

import os
import sys
from typing import Protocol

import msgspec

import aiochronicle as ac

SYMBOLS = ("EURUSD", "GBPUSD", "USDJPY", "AUDUSD")


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


class MarketData(Protocol):
    """What the gateway publishes."""

    def on_tick(self, tick: Tick) -> None: ...

    def end_of_day(self, ticks: int) -> None: ...


class OrderFlow(Protocol):
    """What the strategy sends the router."""

    def on_order(self, order: Order) -> None: ...

    def end_of_day(self, orders: int) -> None: ...


def run_async(main: object) -> None:
    """Run a coroutine on uvloop when it is installed, else on asyncio."""
    import asyncio

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)  # type: ignore[arg-type]


def pauser_from_env() -> ac.Pauser:
    """The pauser the readers wait with: ``$PIPELINE_PAUSER`` (a ``Pauser``
    factory name: notify, balanced, yielding, busy, ...), default ``notify``."""
    name = os.environ.get("PIPELINE_PAUSER", "notify")
    factory = getattr(ac.Pauser, name, None)
    if factory is None:
        raise SystemExit(f"no pauser {name!r}")
    pauser: ac.Pauser = factory()
    return pauser


def say(text: str) -> None:
    """Print ``text`` in one ``write`` (the services share the launcher's
    stdout; one write of less than PIPE_BUF bytes is never interleaved)."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (text + "\n").encode())


def mark_ready(directory: str, name: str) -> None:
    """Tell the launcher this service is reading (a file ``<name>.ready``)."""
    with open(os.path.join(directory, f"{name}.ready"), "w"):
        pass
