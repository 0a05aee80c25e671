"""What exactly-once costs a service: ``await Service.run()`` against the
plain ``await reader.run()`` of the same read-process-write.

Run:  .venv/bin/python bench/service.py [--count N] [--rounds R] [--cpu]

One process, uvloop.  An input queue (sourceId 1) holds ``count`` calls of a
5-field Struct written with message history; the handler writes one call per
input to an output queue (sourceId 2, history carried forward), as a pipeline
stage does.  Each round, in turn:

* ``plain``: ``tailer.method_reader(handler)`` and ``await reader.run(until_end=True)``,
  the handler's writer straight on the output queue's appender: at least once
  (a restart from a named tailer's position may write an output again);
* ``plain, no history``: the same without message history (neither read
  nor written): what history costs (exactly-once needs it);
* ``exactly once``: ``ac.Service(...).run(until_end=True)``, ``stateless=True``;
* ``exactly once + snapshots``: the same with a snapshot every 1,000 inputs.

Each case starts from empty output queues and is timed from opening its
queues (which ``Service.run()`` does, with its recovery: here a look at empty
outputs) to handling the last input; the rates are the best of the
rounds, and the ratios are against ``plain`` of the same run (compare ratios,
not absolute rates, across runs on this noisy machine).  ``--cpu`` divides by
this thread's CPU time instead of the wall clock.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from pathlib import Path
from typing import Protocol

import _report  # bench/_report.py (this directory is on sys.path)
import msgspec
import uvloop

import aiochronicle as ac


class Quote(msgspec.Struct):
    symbol: str
    bid: float
    ask: float
    size: int
    ts: int


class QuoteListener(Protocol):
    def on_quote(self, quote: Quote) -> None: ...


class Relay:
    """Writes each quote on (a pipeline stage's read-process-write)."""

    def __init__(self, out: QuoteListener) -> None:
        self.out = out
        self.n = 0

    def on_quote(self, quote: Quote) -> None:
        self.n += 1
        self.out.on_quote(quote)

    def snapshot(self) -> object:
        return self.n

    def restore(self, state: int) -> None:
        self.n = state


CLOCK = time.perf_counter


def _fresh(d: Path, name: str) -> Path:
    p = d / name
    shutil.rmtree(p, ignore_errors=True)
    with ac.open_queue(p, source_id=2):
        pass
    return p


def plain(inp: Path, out: Path, count: int, history: bool = True) -> float:
    async def go() -> float:
        t0 = CLOCK()  # opening the queues counted, as Service.run() opens them
        with ac.open_queue(inp) as iq, ac.open_queue(out) as oq:
            relay = Relay(oq.appender().method_writer(QuoteListener, record_history=history))
            reader = iq.tailer().method_reader(relay, history=history)
            n = await reader.run(until_end=True)
        dt = CLOCK() - t0
        assert n == count == relay.n, (n, relay.n)
        return dt
    return uvloop.run(go())


def exactly_once(inp: Path, out: Path, count: int, snap: Path | None) -> float:
    svc = ac.Service("relay", Relay, [ac.ServiceInput(str(inp), 1, (QuoteListener,))],
                     [ac.ServiceOutput("out", str(out), QuoteListener, 2)],
                     snapshots=ac.SnapshotPolicy(str(snap), every_inputs=1000,
                                                 every_seconds=None) if snap else None,
                     stateless=snap is None)

    async def go() -> float:
        t0 = CLOCK()
        stats = await svc.run(until_end=True)
        dt = CLOCK() - t0
        assert stats.inputs_handled == count == stats.outputs_written, stats
        return dt
    return uvloop.run(go())


def main(argv: list[str] | None = None) -> int:
    global CLOCK
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="this thread's CPU time, not wall time")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    if args.cpu:
        CLOCK = time.thread_time
    d = Path(tempfile.mkdtemp(prefix="bench-service-", dir=args.dir))
    load0 = _report.load()
    try:
        inp = d / "in"
        with ac.open_queue(inp, source_id=1) as q:
            w = q.appender().method_writer(QuoteListener)
            quote = Quote("EURUSD", 1.08421, 1.08424, 1_000_000, 1_700_000_000_000_000_000)
            for _ in range(args.count):
                w.on_quote(quote)
        best: dict[str, float] = {}
        cases = {
            "plain, no history": lambda: plain(inp, _fresh(d, "o0"), args.count, False),
            "plain reader.run()": lambda: plain(inp, _fresh(d, "o1"), args.count),
            "exactly once": lambda: exactly_once(inp, _fresh(d, "o2"), args.count, None),
            "exactly once + snapshots": lambda: exactly_once(
                inp, _fresh(d, "o3"), args.count, _fresh(d, "snap")),
        }
        for _ in range(args.rounds):
            for name, case in cases.items():
                gc.collect()
                dt = case()
                best[name] = min(best.get(name, dt), dt)
        base = args.count / best["plain reader.run()"]
        print(_report.measured_by("service.py", load0, _report.load(),
                                  [f"best of {args.rounds}", f"{args.count:,} inputs, one "
                                   f"output each", "CPU time" if args.cpu else "wall time"]))
        rows = [(name, _report.rate(args.count / dt), _report.ratio(args.count / dt, base))
                for name, dt in best.items()]
        print("\n".join(_report.table(["case", "inputs/s", "vs plain"], rows)))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
