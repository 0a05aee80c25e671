"""Three services in a chain, gateway -> strategy -> router, each its own
process, built twice: on aiochronicle method proxies and on Unix sockets +
uvloop + msgspec, with the same Structs, pacing and strategy rule.

Run:  .venv/bin/python bench/pipeline.py [--quick] [--ticks N] [--write-docs]

The shape is ``examples/pipeline``'s: the gateway publishes ``--ticks`` ticks
(20,000) at ``--rate`` (10,000/s) in bursts of 20, each a ``Tick`` Struct; the
strategy buys after three upticks of a symbol and sells after three downticks,
sending an ``Order`` Struct to the router; the router takes it.

* aiochronicle: the gateway calls a ``MarketData`` method writer on the ``md``
  queue; the strategy is a method reader on ``md`` (``await reader.run()``)
  whose handler calls an ``OrderFlow`` method writer on the ``orders`` queue;
  the router is a method reader on ``orders``.  The readers wait with
  ``Pauser.notify()``, ``Pauser.balanced()`` or ``Pauser.busy()`` (one
  contender each).
* ``aio notify +history``: the same on queues with source ids (md 1, orders
  2), so every call carries its message history (at least once, as
  ``examples/pipeline``); ``aio notify exactly-once``: the strategy and the
  router are ``ac.Service`` on those queues (exactly once by message history,
  the strategy snapshotting every 1,000 ticks or 5 s).
* sockets: the strategy and the router are uvloop Unix stream servers
  (``asyncio.Protocol``); each call is one frame: a 4-byte length, one byte
  naming the method, and the argument in msgpack (``msgspec``).

Each order carries ``CLOCK_MONOTONIC`` stamps: the gateway's just before it
writes the tick, the strategy's when its handler is called and just before it
writes the order, and the router's when its handler is called.  So both
pipelines are measured the same way, hop by hop, and end to end.  Orders for
the first ``--warmup`` ticks are left out.  Every process runs with the cyclic
garbage collector frozen and disabled, whichever the pipeline; nothing is
pinned (three processes share the machine's CPUs).

CPU: each process's own CPU seconds (``time.process_time()``) from its first
message to its last.  Each pipeline runs ``--repeats`` times, interleaved with
the others; each keeps the run with the lowest end-to-end p50.  Every ratio is
against the sockets pipeline of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import _report  # bench/_report.py (this directory is on sys.path)
import msgspec

import aiochronicle as ac

# the Structs, interfaces and strategy rule of examples/pipeline
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples", "pipeline"))
import messages
from strategy import MomentumRule

now_ns = time.monotonic_ns
BURST = 20
PIPELINES = ["aio notify", "aio notify +history", "aio notify exactly-once", "aio balanced",
             "aio busy", "sockets"]
#: the pipelines whose queues have source ids: message history is written and read
HISTORY = {"aio notify +history", "aio notify exactly-once"}
BASELINE = "sockets"
HOPS = ("gateway -> strategy", "strategy handler", "strategy -> router", "end to end")
PAUSERS: dict[str, Callable[[], ac.Pauser]] = {
    "notify": ac.Pauser.notify, "balanced": ac.Pauser.balanced, "busy": ac.Pauser.busy}


class Tick(messages.Tick):
    """``examples/pipeline``'s tick, stamped by the gateway as it writes it."""

    t_gateway: int


class Order(messages.Order):
    """``examples/pipeline``'s order, with the stamps of the tick it came from."""

    t_gateway: int
    t_strategy_in: int
    t_strategy_out: int


# -- the services' own logic (the same for both pipelines) --------------------

class Momentum:
    """The strategy: ``examples/pipeline/strategy.py``'s rule (buy after three
    upticks of a symbol, sell after three downticks), orders carrying stamps."""

    def __init__(self, orders: messages.OrderFlow, done: Callable[[], None]) -> None:
        self.orders = orders
        self.done = done
        self.rule = MomentumRule()
        self.sent = 0
        self.meter = Meter()

    def on_tick(self, tick: Tick) -> None:
        t_in = now_ns()
        self.meter.tick()
        side = self.rule.side(tick)
        if side is not None:
            limit = tick.ask if side == "BUY" else tick.bid
            self.orders.on_order(Order(tick.symbol, side, 1_000_000, limit, tick.seq,
                                       tick.t_gateway, t_in, now_ns()))
            self.sent += 1

    def end_of_day(self, ticks: int) -> None:
        self.meter.stop()
        self.orders.end_of_day(self.sent)
        self.done()

    def snapshot(self) -> object:
        """The rule's state (for the exactly-once pipeline's snapshots)."""
        return {"last": self.rule.last, "run": self.rule.run, "sent": self.sent}

    def restore(self, state: dict[str, Any]) -> None:
        """Take back what :meth:`snapshot` returned."""
        self.rule.last, self.rule.run, self.sent = state["last"], state["run"], state["sent"]


class Router:
    """The router: keeps each order's four stamps."""

    def __init__(self, warmup: int, done: Callable[[], None]) -> None:
        self.warmup = warmup
        self.done = done
        self.stamps: array[int] = array("q")
        self.orders = 0
        self.notional = 0.0
        self.meter = Meter()

    def on_order(self, order: Order) -> None:
        t = now_ns()
        self.meter.tick()
        self.orders += 1
        self.notional += order.qty * order.limit
        if order.tick_seq >= self.warmup:
            self.stamps.extend((order.t_gateway, order.t_strategy_in, order.t_strategy_out, t))

    def end_of_day(self, orders: int) -> None:
        self.meter.stop()
        self.done()


class Meter:
    """CPU and wall time from the first message to the last."""

    def __init__(self) -> None:
        self.cpu0 = self.wall0 = 0.0
        self.cpu = self.wall = 0.0

    def tick(self) -> None:
        if not self.wall0:
            self.cpu0, self.wall0 = time.process_time(), time.monotonic()

    def stop(self) -> None:
        self.cpu = time.process_time() - self.cpu0
        self.wall = time.monotonic() - self.wall0


def ticks(n: int) -> Any:
    """The gateway's feed: (seq, Tick fields but the stamp), a seeded random walk."""
    rnd = random.Random(7)
    mids = dict.fromkeys(messages.SYMBOLS, 1.0)
    for seq in range(n):
        sym = messages.SYMBOLS[seq % len(messages.SYMBOLS)]
        mid = mids[sym] = round(mids[sym] + rnd.choice((-1, 1)) * 0.0001, 5)
        yield seq, sym, round(mid - 0.00005, 5), round(mid + 0.00005, 5)


async def publish(on_tick: Callable[[Tick], None], n: int, rate: float, meter: Meter) -> None:
    """Write ``n`` ticks at ``rate`` in bursts of BURST: a burst, then wait for
    the next one's slot (the example's gateway)."""
    loop = asyncio.get_running_loop()
    feed = list(ticks(n))
    meter.tick()
    start = loop.time()
    for seq, sym, bid, ask in feed:
        on_tick(Tick(sym, bid, ask, seq, now_ns()))
        if seq % BURST == BURST - 1:
            await asyncio.sleep(max(0.0, start + (seq + 1) / rate - loop.time()))
    meter.stop()


# -- aiochronicle -------------------------------------------------------------

def aio_gateway(cfg: dict[str, Any]) -> dict[str, Any]:
    meter = Meter()

    async def main() -> None:
        with ac.open_queue(cfg["md"]) as md:
            feed = md.appender().method_writer(messages.MarketData)
            cfg["go"].wait()
            await publish(feed.on_tick, cfg["ticks"], cfg["rate"], meter)
            feed.end_of_day(cfg["ticks"])

    run_loop(cfg, main())
    return {"cpu": meter.cpu, "wall": meter.wall}


def aio_strategy(cfg: dict[str, Any]) -> dict[str, Any]:
    pauser = PAUSERS[cfg["pipeline"].split()[1]]
    if cfg["pipeline"].endswith("exactly-once"):
        return once_strategy(cfg, pauser)

    async def main() -> Momentum:
        with ac.open_queue(cfg["md"]) as md, ac.open_queue(cfg["orders"]) as out:
            reader: ac.MethodReader | None = None

            def done() -> None:
                assert reader is not None
                reader.stop()

            strategy = Momentum(out.appender().method_writer(messages.OrderFlow), done)
            reader = md.tailer(pauser=pauser()).method_reader(strategy)
            cfg["ready"].release()
            await reader.run()
            return strategy

    s = run_loop(cfg, main())
    return {"cpu": s.meter.cpu, "wall": s.meter.wall, "sent": s.sent}


def aio_router(cfg: dict[str, Any]) -> dict[str, Any]:
    pauser = PAUSERS[cfg["pipeline"].split()[1]]
    if cfg["pipeline"].endswith("exactly-once"):
        return once_router(cfg, pauser)

    async def main() -> Router:
        with ac.open_queue(cfg["orders"]) as orders:
            reader: ac.MethodReader | None = None

            def done() -> None:
                assert reader is not None
                reader.stop()

            router = Router(cfg["warmup"], done)
            reader = orders.tailer(pauser=pauser()).method_reader(router)
            cfg["ready"].release()
            await reader.run()
            return router

    return router_result(run_loop(cfg, main()))


# -- aiochronicle, exactly once (ac.Service) ----------------------------------

def once_strategy(cfg: dict[str, Any], pauser: Callable[[], ac.Pauser]) -> dict[str, Any]:
    """The strategy as an exactly-once ``ac.Service`` (snapshots every 1,000
    ticks or 5 s)."""
    made: list[Momentum] = []
    svc: ac.Service | None = None

    def done() -> None:
        assert svc is not None
        svc.stop()

    def factory(orders: messages.OrderFlow) -> Momentum:
        made.append(Momentum(orders, done))
        return made[-1]

    svc = ac.Service("strategy", factory,
                     [ac.ServiceInput(cfg["md"], 1, (messages.MarketData,))],
                     [ac.ServiceOutput("orders", cfg["orders"], messages.OrderFlow, 2)],
                     snapshots=ac.SnapshotPolicy(cfg["orders"] + "-snap", every_inputs=1000,
                                                 every_seconds=5.0), pauser=pauser)

    async def main() -> None:
        assert svc is not None
        task = asyncio.ensure_future(svc.run())
        await svc.wait_live()
        cfg["ready"].release()
        await task

    run_loop(cfg, main())
    s = made[-1]
    return {"cpu": s.meter.cpu, "wall": s.meter.wall, "sent": s.sent}


def once_router(cfg: dict[str, Any], pauser: Callable[[], ac.Pauser]) -> dict[str, Any]:
    """The router as an ``ac.Service`` (no outputs: it only reads)."""
    made: list[Router] = []
    svc: ac.Service | None = None

    def done() -> None:
        assert svc is not None
        svc.stop()

    def factory() -> Router:
        made.append(Router(cfg["warmup"], done))
        return made[-1]

    svc = ac.Service("router", factory,
                     [ac.ServiceInput(cfg["orders"], 2, (messages.OrderFlow,))],
                     pauser=pauser, stateless=True)

    async def main() -> None:
        assert svc is not None
        task = asyncio.ensure_future(svc.run())
        await svc.wait_live()
        cfg["ready"].release()
        await task

    run_loop(cfg, main())
    return router_result(made[-1])


# -- Unix sockets + uvloop + msgspec ------------------------------------------

FRAME = struct.Struct("<IB")  # payload length, method (0: the Struct call, 1: end_of_day)
ENC = msgspec.msgpack.Encoder()


class FrameReader(asyncio.Protocol):
    """Splits the stream into frames and calls ``handle(method, payload)``."""

    def __init__(self, handle: Callable[[int, memoryview], None]) -> None:
        self.handle = handle
        self.rest = b""

    def data_received(self, data: bytes) -> None:
        buf = self.rest + data if self.rest else data
        view = memoryview(buf)
        n = len(buf)
        pos = 0
        unpack = FRAME.unpack_from
        handle = self.handle
        while n - pos >= FRAME.size:
            size, method = unpack(buf, pos)
            end = pos + FRAME.size + size
            if end > n:
                break
            handle(method, view[pos + FRAME.size:end])
            pos = end
        self.rest = bytes(view[pos:])


class Sender:
    """A method proxy over a socket: one frame per call."""

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self.write = transport.write

    def call(self, method: int, arg: object) -> None:
        body = ENC.encode(arg)
        self.write(FRAME.pack(len(body), method) + body)


class TickSender(Sender):
    def on_tick(self, tick: Tick) -> None:
        self.call(0, tick)

    def end_of_day(self, ticks: int) -> None:
        self.call(1, ticks)


class OrderSender(Sender):
    def on_order(self, order: Order) -> None:
        self.call(0, order)

    def end_of_day(self, orders: int) -> None:
        self.call(1, orders)


async def flush_close(transport: asyncio.WriteTransport) -> None:
    """Close once everything written has left: a loop that stops with data
    still buffered (a reader behind, its socket buffer full) drops it."""
    while transport.get_write_buffer_size():
        await asyncio.sleep(0.001)
    transport.close()


def sock_gateway(cfg: dict[str, Any]) -> dict[str, Any]:
    meter = Meter()

    async def main() -> None:
        cfg["go"].wait()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_unix_connection(asyncio.Protocol, cfg["md"])
        feed = TickSender(transport)
        await publish(feed.on_tick, cfg["ticks"], cfg["rate"], meter)
        feed.end_of_day(cfg["ticks"])
        await flush_close(transport)

    run_loop(cfg, main())
    return {"cpu": meter.cpu, "wall": meter.wall}


async def serve(path: str, handler: Any, decode_arg: Callable[[memoryview], Any],
                ready: Any, finished: asyncio.Future[None]) -> None:
    """Serve ``handler``'s two methods on the Unix socket ``path`` until
    ``finished`` is done."""
    decode_int = msgspec.msgpack.Decoder(int).decode
    call, eod = (handler.on_tick if hasattr(handler, "on_tick") else handler.on_order,
                 handler.end_of_day)

    def handle(method: int, body: memoryview) -> None:
        if method == 0:
            call(decode_arg(body))
        else:
            eod(decode_int(body))

    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(lambda: FrameReader(handle), path)
    ready.release()
    try:
        await finished
    finally:
        server.close()


def sock_strategy(cfg: dict[str, Any]) -> dict[str, Any]:
    async def main() -> Momentum:
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        transport, _ = await loop.create_unix_connection(asyncio.Protocol, cfg["orders"])
        strategy = Momentum(OrderSender(transport), lambda: finished.set_result(None))
        await serve(cfg["md"], strategy, msgspec.msgpack.Decoder(Tick).decode, cfg["ready"],
                    finished)
        await flush_close(transport)
        return strategy

    cfg["router_up"].acquire()  # the router listens before the strategy connects
    cfg["router_up"].release()
    s = run_loop(cfg, main())
    return {"cpu": s.meter.cpu, "wall": s.meter.wall, "sent": s.sent}


def sock_router(cfg: dict[str, Any]) -> dict[str, Any]:
    class Up:
        def release(self) -> None:
            cfg["router_up"].release()
            cfg["ready"].release()

    async def main() -> Router:
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        router = Router(cfg["warmup"], lambda: finished.set_result(None))
        await serve(cfg["orders"], router, msgspec.msgpack.Decoder(Order).decode, Up(),
                    finished)
        return router

    return router_result(run_loop(cfg, main()))


# -- running ------------------------------------------------------------------

def router_result(r: Router) -> dict[str, Any]:
    return {"cpu": r.meter.cpu, "wall": r.meter.wall, "orders": r.orders,
            "stamps": r.stamps.tobytes()}


def run_loop(cfg: dict[str, Any], coro: Any) -> Any:
    if cfg["loop"] == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


SERVICES = {
    "aio": {"gateway": aio_gateway, "strategy": aio_strategy, "router": aio_router},
    "sockets": {"gateway": sock_gateway, "strategy": sock_strategy, "router": sock_router},
}


def service(name: str, cfg: dict[str, Any], out: Connection) -> None:
    gc.collect()
    gc.freeze()
    gc.disable()
    fn = SERVICES["sockets" if cfg["pipeline"] == "sockets" else "aio"][name]
    try:
        out.send(fn(cfg))
    except BaseException as exc:
        out.send({"error": f"{name}: {exc!r}"})
        raise


def run_pipeline(pipeline: str, root: str, n: int, args: argparse.Namespace
                 ) -> dict[str, Any]:
    """One run of one pipeline: the three processes' results by service name."""
    ctx = mp.get_context("fork")
    d = os.path.join(root, f"run{n}")
    os.makedirs(d)
    cfg: dict[str, Any] = {
        "pipeline": pipeline, "ticks": args.ticks, "rate": args.rate, "loop": args.loop,
        "warmup": args.warmup, "ready": ctx.Semaphore(0), "router_up": ctx.Semaphore(0),
        "go": ctx.Event(),
        "md": os.path.join(d, "md" if pipeline != "sockets" else "md.sock"),
        "orders": os.path.join(d, "orders" if pipeline != "sockets" else "orders.sock")}
    if pipeline != "sockets":
        for sid, path in enumerate((cfg["md"], cfg["orders"]), 1):
            # made before the services race to open them; with source ids, the
            # method writers write message history and the readers read it
            ac.open_queue(path, source_id=sid if pipeline in HISTORY else 0).close()
    procs = {}
    pipes = {}
    for name in ("router", "strategy", "gateway"):
        rx, tx = ctx.Pipe(duplex=False)
        p = ctx.Process(target=service, args=(name, cfg, tx), daemon=True)
        p.start()
        tx.close()
        procs[name], pipes[name] = p, rx
    results: dict[str, Any] = {}
    try:
        for _ in range(2):
            if not cfg["ready"].acquire(timeout=60):
                raise RuntimeError(f"{pipeline}: the readers did not start")
        cfg["go"].set()
        limit = 60 + 4 * args.ticks / args.rate
        for name in ("gateway", "strategy", "router"):
            if not pipes[name].poll(limit):
                raise RuntimeError(f"{pipeline}: the {name} did not finish")
            r = pipes[name].recv()
            if "error" in r:
                raise RuntimeError(f"{pipeline}: {r['error']}")
            results[name] = r
    finally:
        for p in procs.values():
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
        shutil.rmtree(d, ignore_errors=True)
    stamps = array("q")
    stamps.frombytes(results["router"].pop("stamps"))
    hops: list[list[int]] = [[], [], [], []]
    for i in range(0, len(stamps), 4):
        g, si, so, r = stamps[i:i + 4]
        hops[0].append(si - g)
        hops[1].append(so - si)
        hops[2].append(r - so)
        hops[3].append(r - g)
    results["hops"] = [sorted(h) for h in hops]
    return results


def pct(values: list[int], p: float) -> int:
    if not values:
        return 0
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def fmt_us(ns: float) -> str:
    us = ns / 1000
    return f"{us:.1f}" if us < 100 else f"{us:.0f}"


def tables(best: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    base = best.get(BASELINE)
    rows = []
    for pipeline in PIPELINES:
        r = best.get(pipeline)
        if r is None:
            continue
        for k, hop in enumerate(HOPS):
            v = r["hops"][k]
            b = base["hops"][k] if base else []
            rows.append([pipeline, hop, fmt_us(pct(v, 50)), fmt_us(pct(v, 90)),
                         fmt_us(pct(v, 99)), fmt_us(v[-1] if v else 0),
                         _report.ratio(pct(v, 50), pct(b, 50)),
                         _report.ratio(pct(v, 99), pct(b, 99))])
    lat = _report.table(["pipeline", "hop", "p50 µs", "p90 µs", "p99 µs", "max µs",
                         "p50 / sockets", "p99 / sockets"], rows, "llrrrrrr")
    rows = []
    for pipeline in PIPELINES:
        r = best.get(pipeline)
        if r is None:
            continue
        cpu = [r[s]["cpu"] for s in ("gateway", "strategy", "router")]
        bcpu = [base[s]["cpu"] for s in ("gateway", "strategy", "router")] if base else [0] * 3
        rows.append([pipeline, f"{r['router']['orders']:,} / {r['strategy']['sent']:,}",
                     *(f"{c:.3f}" for c in cpu), f"{sum(cpu):.3f}",
                     _report.ratio(cpu[1] + cpu[2], bcpu[1] + bcpu[2]),
                     _report.ratio(sum(cpu), sum(bcpu))])
    cpu_t = _report.table(["pipeline", "orders routed / sent", "gateway s", "strategy s",
                           "router s", "total s", "readers / sockets", "total / sockets"],
                          rows)
    return lat, cpu_t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=10_000.0, help="ticks per second")
    parser.add_argument("--warmup", type=int, default=1_000,
                        help="orders for the first N ticks are left out")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", nargs="*", choices=PIPELINES, help="pipelines to run")
    parser.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    parser.add_argument("--dir", default=None, help="where to put the queues and sockets")
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--write-docs", action="store_true",
                        help="write the tables into docs/performance.md")
    args = parser.parse_args()
    if args.quick:
        args.ticks, args.warmup, args.repeats = 400, 0, 1
    pipelines = [p for p in PIPELINES if not args.only or p in args.only]
    root = tempfile.mkdtemp(prefix="aiochronicle-pipe-", dir=args.dir)
    load0 = _report.load()
    print(f"aiochronicle {ac.__version__}: gateway -> strategy -> router, {args.ticks:,} "
          f"ticks at {args.rate:,.0f}/s in bursts of {BURST}; loop {args.loop}; "
          f"load average {load0:.2f}; in {root}", flush=True)
    best: dict[str, dict[str, Any]] = {}
    try:
        n = 0
        for rep in range(args.repeats):
            for pipeline in pipelines:
                n += 1
                r = run_pipeline(pipeline, root, n, args)
                e2e = r["hops"][3]
                cpu = sum(r[s]["cpu"] for s in ("gateway", "strategy", "router"))
                print(f"  {pipeline:<13} #{rep} end to end p50 {fmt_us(pct(e2e, 50)):>6} "
                      f"p99 {fmt_us(pct(e2e, 99)):>6} µs; orders {r['router']['orders']:,}; "
                      f"CPU {cpu:.3f} s", flush=True)
                old = best.get(pipeline)
                if old is None or pct(e2e, 50) < pct(old["hops"][3], 50):
                    best[pipeline] = r
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load1 = _report.load()
    lat, cpu = tables(best)
    print("\n".join(lat))
    print()
    print("\n".join(cpu))
    print(f"load average {load1:.2f}")
    if args.write_docs:
        body = [_report.measured_by(
            "pipeline.py", load0, load1,
            [f"{args.ticks:,} ticks at {args.rate:,.0f}/s in bursts of {BURST}",
             f"loop {args.loop}", f"best end-to-end p50 of {args.repeats} interleaved runs",
             f"orders of the first {args.warmup:,} ticks left out"]),
            "Latency per hop in µs, from the stamps each order carries; ratios against the "
            "sockets pipeline of the same run:", "", *lat, "",
            "CPU seconds of each process from its first message to its last; "
            "\"readers\" is the strategy and the router:", "", *cpu]
        _report.replace_block(_report.PERFORMANCE, "pipeline-bench", body)
        print("wrote docs/performance.md")


if __name__ == "__main__":
    main()
