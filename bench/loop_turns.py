"""How long one turn of the event loop takes while tailers wait on it.

Run:  .venv/bin/python bench/loop_turns.py [--turns N] [--readers K]

A busy-waiting tailer spins in native slices of at most ``pauser.spin_slice``
(50 µs) between two turns of the loop, so other tasks keep running.  This
measures the gap between two turns of a task that only yields
(``await asyncio.sleep(0)``), on uvloop, with no tailer waiting (the baseline),
then with K tailers waiting with each pauser, and prints the median and p99
gaps and the ratio of each median to the baseline's, in the same run.  It also
prints the CPU share of a loop whose K tailers are parked (idle).

This used to be a timed assertion in the test suite; speed lives here.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import uvloop

import aiochronicle as ac

PAUSERS = {
    "busy": ac.Pauser.busy,
    "balanced": ac.Pauser.balanced,
    "yielding": ac.Pauser.yielding,
    "sleepy": ac.Pauser.sleepy,
    "notify": ac.Pauser.notify,
}


async def gaps(path: str, pauser: str | None, readers: int, turns: int) -> list[float]:
    async with ac.open_queue(path) as q:
        q.appender()
        tasks = [] if pauser is None else [
            asyncio.create_task(q.tailer(pauser=PAUSERS[pauser]()).read())
            for _ in range(readers)]
        await asyncio.sleep(0.2)  # let the pausers reach their steady phase
        out: list[float] = []
        last = time.perf_counter()
        for _ in range(turns):
            await asyncio.sleep(0)
            now = time.perf_counter()
            out.append(now - last)
            last = now
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    out.sort()
    return out


async def idle_cpu(path: str, pauser: str, readers: int) -> float:
    async with ac.open_queue(path) as q:
        q.appender()
        tasks = [asyncio.create_task(q.tailer(pauser=PAUSERS[pauser]()).read())
                 for _ in range(readers)]
        await asyncio.sleep(3.2)  # past the spin phase and the back-off
        c0, w0 = time.process_time(), time.monotonic()
        await asyncio.sleep(1.5)
        cpu = (time.process_time() - c0) / (time.monotonic() - w0)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=20_000)
    ap.add_argument("--readers", type=int, default=2)
    args = ap.parse_args()
    print(f"| waiting tailers ({args.readers}) | median turn µs | p99 µs | median vs none |"
          " idle CPU % |")
    print("|---|---:|---:|---:|---:|")
    base = None
    for name in (None, *PAUSERS):
        with tempfile.TemporaryDirectory() as d:
            g = uvloop.run(gaps(d, name, args.readers, args.turns))
        med, p99 = g[len(g) // 2], g[int(len(g) * 0.99)]
        base = med if base is None else base
        cpu = ""
        if name is not None:
            with tempfile.TemporaryDirectory() as d:
                cpu = f"{uvloop.run(idle_cpu(d, name, args.readers)) * 100:.2f}"
        print(f"| {name or 'none'} | {med * 1e6:.1f} | {p99 * 1e6:.1f} | {med / base:.2f}x "
              f"| {cpu} |")


if __name__ == "__main__":
    main()
