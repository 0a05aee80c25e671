"""A three-service pipeline on ``ac.Service`` for the exactly-once tests:
feed -> gateway -> md -> strategy -> orders -> router -> routes + audit.

* the gateway turns raw feed records into ticks (no state: ``stateless``);
* the strategy keeps a momentum rule per symbol (state: snapshots, or a
  replay from the first tick);
* the router writes two routes per order and one audit record on a second
  queue (several outputs per input, fan-out).

Run as a script it is a fork server: it imports everything once, then forks a
service process per ``start NAME`` line on stdin and prints its pid (so that
a test can SIGKILL and restart services hundreds of times in a minute).  Its
services stop when it reads the end of stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Protocol

import msgspec
from shared_messages import Tick

import aiochronicle as ac

SYMBOLS = ("EURUSD", "GBPUSD", "USDJPY")
NAMES = ("gateway", "strategy", "router")


class Raw(msgspec.Struct):
    seq: int
    sym: int
    mid: float


class Order(msgspec.Struct):
    symbol: str
    side: str
    qty: int
    limit: float
    tick_seq: int


class Route(msgspec.Struct):
    venue: str
    symbol: str
    side: str
    qty: int
    tick_seq: int


class Audit(msgspec.Struct):
    tick_seq: int
    notional: float


class Feed(Protocol):
    def on_raw(self, raw: Raw) -> None: ...


class MarketData(Protocol):
    def on_tick(self, tick: Tick) -> None: ...


class OrderFlow(Protocol):
    def on_order(self, order: Order) -> None: ...


class Routes(Protocol):
    def on_route(self, route: Route) -> None: ...


class Audits(Protocol):
    def on_audit(self, audit: Audit) -> None: ...


class Gateway:
    def __init__(self, md: MarketData) -> None:
        self.md = md

    def on_raw(self, raw: Raw) -> None:
        self.md.on_tick(Tick(SYMBOLS[raw.sym], round(raw.mid - 0.00005, 5),
                             round(raw.mid + 0.00005, 5), raw.seq))


class Momentum:
    """Buy after three upticks of a symbol, sell after three downticks."""

    def __init__(self, orders: OrderFlow) -> None:
        self.orders = orders
        self.last: dict[str, float] = {}
        self.run: dict[str, int] = {}

    def on_tick(self, tick: Tick) -> None:
        mid = (tick.bid + tick.ask) / 2
        prev = self.last.get(tick.symbol, mid)
        self.last[tick.symbol] = mid
        step = 1 if mid > prev else -1 if mid < prev else 0
        run = self.run.get(tick.symbol, 0)
        run = run + step if step and (run == 0 or (run > 0) == (step > 0)) else step
        self.run[tick.symbol] = run
        if abs(run) >= 3:
            self.run[tick.symbol] = 0
            side = "BUY" if run > 0 else "SELL"
            limit = tick.ask if side == "BUY" else tick.bid
            self.orders.on_order(Order(tick.symbol, side, 1_000_000, limit, tick.seq))

    def snapshot(self) -> object:
        return {"last": self.last, "run": self.run}

    def restore(self, state: dict[str, dict[str, float]]) -> None:
        self.last = dict(state["last"])
        self.run = {k: int(v) for k, v in state["run"].items()}


class Router:
    def __init__(self, routes: Routes, audit: Audits) -> None:
        self.routes = routes
        self.audit = audit

    def on_order(self, order: Order) -> None:
        half = order.qty // 2
        self.routes.on_route(Route("XLON", order.symbol, order.side, half, order.tick_seq))
        self.routes.on_route(Route("XPAR", order.symbol, order.side, order.qty - half,
                                   order.tick_seq))
        self.audit.on_audit(Audit(order.tick_seq, order.qty * order.limit))


def create_queues(d: Path) -> None:
    """Every queue of the pipeline, with its source id."""
    for name, sid in (("feed", 10), ("md", 1), ("orders", 2), ("routes", 3), ("audit", 4)):
        with ac.open_queue(d / name, source_id=sid):
            pass


def services(d: Path, *, snapshots: bool,
             pauser: type[ac.Pauser] | None = None) -> dict[str, ac.Service]:
    """The three services over the queues in ``d``."""
    def p() -> ac.Pauser:
        return ac.Pauser.notify()

    return {
        "gateway": ac.Service(
            "gateway", Gateway, [ac.ServiceInput(str(d / "feed"), 10, (Feed,))],
            [ac.ServiceOutput("md", str(d / "md"), MarketData, 1)], pauser=p, stateless=True),
        "strategy": ac.Service(
            "strategy", Momentum, [ac.ServiceInput(str(d / "md"), 1, (MarketData,))],
            [ac.ServiceOutput("orders", str(d / "orders"), OrderFlow, 2)], pauser=p,
            snapshots=ac.SnapshotPolicy(str(d / "strategy-snap"), every_inputs=50,
                                        every_seconds=0.05) if snapshots else None),
        "router": ac.Service(
            "router", Router, [ac.ServiceInput(str(d / "orders"), 2, (OrderFlow,))],
            [ac.ServiceOutput("routes", str(d / "routes"), Routes, 3),
             ac.ServiceOutput("audit", str(d / "audit"), Audits, 4)], pauser=p,
            stateless=True),
    }


def calls(path: Path) -> list[tuple[str, object, list[tuple[int, int]]]]:
    """Every method call on a queue: (method, argument, history sources)."""
    out: list[tuple[str, object, list[tuple[int, int]]]] = []

    class Collect:
        def on_route(self, route: Route) -> None:
            h = ac.current_history()
            out.append(("on_route", route, [] if h is None else h.sources[:-1]))

        def on_audit(self, audit: Audit) -> None:
            h = ac.current_history()
            out.append(("on_audit", audit, [] if h is None else h.sources[:-1]))

        def on_order(self, order: Order) -> None:
            h = ac.current_history()
            out.append(("on_order", order, [] if h is None else h.sources[:-1]))

    with ac.open_queue(path, read_only=True) as q:
        q.tailer().method_reader(Collect(), history=True).read_available()
    return out


def _serve(d: Path, snapshots: bool, loop_kind: str) -> None:
    """The fork server (see the module docstring)."""
    children: list[int] = []
    for line in sys.stdin:
        word = line.split()
        if not word:
            continue
        pid = os.fork()
        if pid == 0:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            svc = services(d, snapshots=snapshots)[word[1]]
            if loop_kind == "uvloop":
                import uvloop
                factory = uvloop.new_event_loop
            else:
                factory = asyncio.new_event_loop
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(svc.run())
            os._exit(0)
        children.append(pid)
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()
        # reap what was killed meanwhile
        while True:
            try:
                got, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if got == 0:
                break
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


if __name__ == "__main__":
    _serve(Path(sys.argv[1]), sys.argv[2] == "snapshots", sys.argv[3])
