"""aiochronicle end-to-end demo on a local queue directory.

A price-feed process appends ticks while a separate consumer process tails the
same queue live; then this process replays from an index, reads backwards and
prints what is on disk.  Run it with ``scripts/demo.sh`` (or
``python examples/demo.py [QUEUE_DIR]``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import struct
import sys
import time

import aiochronicle as ac

TICKS = 200_000
TICK = struct.Struct("<8sdqq")  # symbol, price, sequence, send time (ns)
SYMBOLS = [b"EURUSD\0\0", b"GBPUSD\0\0", b"USDJPY\0\0", b"AUDUSD\0\0"]


def producer(path: str, ready: mp.synchronize.Event) -> None:
    """Append TICKS fixed-size binary ticks, one excerpt each."""
    with ac.open_queue(path) as queue:
        appender = queue.appender()
        ready.wait()
        for i in range(TICKS):
            symbol = SYMBOLS[i % len(SYMBOLS)]
            price = 1.0 + (i % 1000) / 10_000
            appender.append(TICK.pack(symbol, price, i, time.monotonic_ns()))
        appender.append_text("end of feed")


def consumer(path: str, ready: mp.synchronize.Event, out: mp.Queue[tuple[int, int, float]]) -> None:
    """Tail the queue live until the end marker; report count and latency."""
    with ac.open_queue(path) as queue:
        tailer = queue.tailer()
        tailer.to_end()
        ready.set()
        count = 0
        expected = 0
        latency_total = 0
        while True:
            excerpt = tailer.read_nowait()
            if excerpt is None:
                continue
            payload = excerpt.payload
            if len(payload) != TICK.size:
                break
            _, _, seq, sent = TICK.unpack(payload)
            if seq != expected:
                raise SystemExit(f"consumer saw sequence {seq}, expected {expected}")
            expected += 1
            latency_total += time.monotonic_ns() - sent
            count += 1
        out.put((count, excerpt.index, latency_total / max(count, 1) / 1000))


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "demo-queue"
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    print(f"aiochronicle {ac.__version__}: demo queue in {os.path.abspath(path)}")
    with ac.open_queue(path):
        pass  # create metadata.cq4t before the processes race to it

    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    results: mp.Queue[tuple[int, int, float]] = ctx.Queue()
    procs = [ctx.Process(target=consumer, args=(path, ready, results)),
             ctx.Process(target=producer, args=(path, ready))]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    count, last_index, mean_us = results.get(timeout=120)
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            print(f"process {p.name} failed with exit code {p.exitcode}")
            return 1
    elapsed = time.perf_counter() - t0
    print(f"consumer process read {count:,} ticks live in {elapsed:.2f}s, in order, none "
          f"missing (mean age when read {mean_us:,.0f} µs: the producer writes flat out "
          f"and the consumer trails it)")

    with ac.open_queue(path, read_only=True) as queue:
        rc = queue.roll_cycle
        cycles = queue.cycles()
        first = queue.first_index or 0
        print(f"roll cycle {rc.name}: the queue starts a new file every "
              f"{rc.length_ms / 3_600_000:g} hours; each file is a *cycle*, numbered by "
              f"the periods since 1970-01-01 UTC. Cycles on disk: {cycles} "
              f"(file {os.path.basename(queue.cycle_path(cycles[0]))})")
        print(f"an *index* is an excerpt's permanent address: its cycle in the high bits "
              f"and its position in that cycle in the low {rc.cycle_shift} bits; "
              f"{first:#x} = cycle {rc.to_cycle(first)}, excerpt {rc.to_sequence(first)}")
        print(f"first index {first:#x}, last index {queue.last_index:#x} "
              f"(end marker at {last_index:#x}), {queue.entry_count():,} excerpts")
        # the index of the middle tick, found by counting: a run across midnight
        # UTC splits the feed over two cycles, so it is not first cycle + TICKS // 2
        seek = queue.tailer()
        before: list[ac.Excerpt] = []
        while len(before) <= TICKS // 2:
            got = seek.read_many(max_count=TICKS // 2 + 1 - len(before))
            assert got, "the feed ended early"
            before += got
        middle = before[TICKS // 2].index
        tailer = queue.tailer()
        assert tailer.move_to_index(middle)
        replay = [TICK.unpack(tailer.read_nowait().payload)[2] for _ in range(3)]  # type: ignore[union-attr]
        print(f"replay from {middle:#x}: sequences {replay}")
        back = queue.tailer(direction=ac.TailerDirection.BACKWARD)
        last = back.read_nowait()
        assert last is not None
        print(f"reading backwards, last excerpt {last.index:#x}: {last.text!r} (payload "
              f"{last.payload!r}: append_text's BinaryWire prefix, 0xE0 + the length)")
        batch = queue.tailer().read_many(max_count=100_000)
        print(f"one read_many call returned {len(batch):,} excerpts")
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            st = os.stat(full)
            print(f"  {name:<16} {st.st_size:>12,} bytes ({st.st_blocks * 512:,} on disk)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
