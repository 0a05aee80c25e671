"""Replication benchmark: write-to-replica-read latency and replicated throughput,
with the same figures for local (unreplicated) reading beside them, in one run.

Run:  .venv/bin/python bench/replication.py [--seconds S] [--pauser notify|busy|balanced]
      [--quick] [--write-docs]

Latency: a writer process appends 40-byte excerpts at 10k/s and 100k/s; each
starts with its send time (``CLOCK_MONOTONIC`` ns, taken just before
``append``) and a sequence number.  The writer paces itself by sleeping (timer
slack 1 ns) until 25 µs before each send and spinning the rest, so at 10k/s it
leaves most of a CPU to the others (at 100k/s it spins).

* local: a reader process tails the writer's queue;
* replicated: a source process (``ReplicationSource``) serves that queue over
  TCP on 127.0.0.1 to a sink process (``ReplicationSink``, uvloop) that writes
  each excerpt to its own queue at the same index, and the reader process tails
  the *sink's* queue: write -> source -> TCP -> sink -> reader.

The reader takes the time as soon as it has the excerpt; the first
``--warmup`` seconds are left out; percentiles come from the sorted samples.
Both the source and the reader wait with ``--pauser`` (default ``notify``:
parked, woken within microseconds by the commits of aiochronicle appenders and
of the sink; ``busy`` spins, a core each).

Throughput:

* live: the writer appends flat out (``append_packed``, 1024 per call); the
  reader counts until the last one arrives (local: from the writer's queue;
  replicated: from the sink's);
* catch-up: the source queue already holds the excerpts when the sink connects
  (a sink days behind); replicated = sink started (connection and handshake
  included) -> last excerpt written at the sink; local = one reader reading
  the same backlog with ``read_many``.

This 2-vCPU VM is shared and noisy: compare figures within one run.
``--write-docs`` puts the tables into docs/performance.md (the
``replication-bench`` block) and plots docs/replication.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import _report  # bench/_report.py (this directory is on sys.path)

import aiochronicle as ac

HEAD = struct.Struct("<qq")  # send time (ns), sequence (-1: stop)
STOP = -1
SIZE = 40
SECRET = b"bench-secret"
now_ns = time.monotonic_ns
ROLL = ac.RollCycles.HUGE_DAILY  # one cycle for the whole run
PAUSERS: dict[str, Callable[[], ac.Pauser]] = {
    "busy": ac.Pauser.busy,
    "balanced": ac.Pauser.balanced,
    "notify": ac.Pauser.notify,
}
CTX = mp.get_context("fork")


@dataclass
class Case:
    root: str
    replicated: bool
    pauser: str
    port: int = 0

    @property
    def src(self) -> str:
        return os.path.join(self.root, "src")

    @property
    def sink(self) -> str:
        return os.path.join(self.root, "sink")

    @property
    def read_path(self) -> str:
        return self.sink if self.replicated else self.src


def quiet() -> None:
    """No cyclic GC passes mid-run (the same in every process)."""
    gc.collect()
    gc.freeze()
    gc.disable()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_until_term(main: Callable[[asyncio.Event], Any]) -> None:
    import uvloop

    async def wrapper() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await main(stop)

    uvloop.run(wrapper())


# -- the processes -----------------------------------------------------------------------------

def source_proc(case: Case, ready: Any) -> None:
    quiet()

    async def main(stop: asyncio.Event) -> None:
        async with ac.ReplicationSource(case.src, port=case.port, secret=SECRET,
                                        pauser=PAUSERS[case.pauser]):
            ready.set()
            await stop.wait()

    _run_until_term(main)


def sink_proc(case: Case, ready: Any, out: Connection | None, total: int) -> None:
    """Mirror the source; with ``out``, time the catch-up of ``total`` excerpts."""
    quiet()

    async def main(stop: asyncio.Event) -> None:
        # the catch-up clock starts before the sink connects: once connected, the
        # source streams at once, and much of the backlog can be written here
        # before this coroutine runs again
        t0 = now_ns()
        sink = ac.ReplicationSink(case.sink, port=case.port, secret=SECRET)
        async with sink:
            await sink.wait_connected(30)
            ready.set()
            if out is not None:
                await sink.wait_for_index(sink.source_last_index, 600)
                t1 = now_ns()
                out.send({"n": sink.excerpts_written, "ns": t1 - t0})
            await stop.wait()

    _run_until_term(main)


def reader_proc(case: Case, mode: str, warmup: int, ready: Any, out: Connection) -> None:
    quiet()
    q = ac.open_queue(case.read_path, roll_cycle=ROLL)
    t = q.tailer(pauser=PAUSERS[case.pauser]())
    unpack = HEAD.unpack_from
    if mode == "latency":
        lat = array("q")
        add = lat.append
        rb = t.read_blocking
        ready.set()
        while True:
            ex = rb()
            if ex is None:
                continue
            now = now_ns()
            sent, seq = unpack(ex.payload)
            if seq < 0:
                break
            if seq >= warmup:
                add(now - sent)
        out.send(lat.tobytes())
        return
    # throughput: count whole batches until the stop excerpt
    ready.set()
    n = 0
    first = 0
    while True:
        b = t.read_many(8192, 1 << 22)
        k = len(b)
        if not k:
            ex = t.read_blocking(1.0)  # nothing yet: wait with the pauser
            if ex is None:
                continue
            sent, seq = unpack(ex.payload)
            if not n:
                first = sent
            if seq < 0:
                out.send({"n": n, "ns": now_ns() - first})
                return
            n += 1
            continue
        d, o = b.data, b.offsets
        if not n:
            first = unpack(d, o[0])[0]
        if unpack(d, o[k - 1])[1] < 0:
            out.send({"n": n + k - 1, "ns": now_ns() - first})
            return
        n += k


SLEEP_ABOVE_NS = 40_000
SPIN_LAST_NS = 25_000


def _fine_sleep() -> None:
    """Timer slack of 1 ns (default 50 µs), so short sleeps end on time."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK


def writer_proc(case: Case, mode: str, rate: float, count: int, go: Any) -> None:
    quiet()
    q = ac.open_queue(case.src, roll_cycle=ROLL)
    a = q.appender()
    pad = bytes(SIZE - HEAD.size)
    pack = HEAD.pack
    if go is not None and not go.wait(60):
        raise SystemExit("the reader never became ready")
    if mode == "latency":
        _fine_sleep()
        interval = 1e9 / rate
        t0 = now_ns() + 2_000_000
        append = a.append
        sleep = time.sleep
        for i in range(count):
            due = t0 + int(i * interval)
            gap = due - now_ns()
            if gap > SLEEP_ABOVE_NS:  # leave the CPU to the others, spin the end
                sleep((gap - SPIN_LAST_NS) / 1e9)
            while now_ns() < due:
                pass
            append(pack(now_ns(), i) + pad)
    else:
        per = 1024
        body = bytearray((pack(0, 0) + pad) * per)
        offsets = array("q", range(0, SIZE * (per + 1), SIZE))
        done = 0
        pack_into = HEAD.pack_into
        while done < count:
            pack_into(body, 0, now_ns(), done)
            a.append_packed(body, offsets)
            done += per
    a.append(pack(now_ns(), STOP) + pad)
    q.close()


# -- one case ----------------------------------------------------------------------------------

def _start(target: Callable[..., None], *args: Any) -> Any:
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()


def _prepare(case: Case) -> None:
    shutil.rmtree(case.root, ignore_errors=True)
    os.makedirs(case.root)
    ac.open_queue(case.src, roll_cycle=ROLL).close()
    case.port = _free_port()


def _replication(case: Case, sink_out: Connection | None = None,
                 total: int = 0) -> list[Any]:
    """Start the source and sink of ``case``; return them once connected."""
    procs = []
    ready = CTX.Event()
    procs.append(_start(source_proc, case, ready))
    if not ready.wait(60):
        _stop(procs)
        raise SystemExit("the source did not start")
    ready = CTX.Event()
    procs.append(_start(sink_proc, case, ready, sink_out, total))
    if not ready.wait(60):
        _stop(procs)
        raise SystemExit("the sink did not connect")
    return procs


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_latency(case: Case, rate: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    _prepare(case)
    count = int(rate * (seconds + warmup_s))
    procs = _replication(case) if case.replicated else []
    names = ["source", "sink"] if case.replicated else []
    try:
        ready = CTX.Event()
        rx, tx = CTX.Pipe(duplex=False)
        procs.append(_start(reader_proc, case, "latency", int(rate * warmup_s), ready, tx))
        w = _start(writer_proc, case, "latency", rate, count, ready)
        procs.append(w)
        names += ["reader", "writer"]
        if not ready.wait(60):
            raise SystemExit("the reader did not start")
        cpu0 = [_cpu_seconds(p.pid) for p in procs]
        t0 = time.monotonic()
        if not rx.poll(seconds * 20 + 120):
            raise SystemExit("no result from the reader")
        cpu1 = [_cpu_seconds(p.pid) for p in procs]
        wall = time.monotonic() - t0
        raw = rx.recv()
        w.join(30)
    finally:
        _stop(procs)
    cpu = {n: (b - a) / wall for n, a, b in zip(names, cpu0, cpu1, strict=True)}
    lat = array("q")
    lat.frombytes(raw)
    s = sorted(lat)

    def pct(p: float) -> float:
        return float(s[min(len(s) - 1, int(p / 100 * len(s)))]) if s else float("nan")

    return {"n": len(s), "p50": pct(50), "p99": pct(99), "p99.9": pct(99.9),
            "max": float(s[-1]) if s else float("nan"), "cpu": cpu}


def run_live_throughput(case: Case, total: int) -> float:
    _prepare(case)
    procs = _replication(case) if case.replicated else []
    try:
        ready = CTX.Event()
        rx, tx = CTX.Pipe(duplex=False)
        procs.append(_start(reader_proc, case, "throughput", 0, ready, tx))
        procs.append(_start(writer_proc, case, "throughput", 0.0, total, ready))
        if not rx.poll(600):
            raise SystemExit("no result from the reader")
        res = rx.recv()
    finally:
        _stop(procs)
    return float(res["n"] / (res["ns"] / 1e9))


def run_catch_up(case: Case, total: int) -> float:
    _prepare(case)
    writer_proc(case, "throughput", 0.0, total, None)  # the backlog, before any sink
    if not case.replicated:
        q = ac.open_queue(case.src, roll_cycle=ROLL)
        t = q.tailer()
        n = 0
        t0 = now_ns()
        while True:
            b = t.read_many(8192, 1 << 22)
            if not len(b):
                break
            n += len(b)
        ns = now_ns() - t0
        q.close()
        return n / (ns / 1e9)
    rx, tx = CTX.Pipe(duplex=False)
    procs = _replication(case, tx, total)
    try:
        if not rx.poll(600):
            raise SystemExit("no result from the sink")
        res = rx.recv()
    finally:
        _stop(procs)
    return float(res["n"] / (res["ns"] / 1e9))


# -- report ------------------------------------------------------------------------------------

def us(ns: float) -> str:
    return f"{ns / 1000:.1f}"


LatRows = list[tuple[int, dict[str, Any], dict[str, Any]]]
Tput = dict[tuple[str, bool], float]


def tables(rows: LatRows, tput: Tput) -> list[str]:
    lat = []
    for rate, loc, rep in rows:
        for name, r in (("local", loc), ("replicated", rep)):
            lat.append([f"{rate:,}/s", name, us(r["p50"]), us(r["p99"]), us(r["p99.9"]),
                        us(r["max"]), f"{r['n']:,}"])
        lat.append([f"{rate:,}/s", "**replicated / local**",
                    *(_report.ratio(rep[k], loc[k], 1) for k in ("p50", "p99", "p99.9", "max")),
                    ""])
    cpu = []
    for rate, loc, rep in rows:
        for name, r in (("local", loc), ("replicated", rep)):
            c = r["cpu"]
            cpu.append([f"{rate:,}/s", name,
                        *(f"{c[k]:.0%}" if k in c else "-"
                          for k in ("writer", "source", "sink", "reader")),
                        f"{sum(c.values()):.0%}"])
    tp = []
    for kind in ("live", "catch-up"):
        loc, rep = tput[kind, False], tput[kind, True]
        tp.append([kind, _report.rate(loc), _report.rate(rep), _report.ratio(rep, loc)])
    return [f"Write-to-read latency, {SIZE} B, µs (local = reader on the writer's queue; "
            "replicated = reader on the sink's queue)", "",
            *_report.table(["rate", "path", "p50", "p99", "p99.9", "max", "samples"], lat,
                           "llrrrrr"),
            "", "CPU used during the latency runs (share of one CPU, of the machine's "
            f"{os.cpu_count()})", "",
            *_report.table(["rate", "path", "writer", "source", "sink", "reader", "total"],
                           cpu, "llrrrrr"),
            "", f"Throughput, {SIZE} B, msgs/s", "",
            *_report.table(["run", "local", "replicated", "replicated / local"], tp)]


def plot(rows: LatRows, tput: Tput, name: str) -> bool:
    plt = _report.pyplot()
    if plt is None:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=_report.FIGSIZE,
                                      gridspec_kw={"width_ratios": [2, 1]})
    pcts = ("p50", "p99", "p99.9")
    labels = [f"{rate // 1000}k/s\n{p}" for rate, _l, _r in rows for p in pcts]
    width = 0.38
    for k, (name_, color) in enumerate((("local", "#9ecae1"), ("replicated", "#3182bd"))):
        xs = [i + (k - 0.5) * width for i in range(len(labels))]
        vals = [(loc if k == 0 else rep)[p] / 1000 for _rate, loc, rep in rows for p in pcts]
        left.bar(xs, vals, width, label=name_, color=color)
    left.set_xticks(range(len(labels)))
    left.set_xticklabels(labels, fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("write-to-read latency, µs (log)")
    left.set_title(f"latency, {SIZE} B", fontsize=10)
    left.grid(True, axis="y", which="both", alpha=0.3)
    left.legend(fontsize=8)
    kinds = ("live", "catch-up")
    for k, (rep, color) in enumerate(((False, "#9ecae1"), (True, "#3182bd"))):
        xs = [i + (k - 0.5) * width for i in range(len(kinds))]
        right.bar(xs, [tput[kind, rep] / 1e6 for kind in kinds], width, color=color)
    right.set_xticks(range(len(kinds)))
    right.set_xticklabels(kinds, fontsize=8)
    right.set_ylabel("million msgs/s")
    right.set_title("throughput", fontsize=10)
    right.grid(True, axis="y", alpha=0.3)
    fig.suptitle("replication over TCP on 127.0.0.1 beside reading the queue locally")
    _report.save(fig, name)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per rate")
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds left out first")
    ap.add_argument("--rates", default="10000,100000", help="comma-separated msgs/s")
    ap.add_argument("--pauser", choices=sorted(PAUSERS), default="notify",
                    help="how the source and the reader wait (default notify)")
    ap.add_argument("--throughput-msgs", type=int, default=1_000_000,
                    help="excerpts per throughput run (default 1M)")
    ap.add_argument("--dir", help="where to put the queues (default: a temporary directory)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 0.5 s per rate, 100k excerpts per throughput run")
    ap.add_argument("--write-docs", action="store_true",
                    help="write the tables into docs/performance.md and docs/replication.png")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.throughput_msgs = 0.5, 0.2, 100_000
    base = args.dir or tempfile.mkdtemp(prefix="aiochronicle-repl-bench-")
    rates = [int(r) for r in args.rates.split(",")]
    load0 = _report.load()
    t_start = time.monotonic()
    print(f"# replication bench: {SIZE} B, pauser {args.pauser}, {os.cpu_count()} CPUs, "
          f"load {load0:.2f}, python {sys.version.split()[0]}", flush=True)
    rows: LatRows = []
    for rate in rates:
        res = {}
        for replicated in (False, True):
            case = Case(os.path.join(base, "lat"), replicated, args.pauser)
            res[replicated] = run_latency(case, rate, args.seconds, args.warmup)
            print(f"  {rate}/s {'replicated' if replicated else 'local'}: {res[replicated]}",
                  flush=True)
        rows.append((rate, res[False], res[True]))
    tput: Tput = {}
    for kind, fn in (("live", run_live_throughput), ("catch-up", run_catch_up)):
        for replicated in (False, True):
            case = Case(os.path.join(base, "tput"), replicated, args.pauser)
            tput[kind, replicated] = fn(case, args.throughput_msgs)
            print(f"  {kind} {'replicated' if replicated else 'local'}: "
                  f"{tput[kind, replicated]:,.0f} msgs/s", flush=True)
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    load1 = _report.load()

    lines = tables(rows, tput)
    print()
    print("\n".join(lines))
    print(f"\ntotal {time.monotonic() - t_start:.0f} s; load average {load1:.2f}")
    if args.write_docs:
        png = "replication.png"
        body = [_report.measured_by(
                    "replication.py", load0, load1,
                    [f"pauser `{args.pauser}` for the source and the reader",
                     f"{args.seconds:g} s per rate after {args.warmup:g} s of warm-up",
                     f"{args.throughput_msgs:,} excerpts per throughput run"]), "", *lines]
        if plot(rows, tput, png):
            body += ["", f"![replicated against local latency and throughput]({png})"]
        else:
            _report.skipped_plot(png)
        _report.replace_block(_report.PERFORMANCE, "replication-bench", body)
        print("wrote docs/performance.md" + (f" and docs/{png}" if "![" in body[-1] else ""))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
