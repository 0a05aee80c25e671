"""A process forked while a queue is open (multiprocessing's default start method
on Linux) can go on using the queue, its appenders and tailers.

Each scenario forks inside a child Python process of its own, so a hang or a
crash is a failed test, not a stuck test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PRELUDE = textwrap.dedent("""
    import os, signal, sys, threading, time
    import aiochronicle as ac
    from aiochronicle._objects._queue import cycles_of
    from aiochronicle._waiting._pauser import wait_state

    path = sys.argv[1]
    q = ac.open_queue(path, lock_timeout=20.0)
    appender = q.appender()
    appender.append(b"parent before the fork")

    def lock_holder():
        value = q.table_store_get("chronicle.write.lock")
        return None if value is None or value == -(1 << 63) else value & 0xFFFFFFFF

    def wait_child(pid, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child hung")

    # fork; the child runs body() and exits 0 if it returns true, 3 if false,
    # 1 if it raises; returns the child's PID
    def fork_child(body):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if body() else 3
            finally:
                os._exit(code)
        return pid

    # a thread holds ``lock`` from now until the returned function is called
    # (which lets it go and joins the thread)
    def hold_in_a_thread(lock):
        holding, release = threading.Event(), threading.Event()
        def hold():
            with lock:
                holding.set()
                release.wait()
        th = threading.Thread(target=hold)
        th.start()
        holding.wait()
        def let_go():
            release.set()
            th.join()
        return let_go

    # waits for the child (then runs then(), even if it hung) and asserts it
    # exited 0
    def child_succeeded(pid, then=None):
        try:
            status = wait_child(pid)
        finally:
            if then is not None:
                then()
        assert os.waitstatus_to_exitcode(status) == 0, status
""")

SCENARIOS = {
    # the inherited appender takes the write lock with the child's own PID
    "lock_pid": """
        def child():
            with appender.writing_document() as dc:
                dc.write(b"child")
                return lock_holder() == os.getpid()
        child_succeeded(fork_child(child))
        assert lock_holder() is None
        payloads = [e.payload for e in iter(q.tailer().read_nowait, None)]
        assert payloads == [b"parent before the fork", b"child"], payloads
    """,
    # a child killed while holding the lock: the parent recovers at once
    # (the lock names the dead child, not the parent)
    "child_dies_holding_the_lock": """
        def child():
            dc = appender.writing_document()
            dc.write(b"never committed")
            os.kill(os.getpid(), signal.SIGKILL)
        status = wait_child(fork_child(child))
        assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
        t0 = time.monotonic()
        appender.append(b"parent after")  # else WriteLockTimeoutError after lock_timeout
        assert time.monotonic() - t0 < q.lock_timeout, "waited out the lock timeout"
        payloads = [e.payload for e in iter(q.tailer().read_nowait, None)]
        assert payloads == [b"parent before the fork", b"parent after"], payloads
    """,
    # another thread of the parent held the queue's lock at the fork
    "lock_held_by_another_thread": """
        let_go = hold_in_a_thread(cycles_of(q).lock)
        def child():
            first = q.tailer().read_nowait()
            q.appender().append(b"from the child")
            return first.payload == b"parent before the fork"
        pid = fork_child(child)
        let_go()
        child_succeeded(pid)
        payloads = [e.payload for e in iter(q.tailer().read_nowait, None)]
        assert payloads[-1] == b"from the child", payloads
    """,
    # the parent's event loop parks on its notify socket; a child forked then
    # parks on a socket and slot of its own, and the parent's appender wakes it
    "notify_loop_in_the_child": """
        import asyncio
        from aiochronicle._waiting._notify import SLOTS, slot_key

        def owners():
            return {i: v & 0xFFFFFFFF for i in range(SLOTS)
                    if (v := q.table_store_get(slot_key(i)))}

        async def park_once(timeout):
            t = q.tailer(pauser=ac.Pauser.notify(min_park=30, max_park=30))
            t.to_end()
            try:
                return await asyncio.wait_for(t.read(), timeout)
            except TimeoutError:
                return None

        loop = asyncio.new_event_loop()
        assert loop.run_until_complete(park_once(0.1)) is None  # the parent's slot
        assert list(owners().values()) == [os.getpid()]
        r, w = os.pipe()
        async def parked_then_woken():
            t = q.tailer(pauser=ac.Pauser.notify(min_park=30, max_park=30))
            t.to_end()
            task = asyncio.ensure_future(t.read())
            deadline = time.monotonic() + 20
            while not wait_state(t.pauser).parks:  # until the read is parked
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.001)
            os.write(w, b"p")
            ex = await asyncio.wait_for(task, 20)
            return ex.payload, t.pauser.count_paused
        def child():
            os.close(r)
            return asyncio.run(parked_then_woken()) == (b"wake the child", 1)
        pid = fork_child(child)
        os.close(w)
        assert os.read(r, 1) == b"p"
        assert sorted(owners().values()) == sorted([os.getpid(), pid])
        appender.append(b"wake the child")
        child_succeeded(pid)
        loop.close()
        q.close()
    """,
    # a thread of the parent has a writing_document() open at the fork: the
    # child's close must leave that document (and the lock) to the parent
    "child_close_leaves_the_parents_document": """
        opened, fork_done = threading.Event(), threading.Event()
        result = []
        def writer():
            try:
                with appender.writing_document() as dc:
                    dc.write(b"parent's document")
                    opened.set()
                    fork_done.wait()
                result.append(dc.index)
            except BaseException as exc:
                result.append(exc)
        th = threading.Thread(target=writer)
        th.start()
        opened.wait()
        def child():
            q.close()
            return True
        def parent_thread_done():
            fork_done.set()
            th.join()
        child_succeeded(fork_child(child), then=parent_thread_done)
        assert isinstance(result[0], int), result
        assert lock_holder() is None
        payloads = [e.payload for e in iter(q.tailer().read_nowait, None)]
        assert payloads == [b"parent before the fork", b"parent's document"], payloads
    """,
    # a thread of the parent was remapping a cycle file at the fork (it held
    # the file's grow lock): the child grows the same file without waiting
    "grow_lock_held_at_the_fork": """
        q2 = ac.open_queue(path + "2", block_size=1 << 16)
        a2 = q2.appender()
        a2.append(b"small")
        st = cycles_of(q2).acquire(q2.cycles()[0])
        let_go = hold_in_a_thread(st.file._grow_lock)
        def child():
            a2.append(b"x" * (1 << 18))  # past the mapping: it grows the file
            return q2.entry_count() == 2
        child_succeeded(fork_child(child), then=let_go)
        cycles_of(q2).release(st)
    """,
    # a thread of the parent was inside a tailer's call (opening the next
    # cycle, holding the store cache's lock) at the fork: the child's close
    # unmaps every cycle file all the same
    "child_close_unmaps_what_a_parent_thread_held": """
        clock = ac.SetTimeProvider(1_637_251_500_000)
        q2 = ac.open_queue(path + "2", roll_cycle=ac.RollCycles.TEST_SECONDLY,
                           time_provider=clock)
        a2 = q2.appender()
        a2.append(b"first cycle")
        clock.advance_millis(1000)
        a2.append(b"second cycle")
        a2.close()
        t2 = q2.tailer()
        assert t2.read_nowait().payload == b"first cycle"
        inside, release = threading.Event(), threading.Event()
        def listener(what, cycle, p):
            if what == "on_acquired" and threading.current_thread() is th:
                inside.set()
                release.wait()
        cycles_of(q2).listeners.append(listener)
        th = threading.Thread(target=t2.read_nowait)
        th.start()
        inside.wait()
        def child():
            q2.close()
            with open("/proc/self/maps") as f:
                return not [ln for ln in f if path + "2/" in ln]
        def parent_thread_done():
            release.set()
            th.join()
        child_succeeded(fork_child(child), then=parent_thread_done)
        q2.close()
    """,
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_forked_child_uses_the_queue(scenario: str, tmp_path: Path) -> None:
    script = PRELUDE + textwrap.dedent(SCENARIOS[scenario]) + "\nprint('OK')\n"
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "q")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK"), proc.stdout
