"""Strategy: an async method reader on ``md`` whose handler sends orders on the
``orders`` queue through an ``OrderFlow`` method writer.  Writing from inside
the handler carries each tick's message history forward to the router.

Usage: python strategy.py MD_QUEUE ORDERS_QUEUE READY_DIR
"""

from __future__ import annotations

import sys

from messages import MarketData, Order, OrderFlow, Tick, mark_ready, pauser_from_env, run_async, say

import aiochronicle as ac


class MomentumRule:
    """Buy after three upticks of a symbol, sell after three downticks."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.run: dict[str, int] = {}

    def side(self, tick: Tick) -> str | None:
        """"BUY", "SELL" or None (no order) for this tick."""
        mid = (tick.bid + tick.ask) / 2
        prev = self.last.get(tick.symbol, mid)
        self.last[tick.symbol] = mid
        step = 1 if mid > prev else -1 if mid < prev else 0
        run = self.run.get(tick.symbol, 0)
        run = run + step if step and (run == 0 or (run > 0) == (step > 0)) else step
        self.run[tick.symbol] = run
        if abs(run) < 3:
            return None
        self.run[tick.symbol] = 0
        return "BUY" if run > 0 else "SELL"


class Momentum(MarketData):
    """Sends an order on each signal of the momentum rule."""

    def __init__(self, orders: OrderFlow) -> None:
        self.orders = orders
        self.rule = MomentumRule()
        self.sent = 0
        self.reader: ac.MethodReader | None = None

    def on_tick(self, tick: Tick) -> None:
        side = self.rule.side(tick)
        if side is not None:
            limit = tick.ask if side == "BUY" else tick.bid
            self.orders.on_order(Order(tick.symbol, side, 1_000_000, limit, tick.seq))
            self.sent += 1

    def end_of_day(self, ticks: int) -> None:
        self.orders.end_of_day(self.sent)
        say(f"strategy: read {ticks:,} ticks, sent {self.sent:,} orders")
        assert self.reader is not None
        self.reader.stop()


async def main(md_path: str, orders_path: str, ready_dir: str) -> None:
    with ac.open_queue(md_path) as md, ac.open_queue(orders_path) as out:
        strategy = Momentum(out.appender().method_writer(OrderFlow))
        reader = md.tailer(pauser=pauser_from_env()).method_reader(strategy)
        strategy.reader = reader
        mark_ready(ready_dir, "strategy")
        await reader.run()


if __name__ == "__main__":
    run_async(main(sys.argv[1], sys.argv[2], sys.argv[3]))
