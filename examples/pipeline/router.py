"""Order router: handles ``OrderFlow`` calls, sends each order to a venue (the
``routed`` queue) and keeps the per-hop latency each order's message history
holds: the time the gateway wrote the tick, the strategy read it and wrote the
order, and this router read it.  It prints them at the end of the day.
"""

from __future__ import annotations

from messages import VENUES, Order, Routed, Routing, say

import aiochronicle as ac

HOPS = ("gateway -> strategy (md queue)", "strategy handler", "strategy -> router (orders queue)",
        "end to end")


class Router:
    """Routes orders round robin per symbol; its state is the next venue of
    each symbol and the notional routed."""

    def __init__(self, routed: Routing) -> None:
        self.routed = routed
        self.next_venue: dict[str, int] = {}
        self.notional = 0.0
        self.count = 0
        # not state: what this process saw of the latency (printed, never written)
        self.hops: list[list[int]] = [[] for _ in HOPS]
        self.sources: set[tuple[int, ...]] = set()

    def on_order(self, order: Order) -> None:
        history = ac.current_history()
        if history is not None:
            self.sources.add(tuple(s for s, _ in history.sources))
        if history is not None and len(history.timings) >= 4:
            t = history.timings  # gateway write, strategy read, strategy write, router read
            for i, ns in enumerate([*history.latencies_ns()[-3:], t[-1] - t[-4]]):
                self.hops[i].append(ns)
        k = self.next_venue.get(order.symbol, 0)
        self.next_venue[order.symbol] = (k + 1) % len(VENUES)
        self.notional += order.qty * order.limit
        self.count += 1
        self.routed.on_routed(Routed(VENUES[k], order))

    def end_of_day(self, orders: int) -> None:
        lines = [f"router:   routed {self.count:,} of {orders:,} orders, sources per order "
                 f"{sorted(self.sources)}, notional {self.notional:,.0f}",
                 f"{'per-hop latency from message history (µs)':<44}"
                 f"{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"]
        for name, values in zip(HOPS, self.hops, strict=True):
            v = sorted(values) or [0]

            def pct(p: float, v: list[int] = v) -> float:
                return v[min(len(v) - 1, int(p * len(v)))] / 1000

            lines.append(f"  {name:<42}{pct(0.5):>10.1f}{pct(0.9):>10.1f}{pct(0.99):>10.1f}"
                         f"{v[-1] / 1000:>10.1f}")
        say("\n".join(lines))
        self.routed.end_of_day(self.count)

    def snapshot(self) -> dict[str, object]:
        return {"next_venue": self.next_venue, "notional": self.notional, "count": self.count}

    def restore(self, state: dict[str, object]) -> None:
        nv, notional, count = state["next_venue"], state["notional"], state["count"]
        assert isinstance(nv, dict) and isinstance(notional, float) and isinstance(count, int)
        self.next_venue, self.notional, self.count = dict(nv), notional, count
