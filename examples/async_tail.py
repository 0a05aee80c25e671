"""Tail a queue with asyncio: a producer process, a live async consumer, a replay.

Run:  python examples/async_tail.py [QUEUE_DIR]

* A separate producer process appends 2,000 small JSON ticks, a few every
  millisecond, then a final ``{"done": true}``.
* The consumer tails them live with ``async for`` on uvloop (when installed)
  using ``Pauser.notify()``: parked between ticks, it is woken by the producer's
  commits, and costs next to no CPU while nothing comes.
* Meanwhile a heartbeat task keeps running on the same loop.
* Then a replay job reads the whole queue again from the start with
  ``until_end()`` and stops at the end, and a read under ``asyncio.timeout()``
  shows that a timed-out read loses nothing.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time

import aiochronicle as ac

TICKS = 2_000


def producer(path: str) -> None:
    """Append TICKS ticks, a few per millisecond (runs in its own process)."""
    with ac.open_queue(path) as queue:
        appender = queue.appender()
        for i in range(TICKS):
            tick = {"seq": i, "symbol": "EURUSD", "bid": 1.1 + i * 1e-5, "sent": time.time_ns()}
            appender.append(json.dumps(tick).encode())
            if i % 4 == 3:
                time.sleep(0.001)
        appender.append(b'{"done": true}')


async def heartbeat(beats: list[float]) -> None:
    while True:
        beats.append(time.monotonic())
        await asyncio.sleep(0.05)


async def main(path: str) -> None:
    async with ac.open_queue(path) as queue:
        tailer = queue.tailer(pauser=ac.Pauser.notify())
        tailer.to_end()  # only what is written from now on

        proc = mp.get_context("spawn").Process(target=producer, args=(path,))
        proc.start()
        beats: list[float] = []
        hb = asyncio.create_task(heartbeat(beats))

        # live: every tick in order, as it is committed
        count = 0
        worst_us = 0.0
        async for excerpt in tailer:
            msg = json.loads(excerpt.payload)
            if msg.get("done"):
                break
            assert msg["seq"] == count
            count += 1
            worst_us = max(worst_us, (time.time_ns() - msg["sent"]) / 1e3)
        hb.cancel()
        await asyncio.gather(hb, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, proc.join)
        print(f"live: {count} ticks in order; worst delay {worst_us:.0f} µs; "
              f"the heartbeat ran {len(beats)} times meanwhile; "
              f"pauser {tailer.pauser.statistics()}")

        # replay: from the start to the end as it is now, then stop
        replay = queue.tailer()
        n = sum([1 async for _ in replay.until_end()])
        print(f"replay: {n} excerpts, up to index {queue.last_index:#x}")

        # a read that times out loses nothing: the next read gets the excerpt
        try:
            async with asyncio.timeout(0.01):
                await replay.read()
        except TimeoutError:
            print("read timed out (nothing new), as asked")
        index = queue.appender().append(b"late")
        excerpt = await replay.read()
        assert excerpt == ac.Excerpt(index, b"late")
        print(f"after the timeout the next read returned {excerpt.payload!r} at {index:#x}")
        await tailer.aclose()


def run(path: str) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(main(path))
    else:
        uvloop.run(main(path))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory(prefix="aiochronicle-async-") as tmp:
            run(os.path.join(tmp, "ticks"))
