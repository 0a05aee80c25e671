"""Market data gateway: for each burst the feed asks for, publishes that many
ticks on the ``md`` queue through a ``MarketData`` method writer (one input,
several outputs).  Each symbol's mid walks up or down by a step drawn from the
tick's sequence number, so the same bursts give the same ticks: the gateway is
deterministic, as a service must be.
"""

from __future__ import annotations

import random

from messages import SYMBOLS, MarketData, Tick, say


class Gateway:
    """Handles ``Feed`` calls; its state is each symbol's mid."""

    def __init__(self, md: MarketData) -> None:
        self.md = md
        self.mids = dict.fromkeys(SYMBOLS, 1.0)

    def on_burst(self, first_seq: int, count: int) -> None:
        for seq in range(first_seq, first_seq + count):
            sym = SYMBOLS[seq % len(SYMBOLS)]
            step = random.Random(seq).choice((-1, 1)) * 0.0001
            mid = self.mids[sym] = round(self.mids[sym] + step, 5)
            self.md.on_tick(Tick(sym, round(mid - 0.00005, 5), round(mid + 0.00005, 5), seq))

    def end_of_day(self, ticks: int) -> None:
        say(f"gateway:  published {ticks:,} ticks")
        self.md.end_of_day(ticks)

    # the state a snapshot keeps, and takes back on restart
    def snapshot(self) -> dict[str, float]:
        return dict(self.mids)

    def restore(self, state: dict[str, float]) -> None:
        self.mids = dict(state)
