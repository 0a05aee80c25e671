"""Binary search against a scan: excerpts read and time to find the first
excerpt at or after a key.

Run:  .venv/bin/python bench/binary_search.py [--n 10000000] [--cycles 4] [--keys 20]

Builds a queue of ``--n`` excerpts (8-byte big-endian keys, increasing) over
``--cycles`` daily cycles on tmpfs (``/dev/shm`` when there is one), then
looks up ``--keys`` random keys twice: with ``Tailer.binary_search`` and with
a scan (``read_many`` batches from the start until a key is at or after the
one sought, as a user without binary search would).  Prints the median
excerpts read and time per look-up, and the scan's as a multiple of the
search's.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import struct
import tempfile
import time
from array import array

import _report  # bench/_report.py (this directory is on sys.path)

import aiochronicle as ac

T0 = 1_637_251_500_000
DAY = 86_400_000


def build(path: str, n: int, cycles: int) -> float:
    """Fill the queue; seconds it took."""
    clock = ac.SetTimeProvider(T0)
    t0 = time.perf_counter()
    per = n // cycles
    with ac.open_queue(path, time_provider=clock) as q:
        a = q.appender()
        v = 0
        for c in range(cycles):
            end = n if c == cycles - 1 else v + per
            while v < end:
                k = min(1 << 20, end - v)
                a.append_packed(struct.pack(f">{k}Q", *range(v, v + k)),
                                array("q", range(0, 8 * (k + 1), 8)))
                v += k
            clock.advance_millis(DAY)
    return time.perf_counter() - t0


def scan(t: ac.Tailer, key: int) -> tuple[int | None, int]:
    """(index, excerpts read) by reading from the start."""
    t.to_start()
    reads = 0
    while True:
        b = t.read_many(65536, 1 << 20)
        if not len(b):
            return None, reads
        data, offs, idx = b.data, b.offsets, b.indices
        for j in range(len(b)):
            reads += 1
            if int.from_bytes(data[offs[j]:offs[j + 1]], "big") >= key:
                return idx[j], reads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--cycles", type=int, default=4)
    p.add_argument("--keys", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = tempfile.mkdtemp(prefix="bench-bsearch-", dir=base)
    load_start = _report.load()
    try:
        built = build(d, args.n, args.cycles)
        rng = random.Random(args.seed)
        keys = [rng.randrange(args.n) for _ in range(args.keys)]
        with ac.open_queue(d, read_only=True) as q:
            t = q.tailer()

            def key_fn(payload: bytes) -> int:
                return int.from_bytes(payload, "big")

            b_reads, b_time, s_reads, s_time = [], [], [], []
            for key in keys:
                st = ac.SearchStats()
                t0 = time.perf_counter()
                got = t.binary_search(key, key_fn=key_fn, stats=st)
                b_time.append(time.perf_counter() - t0)
                b_reads.append(st.reads)
                t0 = time.perf_counter()
                want, reads = scan(t, key)
                s_time.append(time.perf_counter() - t0)
                s_reads.append(reads)
                assert got == want, (key, got, want)
        load_end = _report.load()
        med = statistics.median
        rows = [
            ["binary search", f"{med(b_reads):,.0f}", f"{med(b_time) * 1e3:.3f}", "1.00x",
             "1.00x"],
            ["scan (read_many)", f"{med(s_reads):,.0f}", f"{med(s_time) * 1e3:.1f}",
             _report.ratio(med(s_reads), med(b_reads), 0),
             _report.ratio(med(s_time), med(b_time), 0)],
        ]
        lines = [_report.measured_by(
            "binary_search.py", load_start, load_end,
            [f"{args.n:,} excerpts of 8 B over {args.cycles} cycles on "
             f"{'tmpfs' if base else 'the temp dir'} (built in {built:.1f} s)",
             f"median of {args.keys} random keys", f"log2(n) = {math.log2(args.n):.1f}"]),
            "", *_report.table(["look-up", "excerpts read", "ms", "reads vs search",
                                "time vs search"], rows)]
        print("\n".join(lines))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
