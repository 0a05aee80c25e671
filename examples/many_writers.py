"""Several writer processes append to one queue while a reader follows them.

Run: python examples/many_writers.py [QUEUE_DIR]
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import struct
import sys

import aiochronicle as ac

MSG = struct.Struct("<II")  # writer id, sequence
WRITERS = 3
PER_WRITER = 20_000


def writer(path: str, wid: int) -> None:
    with ac.open_queue(path) as q:
        app = q.appender()
        for n in range(PER_WRITER):
            app.append(MSG.pack(wid, n))


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "many-writers-queue"
    shutil.rmtree(path, ignore_errors=True)
    with ac.open_queue(path) as q:
        tailer = q.tailer()
        procs = [mp.Process(target=writer, args=(path, w)) for w in range(WRITERS)]
        for p in procs:
            p.start()
        last = [-1] * WRITERS
        seen = 0
        while seen < WRITERS * PER_WRITER:
            ex = tailer.read_nowait()
            if ex is None:
                continue
            wid, n = MSG.unpack(ex.payload)
            assert n == last[wid] + 1, "a writer's order is always kept"
            last[wid] = n
            seen += 1
        for p in procs:
            p.join()
        print(f"read {seen} messages from {WRITERS} processes, each writer in order; "
              f"indices {q.first_index:#x} .. {q.last_index:#x}")


if __name__ == "__main__":
    main()
