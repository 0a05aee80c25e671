"""Replicate a queue to another "host" (a sink process on 127.0.0.1), with acknowledgements.

Run:  python examples/replication.py [WORK_DIR]

* This process serves ``orders/`` with a :class:`ReplicationSource`; a separate
  sink process mirrors it into ``orders-replica/`` at the same indices.
* Orders are appended here; ``await appender.wait_replicated()`` returns once the
  sink has acknowledged them (a write that is on two hosts before it counts).
* A ``read_after_replica_acknowledged`` tailer (say, the component that tells
  clients their order is safe) only ever sees acknowledged orders.
* The sink is killed mid-stream and started again: it resumes after its own last
  excerpt, with no gap and no duplicate.
* A local appender on the replica is refused while the sink runs.
* At the end both queues hold the same excerpts at the same indices.

Both sides prove they know a shared secret (HMAC challenge-response); nothing
leaves the loopback interface.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import sys
import tempfile

import aiochronicle as ac

SECRET = b"example shared secret"


def run_sink(replica: str, port: int) -> None:
    """The replica host: mirror the source until terminated (its own process)."""

    async def main() -> None:
        sink = ac.ReplicationSink(replica, "127.0.0.1", port, secret=SECRET, name="replica-1")
        await sink.run()

    asyncio.run(main())


def start_sink(replica: str, port: int) -> mp.process.BaseProcess:
    proc = mp.get_context("spawn").Process(target=run_sink, args=(replica, port), daemon=True)
    proc.start()
    return proc


async def main(work: str) -> None:
    primary = os.path.join(work, "orders")
    replica = os.path.join(work, "orders-replica")
    async with ac.open_queue(primary) as queue, \
            ac.ReplicationSource(queue, port=0, secret=SECRET) as source:
        print(f"serving {primary} on 127.0.0.1:{source.port}")
        sink = start_sink(replica, source.port)
        appender = queue.appender()
        safe = queue.tailer(read_after_replica_acknowledged=True)

        index = appender.append(b"order 1: buy 100 EURUSD")
        assert safe.read_nowait() is None  # not acknowledged yet: invisible
        acked = await appender.wait_replicated(timeout=30)
        print(f"order 1 at {index:#x} acknowledged by the replica (up to {acked:#x})")
        excerpt = safe.read_nowait()
        assert excerpt is not None
        print(f"the safe tailer now sees: {excerpt.payload.decode()}")

        for i in range(2, 2001):
            appender.append(b"order %d" % i)
            if i % 100 == 0:
                await asyncio.sleep(0.001)  # (the source runs on this loop)
            if i == 1000:  # the replica host goes down mid-stream ...
                acked = await appender.wait_replicated(timeout=30)
                sink.kill()
                sink.join()
                print(f"replica killed after acknowledging {acked:#x}")
        # ... and comes back: it resumes after its own last excerpt
        sink = start_sink(replica, source.port)
        await appender.wait_replicated(timeout=30)
        print(f"all 2000 orders acknowledged; sinks now: {[s.name for s in source.sinks]}")

        with ac.open_queue(replica) as rq:
            try:
                rq.appender().append(b"a local write")
            except ac.AppendLockedError as exc:
                print(f"local write on the replica refused: {exc}")
        sink.terminate()
        sink.join()

    with ac.open_queue(primary) as a, ac.open_queue(replica) as b:
        left = [(e.index, e.payload) for e in a.tailer()]
        right = [(e.index, e.payload) for e in b.tailer()]
        assert left == right, "the replica differs"
        print(f"replica identical: {len(right)} excerpts, {right[0][0]:#x}..{right[-1][0]:#x}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()))
