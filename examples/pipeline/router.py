"""Order router: an async method reader on ``orders``.  Each order's message
history holds the time the gateway wrote the tick, the strategy read it and
wrote the order, and this router read it, so the router prints the latency of
every hop of the chain.

Usage: python router.py ORDERS_QUEUE READY_DIR
"""

from __future__ import annotations

import sys

from messages import Order, mark_ready, pauser_from_env, run_async, say

import aiochronicle as ac

HOPS = ("gateway -> strategy (md queue)", "strategy handler", "strategy -> router (orders queue)",
        "end to end")


class Router:
    """Handles OrderFlow calls (structurally: ``on_order`` is async here)."""

    def __init__(self) -> None:
        self.hops: list[list[int]] = [[] for _ in HOPS]
        self.sources: set[tuple[int, ...]] = set()
        self.reader: ac.MethodReader | None = None
        self.notional = 0.0

    async def on_order(self, order: Order) -> None:
        history = ac.current_history()
        assert history is not None
        t = history.timings  # gateway write, strategy read, strategy write, router read
        for i, ns in enumerate([*history.latencies_ns(), t[-1] - t[0]]):
            self.hops[i].append(ns)
        self.sources.add(tuple(s for s, _ in history.sources))
        self.notional += order.qty * order.limit

    def end_of_day(self, orders: int) -> None:
        got = len(self.hops[0])
        lines = [f"router:   routed {got:,} of {orders:,} orders, sources per order "
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
        assert self.reader is not None
        self.reader.stop()


async def main(orders_path: str, ready_dir: str) -> None:
    with ac.open_queue(orders_path) as orders:
        router = Router()
        reader = orders.tailer(pauser=pauser_from_env()).method_reader(router)
        router.reader = reader
        mark_ready(ready_dir, "router")
        await reader.run()


if __name__ == "__main__":
    run_async(main(sys.argv[1], sys.argv[2]))
