"""Market data gateway: publishes ticks on the ``md`` queue through a
``MarketData`` method writer (no reader: the first service of the chain).

Usage: python gateway.py MD_QUEUE TICKS RATE_PER_S
"""

from __future__ import annotations

import asyncio
import random
import sys

from messages import SYMBOLS, MarketData, Tick, run_async, say

import aiochronicle as ac


async def main(md_path: str, ticks: int, rate: float) -> None:
    with ac.open_queue(md_path) as md:
        feed = md.appender().method_writer(MarketData)  # typed as MarketData
        rnd = random.Random(7)
        mids = dict.fromkeys(SYMBOLS, 1.0)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for seq in range(ticks):
            sym = SYMBOLS[seq % len(SYMBOLS)]
            mid = mids[sym] = round(mids[sym] + rnd.choice((-1, 1)) * 0.0001, 5)
            feed.on_tick(Tick(sym, round(mid - 0.00005, 5), round(mid + 0.00005, 5), seq))
            if seq % 20 == 19:  # pace the feed: 20 ticks, then wait for their slot
                await asyncio.sleep(max(0.0, start + (seq + 1) / rate - loop.time()))
        feed.end_of_day(ticks)
        say(f"gateway:  published {ticks:,} ticks at ~{rate:,.0f}/s to {md_path}")


if __name__ == "__main__":
    run_async(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
