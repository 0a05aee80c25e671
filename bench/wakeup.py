"""The CPU of one wake-up of a parked ``Pauser.notify()`` method reader, against
a uvloop socket reader doing the same, in one process.

Run:  .venv/bin/python bench/wakeup.py [--calls N] [--repeats R] [--loop asyncio]

A writer task makes one method call (a 3-field msgspec Struct) and awaits the
reader's handler; the reader is parked in between, so every call is one
wake-up.  ``aio notify``: a method writer on a queue and ``await
reader.run()`` on a tailer with ``Pauser.notify()`` (each commit sends the
parked loop's socket one byte; the loop's callback reads it and resumes the
reader).  ``sockets``: one frame per call (a 4-byte length, a method byte, the
Struct in msgpack) written to a Unix socket pair whose other end is an
``asyncio.Protocol`` (``data_received`` decodes it and calls the handler).
One process and one loop: no scheduling of other processes between the two
sides, so what is left is each side's own work per wake-up.  CPU per call is
``time.process_time()`` over the calls; each runs ``--repeats`` times,
interleaved, and the median is kept; the ratio is against the sockets' median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from typing import Any

import _report  # bench/_report.py (this directory is on sys.path)
import msgspec

import aiochronicle as ac


class Order(msgspec.Struct):
    symbol: str
    qty: int
    limit: float


class OrderFlow:
    def on_order(self, order: Order) -> None:
        """One order."""


ORDER = Order("EURUSD", 1_000_000, 1.0842)
WARMUP = 200
FRAME = struct.Struct("<IB")


async def aio_notify(path: str, calls: int) -> tuple[float, int]:
    """CPU seconds for ``calls`` calls through a parked notify method reader,
    and how many times the reader parked meanwhile."""
    loop = asyncio.get_running_loop()
    handled: list[asyncio.Future[None]] = []

    class Handler:
        def on_order(self, order: Order) -> None:
            handled[0].set_result(None)

    with ac.open_queue(path) as q:
        writer = q.appender().method_writer(OrderFlow)
        pauser = ac.Pauser.notify()
        reader = q.tailer(pauser=pauser).method_reader(Handler())
        task = asyncio.ensure_future(reader.run())
        parks0 = cpu0 = 0
        for i in range(WARMUP + calls):
            if i == WARMUP:
                parks0, cpu0 = pauser.count_paused, time.process_time()
            handled[:] = [loop.create_future()]
            writer.on_order(ORDER)
            await handled[0]
        cpu = time.process_time() - cpu0
        parks = pauser.count_paused - parks0
        reader.stop()
        await task
    return cpu, parks


async def sockets(path: str, calls: int) -> tuple[float, int]:
    """CPU seconds for ``calls`` calls over a Unix socket pair, and how many
    times ``data_received`` ran meanwhile."""
    loop = asyncio.get_running_loop()
    handled: list[asyncio.Future[None]] = []
    decode = msgspec.msgpack.Decoder(Order).decode
    encode = msgspec.msgpack.Encoder().encode
    received = [0]

    def on_order(order: Order) -> None:
        handled[0].set_result(None)

    class FrameReader(asyncio.Protocol):
        rest = b""

        def data_received(self, data: bytes) -> None:
            received[0] += 1
            buf = self.rest + data if self.rest else data
            view, pos, n = memoryview(buf), 0, len(buf)
            while n - pos >= FRAME.size:
                size, _method = FRAME.unpack_from(buf, pos)
                end = pos + FRAME.size + size
                if end > n:
                    break
                on_order(decode(view[pos + FRAME.size:end]))
                pos = end
            self.rest = bytes(view[pos:])

    a, b = socket.socketpair()
    await loop.connect_accepted_socket(FrameReader, b)
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
    received0 = cpu0 = 0
    for i in range(WARMUP + calls):
        if i == WARMUP:
            received0, cpu0 = received[0], time.process_time()
        handled[:] = [loop.create_future()]
        body = encode(ORDER)
        transport.write(FRAME.pack(len(body), 0) + body)
        await handled[0]
    cpu = time.process_time() - cpu0
    transport.close()
    return cpu, received[0] - received0


CONTENDERS: dict[str, Callable[[str, int], Any]] = {"aio notify": aio_notify,
                                                    "sockets": sockets}
BASELINE = "sockets"


def run_loop(kind: str, coro: Any) -> Any:
    if kind == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.repeats = 300, 1
    load0 = _report.load()
    print(f"aiochronicle {ac.__version__}: one wake-up per call, {args.calls:,} calls, "
          f"loop {args.loop}, median of {args.repeats}; load average {load0:.2f}",
          flush=True)
    per_call: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    wakes: dict[str, list[int]] = {name: [] for name in CONTENDERS}
    root = tempfile.mkdtemp(prefix="aiochronicle-wakeup-")
    try:
        for rep in range(args.repeats):
            for name, fn in CONTENDERS.items():
                path = os.path.join(root, f"q{rep}")
                cpu, woke = run_loop(args.loop, fn(path, args.calls))
                per_call[name].append(cpu / args.calls * 1e6)
                wakes[name].append(woke)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(per_call[BASELINE])
    rows = [[name, f"{statistics.median(v):.2f}", f"{min(v):.2f}",
             f"{statistics.median(wakes[name]):,.0f}",
             _report.ratio(statistics.median(v), base)] for name, v in per_call.items()]
    print("\n".join(_report.table(["reader", "CPU µs per call (median)", "min",
                                   "wake-ups", "/ sockets"], rows, "lrrrr")))
    print(f"load average {_report.load():.2f}")


if __name__ == "__main__":
    main()
