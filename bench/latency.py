"""One-way latency and end-to-end throughput between two processes: aiochronicle
beside the IPC a Python user would pick instead, in one run.

Run:  .venv/bin/python bench/latency.py [--quick] [--seconds S] [--write-docs]

Latency: a producer process sends messages of 40 and 256 bytes at 10k/s and
100k/s (paced by spinning on the clock) for ``--seconds``, split into
``--repeats`` interleaved repetitions of which each contender keeps the one
with the lowest p99 (the machine is shared); each message starts with its send time
(``CLOCK_MONOTONIC`` ns, taken just before the send call) and its sequence
number.  The consumer process takes the time as soon as it has the message;
the differences go into a log-linear histogram (1.6% buckets) from which
p50/p90/p99/p99.9 are read; max is exact.  The first ``--warmup`` seconds are
left out.  The two processes are pinned to different CPUs (``--no-pin`` not to)
and run with the cyclic garbage collector frozen and disabled, whoever the
contender.

Contenders (consumer side; every producer is a plain loop):

* ``aio sync busy``: ``Tailer.read_blocking()`` with ``Pauser.busy()``;
* ``aio async busy``, ``aio async balanced``, ``aio async notify``:
  ``async for excerpt in tailer`` on uvloop with that pauser;
* ``aio async notify-spin``: the same with ``Pauser.notify(spin=200e-6)``, which
  spins 200 µs after each message before it parks;
* ``iceoryx2``: publish/subscribe, a busy-polling subscriber (zero-copy shared
  memory, persists nothing);
* ``zmq``: pyzmq PUSH/PULL over ``ipc://``, an asyncio (uvloop) consumer that
  drains what is queued after each wake-up;
* ``mp.Queue``: ``multiprocessing.Queue``, a blocking ``get()``;
* ``pipe``: ``os.pipe`` read with asyncio streams on uvloop;
* ``shm ring``: a pure-Python single-producer ring in ``multiprocessing.shared_memory``,
  busy-polling consumer.

Throughput: the producer sends as fast as it can for ``--seconds`` (40 B and
1 KiB), stamping one reused ``bytearray`` per message as a service would (the
consumer copies each payload out); the rate is messages received over the
time from the producer's first send to the consumer's last receive.
aiochronicle is measured per message (``append`` / ``read_nowait``) and
batched (``append_packed`` / ``read_many``).

Consumer CPU: its process's CPU time over the wall time from its first
measured message to the last, in % of a core.

Idle CPU: each consumer waits with nothing sent; its own CPU time over a window
after its back-off has settled.

This 2-vCPU VM is noisy and shared: compare figures within one run.  The
latency tail above p99 is mostly the VM's scheduling.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import multiprocessing as mp
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import _report  # bench/_report.py (this directory is on sys.path)

import aiochronicle as ac

HEAD = struct.Struct("<qq")  # send time (ns), sequence (-1: stop)
STOP = -1
now_ns = time.monotonic_ns

LATENCY_IMPLS = ["aio sync busy", "aio async busy", "aio async balanced", "aio async notify",
                 "aio async notify-spin",
                 "iceoryx2", "zmq", "mp.Queue", "pipe", "shm ring"]
THROUGHPUT_IMPLS = ["aio batch", "aio per-msg", "aio sync busy", "aio async busy",
                    "aio async notify", "iceoryx2", "zmq", "mp.Queue", "pipe", "shm ring"]
IDLE_QUIET = ["aio async balanced", "aio async sleepy", "aio async notify",
              "aio async notify-spin", "zmq", "mp.Queue", "pipe"]
IDLE_BUSY = ["aio sync busy", "aio async busy", "iceoryx2", "shm ring"]
NOTIFY_SPIN = 200e-6
AIO_PAUSERS: dict[str, Callable[[], ac.Pauser]] = {
    "busy": ac.Pauser.busy,
    "balanced": ac.Pauser.balanced,
    "sleepy": ac.Pauser.sleepy,
    "notify": ac.Pauser.notify,
    # spins NOTIFY_SPIN after each message before it parks: ~1 µs while
    # messages come at least that often, a parked tailer's cost when idle
    "notify-spin": lambda: ac.Pauser.notify(spin=NOTIFY_SPIN),
}


# -- histogram ------------------------------------------------------------------------------

class Histogram:
    """Log-linear buckets: exact below 64 ns, then 64 buckets per power of two."""

    SUB = 6

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max = 0

    def bucket(self, v: int) -> int:
        if v < (1 << self.SUB):
            return max(v, 0)
        shift = v.bit_length() - self.SUB
        return (shift << (self.SUB - 1)) + (v >> shift)

    def upper(self, b: int) -> int:
        """The largest value of bucket ``b``."""
        if b < (1 << self.SUB):
            return b
        half = 1 << (self.SUB - 1)
        shift = b // half - 1
        mantissa = b % half + half
        return ((mantissa + 1) << shift) - 1

    def record_all(self, values: array[int]) -> None:
        counts = self.counts
        bucket = self.bucket
        for v in values:
            b = bucket(v)
            counts[b] = counts.get(b, 0) + 1
        self.total += len(values)
        if len(values):
            self.max = max(self.max, max(values))

    def percentile(self, p: float) -> int:
        if not self.total:
            return 0
        rank = max(1, int(self.total * p / 100.0 + 0.999999))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return min(self.upper(b), self.max)
        return self.max


PCTS = (50.0, 90.0, 99.0, 99.9)
PLOT_PCTS = (0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99)


@dataclass
class Spec:
    impl: str
    mode: str  # latency | throughput | idle
    size: int
    rate: int = 0
    seconds: float = 2.0
    warmup: float = 0.3
    path: str = ""
    name: str = ""
    ramp: float = 0.0
    window: float = 0.0
    pin: bool = True
    loop: str = "uvloop"
    max_msgs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return int(self.rate * (self.seconds + self.warmup))

    @property
    def warm_count(self) -> int:
        return int(self.rate * self.warmup)


# -- consumer side --------------------------------------------------------------------------

class Recorder:
    """What a latency consumer does with each message."""

    def __init__(self, spec: Spec) -> None:
        self.warm = spec.warm_count
        self.lat: array[int] = array("q")
        self.received = 0
        self.cpu0 = self.wall0 = 0.0
        self.cpu = 0.0

    def add(self, payload: bytes | memoryview) -> bool:
        t = now_ns()
        ts, seq = HEAD.unpack_from(payload)
        if seq < 0:
            if self.wall0:
                self.cpu = ((time.process_time() - self.cpu0)
                            / max(1e-9, time.monotonic() - self.wall0))
            return False
        if seq >= self.warm:
            if not self.received:
                self.cpu0, self.wall0 = time.process_time(), time.monotonic()
            self.lat.append(t - ts)
            self.received += 1
        return True

    def result(self, spec: Spec) -> dict[str, Any]:
        h = Histogram()
        h.record_all(self.lat)
        return {"p": {p: h.percentile(p) for p in PCTS}, "max": h.max, "cpu": self.cpu,
                "plot": [(p, h.percentile(p)) for p in PLOT_PCTS],
                "received": self.received, "lost": spec.count - spec.warm_count - self.received}


class Counter:
    """What a throughput consumer does with each message."""

    def __init__(self) -> None:
        self.n = 0
        self.t_start = 0
        self.t_last = 0

    def add(self, payload: bytes | memoryview) -> bool:
        ts, seq = HEAD.unpack_from(payload)
        if seq < 0:
            self.t_last = now_ns()
            return False
        if not self.n:
            self.t_start = ts
        self.n += 1
        return True

    def result(self, spec: Spec) -> dict[str, Any]:
        dt = (self.t_last - self.t_start) / 1e9
        return {"count": self.n, "rate": self.n / dt if dt > 0 else 0.0}


def run_loop(spec: Spec, coro: Any) -> Any:
    if spec.loop == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def idle_meter(spec: Spec, out: Connection) -> None:
    """In idle mode: report this process's CPU use over the window, then exit."""

    def measure() -> None:
        time.sleep(spec.ramp)
        c0, w0 = time.process_time(), time.monotonic()
        time.sleep(spec.window)
        out.send({"cpu": (time.process_time() - c0) / (time.monotonic() - w0)})
        out.close()
        os._exit(0)

    threading.Thread(target=measure, daemon=True).start()


def quiet_gc() -> None:
    """What latency-minded Python services do: no cyclic GC passes mid-stream
    (the same for every contender)."""
    gc.collect()
    gc.freeze()
    gc.disable()


def consume(spec: Spec, ready: Any, out: Connection, shared: dict[str, Any]) -> None:
    quiet_gc()
    if spec.pin:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {1 % (os.cpu_count() or 1)})
    sink: Recorder | Counter = Recorder(spec) if spec.mode == "latency" else Counter()
    if spec.mode == "idle":
        idle_meter(spec, out)
    impl = spec.impl
    if impl.startswith("aio"):
        consume_aio(spec, ready, sink)
    elif impl == "iceoryx2":
        consume_iceoryx2(spec, ready, sink)
    elif impl == "zmq":
        consume_zmq(spec, ready, sink)
    elif impl == "mp.Queue":
        consume_mpq(spec, ready, sink, shared["mpq"])
    elif impl == "pipe":
        consume_pipe(spec, ready, sink, shared["pipe"])
    elif impl == "shm ring":
        consume_ring(spec, ready, sink, shared["ring"])
    else:
        raise ValueError(impl)
    out.send(sink.result(spec))
    out.close()


def consume_aio(spec: Spec, ready: Any, sink: Recorder | Counter) -> None:
    q = ac.open_queue(spec.path, roll_cycle=ac.RollCycles.HUGE_DAILY)
    kind = spec.impl.split()[-1]
    add = sink.add
    if spec.impl == "aio batch":
        t = q.tailer()
        ready.set()
        assert isinstance(sink, Counter)
        while True:  # counts whole batches: what a batch consumer is handed
            b = t.read_many(8192, 1 << 22)
            n = len(b)
            if not n:
                continue
            d, o = b.data, b.offsets
            if not sink.n:
                sink.t_start = HEAD.unpack_from(d, o[0])[0]
            if HEAD.unpack_from(d, o[n - 1])[1] < 0:
                sink.n += n - 1
                sink.t_last = now_ns()
                return
            sink.n += n
    if spec.impl == "aio per-msg":
        t = q.tailer()
        ready.set()
        read = t.read_nowait
        while True:
            ex = read()
            if ex is not None and not add(ex.payload):
                break
        return
    t = q.tailer(pauser=AIO_PAUSERS[kind]())
    if spec.impl.startswith("aio sync"):
        ready.set()
        rb = t.read_blocking
        while True:
            ex = rb()
            if ex is not None and not add(ex.payload):
                break
        return

    async def main() -> None:
        ready.set()
        async for ex in t:
            if not add(ex.payload):
                break

    run_loop(spec, main())


def iox_service(spec: Spec) -> tuple[Any, Any, Any]:
    import iceoryx2 as iox2

    iox2.set_log_level(iox2.LogLevel.Error)
    node = iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)
    payload = ctypes.c_uint8 * spec.size
    throughput = spec.mode == "throughput"
    builder = (node.service_builder(iox2.ServiceName.new(spec.name))
               .publish_subscribe(payload)
               .subscriber_max_buffer_size(1024)
               .enable_safe_overflow(not throughput))
    return iox2, node, builder.open_or_create()


def consume_iceoryx2(spec: Spec, ready: Any, sink: Recorder | Counter) -> None:
    _iox2, _node, service = iox_service(spec)
    sub = service.subscriber_builder().buffer_size(1024).create()
    receive = sub.receive
    add = sink.add
    string_at = ctypes.string_at
    ready.set()
    while True:
        sample = receive()
        if sample is None:
            continue
        if not add(string_at(sample.payload_ptr, 16)):
            break


def consume_zmq(spec: Spec, ready: Any, sink: Recorder | Counter) -> None:
    import zmq
    import zmq.asyncio

    add = sink.add
    if spec.mode == "throughput":  # the fastest way to drain it: blocking receives
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PULL)
        sock.bind(spec.name)
        ready.set()
        recv = sock.recv
        while add(recv()):
            pass
        sock.close(0)
        ctx.term()
        return

    async def main() -> None:
        actx = zmq.asyncio.Context()
        asock = actx.socket(zmq.PULL)
        asock.bind(spec.name)
        # ZMQ_FD is edge-triggered: after each wake-up take everything queued
        # (without it, awaiting recv() alone stalled for good under load here)
        sync = zmq.Socket.shadow(asock.underlying)
        nowait = zmq.NOBLOCK
        again = zmq.Again
        ready.set()
        arecv = asock.recv
        srecv = sync.recv
        going = True
        while going:
            msg = await arecv()
            while True:
                if not add(msg):
                    going = False
                    break
                try:
                    msg = srecv(nowait)
                except again:
                    break
        asock.close(0)
        actx.term()

    run_loop(spec, main())


def consume_mpq(spec: Spec, ready: Any, sink: Recorder | Counter, q: Any) -> None:
    ready.set()
    get = q.get
    add = sink.add
    while add(get()):
        pass


def consume_pipe(spec: Spec, ready: Any, sink: Recorder | Counter, fds: tuple[int, int]) -> None:
    r, w = fds
    if spec.mode != "idle":  # idle: keep a writer, or the reader sees the end at once
        os.close(w)
    size = spec.size
    add = sink.add

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 22)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                     os.fdopen(r, "rb", buffering=0))
        ready.set()
        if spec.mode == "latency" or spec.mode == "idle":
            readexactly = reader.readexactly
            while add(await readexactly(size)):
                pass
            return
        # throughput: read what is there, split into fixed-size frames
        assert isinstance(sink, Counter)
        rest = b""
        read = reader.read
        while True:
            chunk = rest + await read(1 << 20)
            n = len(chunk) // size
            if n:
                if not sink.n:
                    sink.t_start = HEAD.unpack_from(chunk, 0)[0]
                if HEAD.unpack_from(chunk, (n - 1) * size)[1] < 0:
                    sink.n += n - 1
                    sink.t_last = now_ns()
                    return
                sink.n += n
            rest = chunk[n * size:]

    run_loop(spec, main())


RING_SLOTS = 4096
RING_HDR = 128  # head at 0, tail at 64 (separate cache lines)


def consume_ring(spec: Spec, ready: Any, sink: Recorder | Counter, name: str) -> None:
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(name=name)
    buf = shm.buf
    size = spec.size
    q64 = struct.Struct("<q")
    load = q64.unpack_from
    store = q64.pack_into
    add = sink.add
    tail = 0
    ready.set()
    try:
        while True:
            head = load(buf, 0)[0]
            if head == tail:
                continue
            while tail < head:
                off = RING_HDR + (tail % RING_SLOTS) * size
                payload = bytes(buf[off:off + size])
                tail += 1
                store(buf, 64, tail)
                if not add(payload):
                    return
    finally:
        del buf
        shm.close()


# -- producer side --------------------------------------------------------------------------

def produce(spec: Spec, ready: Any, shared: dict[str, Any]) -> None:
    quiet_gc()
    if spec.pin:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {0})
    if not ready.wait(30):
        raise SystemExit("consumer never became ready")
    if spec.impl == "aio batch":
        produce_batches(spec)
        return
    send, flush, close = make_sender(spec, shared)
    pad = bytes(spec.size - HEAD.size)
    pack = HEAD.pack
    if spec.mode == "throughput":
        # the shape of a service: one reused buffer, stamped per message; every
        # transport copies it before send() returns (mp.Queue pickles later,
        # in its feeder thread, so it gets its own copy)
        msg = bytearray(spec.size)
        stamp = HEAD.pack_into
        copy = spec.impl == "mp.Queue"
        end = now_ns() + int(spec.seconds * 1e9)
        i = 0
        limit = spec.max_msgs
        while True:
            stamp(msg, 0, now_ns(), i)
            send(bytes(msg) if copy else msg)
            i += 1
            if not i & 255 and (now_ns() >= end or i >= limit):
                break
    else:
        interval = 1e9 / spec.rate
        t0 = now_ns() + 1_000_000
        for i in range(spec.count):
            due = t0 + int(i * interval)
            while now_ns() < due:
                pass
            send(pack(now_ns(), i) + pad)
    send(pack(now_ns(), STOP) + pad)
    flush()
    close()


def produce_batches(spec: Spec) -> None:
    q = ac.open_queue(spec.path, roll_cycle=ac.RollCycles.HUGE_DAILY)
    a = q.appender()
    size = spec.size
    per = max(1, min(4096, (1 << 20) // size))
    offsets = array("q", range(0, size * (per + 1), size))
    body = bytearray(HEAD.pack(0, 0) + bytes(size - HEAD.size)) * per
    end = now_ns() + int(spec.seconds * 1e9)
    sent = 0
    first = True
    while now_ns() < end and sent < spec.max_msgs:
        if first:
            HEAD.pack_into(body, 0, now_ns(), 0)
            first = False
            a.append_packed(body, offsets)
            HEAD.pack_into(body, 0, 0, 1)
        else:
            a.append_packed(body, offsets)
        sent += per
    a.append(HEAD.pack(now_ns(), STOP) + bytes(size - HEAD.size))
    q.close()


def make_sender(spec: Spec, shared: dict[str, Any]
                ) -> tuple[Callable[[bytes], Any], Callable[[], None], Callable[[], None]]:
    impl = spec.impl

    def nothing() -> None:
        return None

    if impl.startswith("aio"):
        q = ac.open_queue(spec.path, roll_cycle=ac.RollCycles.HUGE_DAILY)
        a = q.appender()
        return a.append, nothing, q.close
    if impl == "iceoryx2":
        iox2, _node, service = iox_service(spec)
        strategy = (iox2.BackpressureStrategy.RetryUntilDelivered if spec.mode == "throughput"
                    else iox2.BackpressureStrategy.DiscardData)
        pub = service.publisher_builder().backpressure_strategy(strategy).create()
        time.sleep(0.05)
        pub.update_connections()
        loan = pub.loan_uninit
        memmove = ctypes.memmove
        size = spec.size

        views: dict[int, Any] = {}  # the reused bytearray of the throughput mode

        def send_iox(msg: bytes) -> None:
            s = loan()
            if type(msg) is bytes:
                memmove(s.payload_ptr, msg, size)
            else:
                src = views.get(id(msg))
                if src is None:
                    src = views[id(msg)] = (ctypes.c_char * size).from_buffer(msg)
                memmove(s.payload_ptr, src, size)
            s.assume_init().send()

        return send_iox, nothing, nothing
    if impl == "zmq":
        import zmq

        ctx = zmq.Context()
        sock = ctx.socket(zmq.PUSH)
        sock.connect(spec.name)
        time.sleep(0.1)

        def close_zmq() -> None:
            sock.close(linger=-1)  # deliver everything, the stop message too
            ctx.term()

        return sock.send, nothing, close_zmq
    if impl == "mp.Queue":
        q = shared["mpq"]

        def close_q() -> None:
            q.close()
            q.join_thread()

        return q.put, nothing, close_q
    if impl == "pipe":
        r, w = shared["pipe"]
        os.close(r)
        write = os.write

        def send_pipe(msg: bytes) -> None:
            write(w, msg)

        return send_pipe, nothing, lambda: os.close(w)
    if impl == "shm ring":
        from multiprocessing import shared_memory

        shm = shared_memory.SharedMemory(name=shared["ring"])
        buf = shm.buf
        size = spec.size
        q64 = struct.Struct("<q")
        load = q64.unpack_from
        store = q64.pack_into
        state = [0]

        def send_ring(msg: bytes) -> None:
            head = state[0]
            while head - load(buf, 64)[0] >= RING_SLOTS:
                pass
            off = RING_HDR + (head % RING_SLOTS) * size
            buf[off:off + size] = msg
            head += 1
            state[0] = head
            store(buf, 0, head)

        def close_ring() -> None:
            nonlocal buf
            del buf
            shm.close()

        return send_ring, nothing, close_ring
    raise ValueError(impl)


# -- running cases --------------------------------------------------------------------------

def run_case(spec: Spec, root: str, case_no: int) -> dict[str, Any] | None:
    ctx = mp.get_context("fork")
    spec.path = os.path.join(root, f"q{case_no}")
    spec.name = (f"ipc://{root}/zmq{case_no}" if spec.impl == "zmq"
                 else f"aiochronicle-bench/{os.getpid()}/{case_no}")
    shared: dict[str, Any] = {}
    ring = None
    if spec.impl == "mp.Queue":
        shared["mpq"] = ctx.Queue(maxsize=100_000)
    elif spec.impl == "pipe":
        shared["pipe"] = os.pipe()
    elif spec.impl == "shm ring":
        from multiprocessing import shared_memory

        ring = shared_memory.SharedMemory(create=True, size=RING_HDR + RING_SLOTS * spec.size)
        ring.buf[:RING_HDR] = bytes(RING_HDR)
        shared["ring"] = ring.name
    ready = ctx.Event()
    rx, tx = ctx.Pipe(duplex=False)
    consumer = ctx.Process(target=consume, args=(spec, ready, tx, shared), daemon=True)
    consumer.start()
    producer = None
    if spec.mode != "idle":
        producer = ctx.Process(target=produce, args=(spec, ready, shared), daemon=True)
        producer.start()
    tx.close()
    if "pipe" in shared:
        for fd in shared["pipe"]:
            os.close(fd)
    limit = spec.seconds + spec.warmup + spec.ramp + spec.window + 60
    result = rx.recv() if rx.poll(limit) else None
    for p in (producer, consumer):
        if p is None:
            continue
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    if ring is not None:
        ring.close()
        ring.unlink()
    shutil.rmtree(spec.path, ignore_errors=True)
    return result


def fmt_us(ns: float) -> str:
    us = ns / 1000
    return f"{us:.1f}" if us < 100 else f"{us:.0f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def latency_table(results: dict[tuple[str, int, int], dict[str, Any]], size: int,
                  rate: int) -> list[str]:
    base = results.get(("iceoryx2", size, rate))
    pipe = results.get(("pipe", size, rate))
    lines = [f"| {size} B @ {rate // 1000}k/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs "
             "| lost | consumer CPU | p50 / pipe | p50 / iceoryx2 | p99 / iceoryx2 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for impl in LATENCY_IMPLS:
        r = results.get((impl, size, rate))
        if r is None:
            if any(k[0] == impl for k in results):  # run, but not in this case
                lines.append(f"| {impl} | failed | | | | | | | | | |")
            continue
        p = r["p"]
        vs_pipe = ratio(p[50.0], pipe["p"][50.0]) if pipe else "-"
        vs50 = ratio(p[50.0], base["p"][50.0]) if base else "-"
        vs99 = ratio(p[99.0], base["p"][99.0]) if base else "-"
        lines.append(f"| {impl} | {fmt_us(p[50.0])} | {fmt_us(p[90.0])} | {fmt_us(p[99.0])} "
                     f"| {fmt_us(p[99.9])} | {fmt_us(r['max'])} | {r['lost']} "
                     f"| {r['cpu'] * 100:.0f}% | {vs_pipe} | {vs50} | {vs99} |")
    return lines


def throughput_table(results: dict[tuple[str, int], dict[str, Any]], sizes: list[int]
                     ) -> list[str]:
    head = "| | " + " | ".join(f"{s} B msgs/s | vs best baseline" for s in sizes) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(sizes)]
    best: dict[int, float] = {}
    for s in sizes:
        rates = [results[(i, s)]["rate"] for i in THROUGHPUT_IMPLS
                 if not i.startswith("aio") and results.get((i, s))]
        best[s] = max(rates) if rates else 0.0
    for impl in THROUGHPUT_IMPLS:
        if not any(k[0] == impl for k in results):
            continue  # not run (--only)
        cells = []
        for s in sizes:
            r = results.get((impl, s))
            if r is None:
                cells.append("failed | -")
            else:
                cells.append(f"{r['rate']:,.0f} | {ratio(r['rate'], best[s])}")
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    return lines


def idle_table(results: dict[str, float | None]) -> list[str]:
    lines = ["| consumer, idle | CPU (% of a core) |", "|---|---:|"]
    for impl, cpu in results.items():
        lines.append(f"| {impl} | {'failed' if cpu is None else f'{cpu * 100:.2f}'} |")
    return lines


def plot(results: dict[tuple[str, int, int], dict[str, Any]], size: int, rate: int,
         path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    top_us = 30_000.0
    for impl in LATENCY_IMPLS:
        r = results.get((impl, size, rate))
        if r is None:
            continue
        pts = [(1.0 / (1.0 - p / 100.0), max(v, 1) / 1000) for p, v in r["plot"] if p >= 50]
        label = impl
        if pts[0][1] > top_us:
            label += f" (off the chart: p50 {pts[0][1] / 1000:.0f} ms)"
        style = "-" if impl.startswith("aio") else "--"
        ax.plot([x for x, _ in pts], [y for _, y in pts], style, marker="o", markersize=3,
                label=label)
    ticks = [2, 10, 100, 1000, 10000]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1, top_us)
    ax.set_xticks(ticks)
    ax.set_xticklabels(["50%", "90%", "99%", "99.9%", "99.99%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("one-way latency (µs)")
    ax.set_title(f"one-way latency, {size} B at {rate // 1000}k msgs/s, two processes")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


BEGIN = "<!-- latency-bench:begin -->"
END = "<!-- latency-bench:end -->"


def write_docs(doc: str, body: list[str]) -> None:
    text = "# Performance\n"
    if os.path.exists(doc):
        with open(doc) as f:
            text = f.read()
    block = "\n".join([BEGIN, *body, END])
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        text = pre + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(doc, "w") as f:
        f.write(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="per latency case, split over the repetitions")
    parser.add_argument("--repeats", type=int, default=2,
                        help="interleaved repetitions per latency case (the best p99 counts)")
    parser.add_argument("--warmup", type=float, default=0.3)
    parser.add_argument("--tput-seconds", type=float, default=1.5, help="per throughput case")
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--only", nargs="*", help="contenders to run (default: all)")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["latency", "throughput", "idle"])
    parser.add_argument("--dir", default=None, help="where to put the queues")
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    parser.add_argument("--write-docs", action="store_true",
                        help="write the tables into docs/performance.md and the plot")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.tput_seconds, args.repeats = 0.3, 0.1, 0.3, 1
    root = args.dir or tempfile.mkdtemp(prefix="aiochronicle-lat-")
    os.makedirs(root, exist_ok=True)

    def wanted(impl: str) -> bool:
        if args.only and impl not in args.only:
            return False
        if impl == "iceoryx2":
            try:
                import iceoryx2  # noqa: F401
            except ImportError:
                print("iceoryx2 is not installed: skipped", file=sys.stderr)
                return False
        if impl == "zmq":
            try:
                import zmq  # noqa: F401
            except ImportError:
                print("pyzmq is not installed: skipped", file=sys.stderr)
                return False
        return True

    common = {"pin": not args.no_pin, "loop": args.loop}
    load0 = os.getloadavg()[0]
    print(f"aiochronicle {ac.__version__}: two-process latency and throughput; "
          f"{os.cpu_count()} CPUs; loop {args.loop}; load average {load0:.2f}; "
          f"queues in {root}", flush=True)
    case = 0
    out: list[str] = []
    lat: dict[tuple[str, int, int], dict[str, Any]] = {}
    t_start = time.monotonic()
    try:
        if "latency" not in args.skip:
            for size in (40, 256):
                for rate in (10_000, 100_000):
                    # interleaved repetitions; each contender keeps its best by p99,
                    # so that a burst of other work on this shared machine does not
                    # decide a row
                    for rep_no in range(args.repeats):
                        for impl in LATENCY_IMPLS:
                            if not wanted(impl):
                                continue
                            case += 1
                            r = run_case(Spec(impl, "latency", size, rate,
                                              args.seconds / args.repeats, args.warmup,
                                              **common), root, case)
                            best = lat.get((impl, size, rate))
                            if r is not None and (best is None
                                                  or r["p"][99.0] < best["p"][99.0]):
                                lat[(impl, size, rate)] = r
                            p = r["p"] if r else None
                            print(f"  {size:>4} B {rate // 1000:>3}k/s {impl:<20} #{rep_no} "
                                  + (f"p50 {fmt_us(p[50.0]):>6} p99 {fmt_us(p[99.0]):>6} "
                                     f"p99.9 {fmt_us(p[99.9]):>6} "
                                     f"max {fmt_us(r['max']):>6} µs lost {r['lost']}"
                                     if r and p else "failed"), flush=True)
                    lines = latency_table(lat, size, rate)
                    print("\n".join(lines), flush=True)
                    out += ["", *lines]
        tput: dict[tuple[str, int], dict[str, Any]] = {}
        sizes = [40, 1024]
        if "throughput" not in args.skip:
            for size in sizes:
                for impl in THROUGHPUT_IMPLS:
                    if not wanted(impl):
                        continue
                    case += 1
                    spec = Spec(impl, "throughput", size, 0, args.tput_seconds, 0.0,
                                max_msgs=(1 << 30) // size, **common)
                    r = run_case(spec, root, case)
                    if r is not None:
                        tput[(impl, size)] = r
                    print(f"  throughput {size:>5} B {impl:<14} "
                          + (f"{r['rate']:>12,.0f} msgs/s" if r else "failed"), flush=True)
            lines = throughput_table(tput, sizes)
            print("\n".join(lines), flush=True)
            out += ["", "End-to-end throughput, producer process to consumer process:", "",
                    *lines]
        idle: dict[str, float | None] = {}
        if "idle" not in args.skip:
            quiet = [i for i in IDLE_QUIET if wanted(i)]
            ramp = 1.0 if args.quick else 6.5
            window = 0.5 if args.quick else 2.0
            with contextlib.ExitStack():
                threads = []
                res: dict[str, dict[str, Any] | None] = {}
                for impl in quiet:  # together: each sleeps most of the time
                    case += 1
                    spec = Spec(impl, "idle", 40, 0, 0.0, 0.0, ramp=ramp, window=window,
                                pin=False, loop=args.loop)

                    def job(spec: Spec = spec, n: int = case) -> None:
                        res[spec.impl] = run_case(spec, root, n)

                    threads.append(threading.Thread(target=job))
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                for impl in quiet:
                    r = res.get(impl)
                    idle[impl] = r["cpu"] if r else None
            for impl in IDLE_BUSY:  # one at a time: each takes a whole core
                if not wanted(impl):
                    continue
                case += 1
                r = run_case(Spec(impl, "idle", 40, 0, 0.0, 0.0, ramp=0.3, window=1.0,
                                  **common), root, case)
                idle[impl] = r["cpu"] if r else None
            lines = idle_table(idle)
            print("\n".join(lines), flush=True)
            out += ["", "Consumer CPU while nothing is sent (after its back-off settled):", "",
                    *lines]
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    load1 = os.getloadavg()[0]
    print(f"total {time.monotonic() - t_start:.0f} s; load average {load1:.2f}")
    if args.write_docs:
        docs = os.path.join(os.path.dirname(__file__), "..", "docs")
        png = "latency-40B-100k.png"
        plotted = plot(lat, 40, 100_000, os.path.join(docs, png))
        body = [f"Measured by `bench/latency.py` on {time.strftime('%Y-%m-%d')}, "
                f"{os.cpu_count()} vCPUs, loop {args.loop}, {args.seconds:g} s per latency "
                f"case in {args.repeats} interleaved repetitions (each contender's best p99 "
                f"shown), the machine's load average {load0:.1f} at the start and {load1:.1f} "
                "at the end (other work was running: the tails above p99 are mostly "
                "scheduling).  One-way latency in µs; ratios against iceoryx2 in the same "
                "run:", *out]
        if plotted:
            body += ["", f"![one-way latency, 40 B at 100k msgs/s]({png})"]
        _report.replace_block(_report.PERFORMANCE, "latency-bench", body)
        print("wrote docs/performance.md" + (f" and docs/{png}" if plotted else ""))


if __name__ == "__main__":
    main()
