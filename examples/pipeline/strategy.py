"""Strategy: handles the gateway's ``MarketData`` calls and sends orders to
the router through an ``OrderFlow`` method writer.  Writing from inside the
handler carries each tick's message history forward to the router.  The
momentum rule keeps state (the run of each symbol): snapshots keep it across
restarts.
"""

from __future__ import annotations

from messages import MarketData, Order, OrderFlow, Tick, say


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

    def on_tick(self, tick: Tick) -> None:
        side = self.rule.side(tick)
        if side is not None:
            limit = tick.ask if side == "BUY" else tick.bid
            self.orders.on_order(Order(tick.symbol, side, 1_000_000, limit, tick.seq))
            self.sent += 1

    def end_of_day(self, ticks: int) -> None:
        say(f"strategy: read {ticks:,} ticks, sent {self.sent:,} orders")
        self.orders.end_of_day(self.sent)

    def snapshot(self) -> dict[str, object]:
        return {"last": self.rule.last, "run": self.rule.run, "sent": self.sent}

    def restore(self, state: dict[str, object]) -> None:
        last, run, sent = state["last"], state["run"], state["sent"]
        assert isinstance(last, dict) and isinstance(run, dict) and isinstance(sent, int)
        self.rule.last, self.rule.run, self.sent = dict(last), dict(run), sent
