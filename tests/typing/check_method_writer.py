"""Checked by mypy from tests/test_methods.py (not run): a method writer is typed
as its interface, so mistakes in calls are type errors.  Each line with a
deliberate error carries a trailing E-marker comment."""

from __future__ import annotations

from typing import Protocol, reveal_type

import msgspec

import aiochronicle as ac


class Quote(msgspec.Struct):
    symbol: str
    bid: float


class Quotes(Protocol):
    def on_quote(self, quote: Quote) -> None: ...

    @ac.method_id(3)
    def on_close(self, symbol: str, final: bool = False) -> None: ...


class QuoteBook:
    def on_quote(self, quote: Quote) -> None:
        pass


def check(queue: ac.Queue) -> None:
    quotes = queue.appender().method_writer(Quotes)
    reveal_type(quotes)
    quotes.on_quote(Quote("EURUSD", 1.1))
    quotes.on_close("EURUSD", final=True)
    quotes.on_quote("EURUSD")  # E: a str is not a Quote
    quotes.on_close()  # E: missing argument
    quotes.on_trade(1)  # E: not in the interface
    reader = queue.tailer().method_reader(QuoteBook())
    reveal_type(reader)
    more: bool = reader.read_one()
    stats: ac.MethodReaderStatistics = reader.statistics()
    del more, stats
