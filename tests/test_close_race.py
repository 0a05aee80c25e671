"""Closing a queue, a tailer or an appender from one thread while other threads
are inside calls on them: the callers get ``QueueClosedError`` (or finish the
call they were in), never a crash.

Each scenario runs in a child process, so a segfault is a failed test with the
signal in its message instead of the end of the test run.  No sleep orders
anything: a close waits until every worker has gone round its loop a number of
times that changes from trial to trial (and the workers keep going meanwhile),
so closes land all over the workers' calls.  ``test_close_interleavings.py``
forces the interleavings that matter one by one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PRELUDE = textwrap.dedent("""
    import asyncio, faulthandler, sys, threading
    import aiochronicle as ac

    faulthandler.enable(all_threads=True)  # a crash shows every thread's stack

    path = sys.argv[1]
    # The busy loops below hold the GIL but for one short native call every
    # few hundred µs (a rewind); CPython's GIL then wakes a waiting thread at
    # each release but lets the busy one take it back first, and the 5 ms
    # interval after which a waiter insists never runs out: the closing
    # thread could wait minutes for its turn.  A short interval ends that.
    sys.setswitchinterval(1e-4)
    SMALL, LARGE = b"s" * 40, b"L" * 20_000   # LARGE is copied from the mapping itself
    with ac.open_queue(path) as q:
        a = q.appender()
        for i in range(20_000):
            a.append(LARGE if i % 7 == 0 else SMALL)

    unexpected = []
    started = []  # one event per worker: set once it has gone round `goal` times

    def run(target, *args, goal=1):
        turns = [0]
        ready = threading.Event()
        started.append(ready)
        def tick():
            turns[0] += 1
            if turns[0] == goal:
                ready.set()
        def body():
            try:
                target(*args, tick)
            except ac.QueueClosedError:
                pass
            except BaseException as exc:
                unexpected.append(repr(exc))
            finally:
                ready.set()  # (a worker that failed early must not hang the test)
        th = threading.Thread(target=body)
        th.start()
        return th

    def all_started():
        for ready in started:
            assert ready.wait(120), "a worker never got going"
        started.clear()

    def reader(q, how, tick):
        t = q.tailer()
        while True:
            tick()
            if how == "read_nowait":
                if t.read_nowait() is None:
                    t.to_start()
            elif how == "read_many":
                if not len(t.read_many(500)):
                    t.to_start()
            elif how == "move_to_index":
                t.move_to_index(q.first_index + 13_000)
                t.read_nowait()
            elif how == "blocking":
                if t.read_blocking(0.001) is None:
                    t.to_start()

    def named_reader(q, tick):
        t = q.tailer("svc")
        while True:
            tick()
            if t.read_nowait() is None:
                t.to_start()

    def writer(q, how, tick):
        a = q.appender()
        while True:
            tick()
            if how == "append":
                a.append(LARGE)
            elif how == "packed":
                a.append_packed(SMALL * 50, list(range(0, 40 * 51, 40)))
            elif how == "document":
                with a.writing_document() as dc:
                    dc.write(SMALL)
                    dc.write(LARGE)
""")

SCENARIOS = {
    # Queue.close() while readers of every kind and writers are busy
    "queue_close": """
        for trial in range(12):
            q = ac.open_queue(path)
            goal = 1 + 23 * trial
            threads = [run(reader, q, how, goal=goal) for how in
                       ("read_nowait", "read_many", "move_to_index", "blocking")]
            threads += [run(named_reader, q, goal=goal)]
            threads += [run(writer, q, how, goal=goal)
                        for how in ("append", "packed", "document")]
            all_started()
            q.close()
            for th in threads:
                th.join(10)
                assert not th.is_alive(), "a worker did not stop after the close"
    """,
    # one tailer / appender closed from another thread while it is in use
    "child_close": """
        with ac.open_queue(path) as q:
            for trial in range(20):
                t = q.tailer()
                a = q.appender()
                def read_loop(tick):
                    while True:
                        tick()
                        if t.read_nowait() is None:
                            t.to_start()
                def write_loop(tick):
                    while True:
                        tick()
                        a.append(LARGE)
                goal = 1 + 37 * trial
                threads = [run(read_loop, goal=goal), run(write_loop, goal=goal)]
                all_started()
                t.close()
                a.close()
                for th in threads:
                    th.join(10)
                    assert not th.is_alive()
            # the queue itself still works
            n = q.appender().append(b"after")
            assert q.tailer().move_to_index(n)
    """,
    # a SIGTERM handler closes the queue (a common shutdown): it runs on the
    # main thread, inside whatever read or append the signal interrupted
    "signal_close": """
        import os, signal
        closing = []
        signal.signal(signal.SIGTERM, lambda signum, frame: closing[0].close())
        for trial in range(30):
            q = ac.open_queue(path)
            closing[:] = [q]
            t = q.tailer(direction=ac.TailerDirection.BACKWARD if trial % 3 == 2
                         else ac.TailerDirection.FORWARD)
            a = q.appender()
            ready = threading.Event()
            killer = threading.Thread(
                target=lambda: ready.wait(120) and os.kill(os.getpid(), signal.SIGTERM))
            killer.start()
            goal, n = 1 + 41 * trial, 0
            try:
                while True:
                    n += 1
                    if n == goal:
                        ready.set()
                    if n % 5 == 0:
                        a.append(LARGE)
                    elif t.read_nowait() is None:
                        t.to_start()
            except ac.QueueClosedError:
                pass
            killer.join()
    """,
    # an async tailer on the loop thread; the queue closed from a plain thread
    # (the last trials close once everything is read: while the tailer spins)
    "async_close": """
        async def consume(q, goal, ready):
            n = 0
            async for _ in q.tailer(pauser=ac.Pauser.busy()):
                n += 1
                if n == goal:
                    ready.set()

        async def main():
            for trial in range(10):
                q = ac.open_queue(path)
                ready = threading.Event()
                closer = threading.Thread(target=lambda: ready.wait(120) and q.close())
                closer.start()
                task = asyncio.ensure_future(consume(q, min(1 + 2_500 * trial, 20_000), ready))
                try:
                    await asyncio.wait_for(task, 120)
                except ac.QueueClosedError:
                    pass
                closer.join()
                assert q.closed

        asyncio.run(main())
    """,
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_closing_under_load_never_crashes(scenario: str, tmp_path: Path) -> None:
    script = PRELUDE + textwrap.dedent(SCENARIOS[scenario]) + textwrap.dedent("""
        assert not unexpected, unexpected
        print("OK")
    """)
    run_script(script, str(tmp_path / "q"), timeout=300)


def run_script(script: str, *args: str, timeout: float) -> str:
    """Run ``script`` in a child process; fail with the signal that killed it
    (and every thread's stack, from faulthandler), or with its error, unless
    it ends by printing OK.  Returns what it printed."""
    proc = subprocess.run([sys.executable, "-c", script, *args],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode < 0:
        pytest.fail(f"the process died of {signal.Signals(-proc.returncode).name}: "
                    f"{proc.stderr[-6000:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK") or proc.stdout.startswith("OK"), proc.stdout
    return proc.stdout


def test_a_closed_tailer_keeps_its_mapping_until_it_is_gone(tmp_path: Path) -> None:
    """After close() a tailer refuses to read; the memory it mapped is released
    when the object goes (so a call still in flight could not have lost it)."""
    import gc

    import aiochronicle as ac

    def mappings() -> int:
        return sum(1 for line in Path("/proc/self/maps").read_text().splitlines()
                   if str(tmp_path) in line and line.endswith(".cq4"))

    with ac.open_queue(tmp_path / "q") as q:
        q.appender().append(b"x")
        q.appender().close()
        before = mappings()
        t = q.tailer()
        assert t.read_nowait() is not None
        t.close()
        with pytest.raises(ac.QueueClosedError):
            t.read_nowait()
        with pytest.raises(ac.QueueClosedError):
            t.read_many()
        del t
        gc.collect()
        assert mappings() <= before
    gc.collect()
    assert mappings() == 0
