"""A close landing at a chosen point inside a call of the same object.

Each case stops a call at one point of its slow path (a trace function on the
calling thread) and closes there: from a SIGTERM handler (the handler runs on
the same thread, inside the interrupted call), from another thread (handshake
with events), or from the main thread while the call runs in a thread started
outside ``threading`` (``_thread.start_new_thread``, as a C library or a JVM
bridge starts threads).  The call must return normally or raise
``QueueClosedError``; nothing may crash, raise anything else or read freed
memory, and once the call is over and the queue closed no cycle file may stay
mapped (the close let the mapping go when the last call left it, not at
garbage collection: the children run with ``gc`` off).

Each case runs in a child process, so a segfault fails its test only.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from test_close_race import run_script

PRELUDE = textwrap.dedent("""
    import _thread, gc, linecache, signal, sys, threading
    import aiochronicle as ac
    from aiochronicle._core._native import NEED_MAP

    gc.disable()
    path, closer, what = sys.argv[1:4]
    fired = []

    def mapped():
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if path in line and line.rstrip().endswith(".cq4"))

    def hook(func, filename, line=None, when=lambda frame: True):
        # a trace function that runs fire() once: where `func` of `filename`
        # starts, or where its first line starting with `line` is about to run
        def local(frame, event, arg):
            if (event == "line" and not fired and linecache.getline(
                    frame.f_code.co_filename, frame.f_lineno).strip().startswith(line)):
                fire()
            return local
        def tracer(frame, event, arg):
            code = frame.f_code
            if (fired or event != "call" or code.co_name != func
                    or not code.co_filename.endswith(filename) or not when(frame)):
                return None
            if line is not None:
                return local
            fire()
            return None
        return tracer

    outcome = []

    def run_op():
        # op() on this thread with the trace on: its value, or "closed"
        sys.settrace(trace)
        try:
            outcome.append(op())
        except ac.QueueClosedError:
            outcome.append("closed")
        finally:
            sys.settrace(None)
""")

# a reader whose mapping is shorter than the file another queue object grew
GROWN = """
    writer = ac.open_queue(path, block_size=1 << 16)
    w = writer.appender()
    w.append(b"first")
    q = ac.open_queue(path, block_size=1 << 16)
    obj = q.tailer()
    assert obj.read_nowait().payload == b"first"
    for i in range(200):
        w.append(bytes([i]) * 2000)
    writer.close()
    def op():
        i = 0
        while (ex := obj.read_nowait()) is not None:
            assert ex.payload == bytes([i]) * 2000, (i, ex.payload[:8])
            i += 1
"""

# a notify tailer's read that waits: in this thread, or in a task
NOTIFY_SYNC = """
    q = ac.open_queue(path)
    obj = q.tailer(pauser=ac.Pauser.notify())
    op = lambda: obj.read_blocking(2)
"""
NOTIFY_ASYNC = """
    import asyncio
    q = ac.open_queue(path)
    obj = q.tailer(pauser=ac.Pauser.notify())
    op = lambda: asyncio.run(asyncio.wait_for(obj.read(), 2))
"""

# what each case sets up: `q` (closed by the "queue" cases), `obj` (closed by
# the "object" cases), `op()` (the call that is interrupted) and `trace` (where)
CASES = {
    # the appender's first append reserves disk blocks (NO_SPACE -> _reserve)
    "appender_reserve": """
        q = ac.open_queue(path)
        obj = q.appender()
        op = lambda: obj.append(b"x" * 100)
        trace = hook("_reserve", "_appender.py")
    """,
    # a method writer's call encoded and appended in C (WriterMethod) reaches
    # the appender's slow path the same way: its count in flight is the appender's
    "method_writer_reserve": """
        import msgspec
        class Tick(msgspec.Struct):
            n: int
        class Ticks:
            def on_tick(self, tick: Tick) -> None: ...
        q = ac.open_queue(path)
        obj = q.appender()
        w = obj.method_writer(Ticks)
        op = lambda: w.on_tick(Tick(7))
        trace = hook("_reserve", "_appender.py")
    """,
    # a read meets the end of cycle 1 (EOF -> _next_cycle)
    "tailer_next_cycle": """
        clock = ac.SetTimeProvider(1_700_000_000_000)
        q = ac.open_queue(path, time_provider=clock)
        a = q.appender()
        a.append(b"one")
        clock.advance_millis(86_400_000)
        a.append(b"two")
        a.close()
        obj = q.tailer()
        assert obj.read_nowait().payload == b"one"
        def op():
            ex = obj.read_nowait()
            assert ex is None or ex.payload == b"two", ex
        trace = hook("_next_cycle", "_tailer.py")
    """,
    # the reader's mapping is shorter than the file another queue object grew
    # (NEED_MAP -> _read_slow), and the excerpt read after the remap (_excerpt)
    "tailer_need_map": GROWN + """
    trace = hook("_read_slow", "_tailer.py", when=lambda f: f.f_locals["n"] == NEED_MAP)
""",
    "tailer_excerpt_after_map": GROWN + """
    trace = hook("_excerpt", "_tailer.py")
""",
    # a backward read: the native read found the excerpt, _excerpt copies it
    "tailer_excerpt_backward": """
        q = ac.open_queue(path)
        a = q.appender()
        for i in range(3):
            a.append(bytes([65 + i]) * 3000)
        a.close()
        obj = q.tailer(direction=ac.TailerDirection.BACKWARD)
        def op():
            ex = obj.read_nowait()
            assert ex is None or ex.payload == b"C" * 3000, ex.payload[:8]
        trace = hook("_excerpt", "_tailer.py")
    """,
    # an in-place document: the bytes are copied through the mapping
    "document_write": """
        q = ac.open_queue(path)
        obj = q.appender()
        obj.append(b"warm")
        def op():
            with obj.writing_document() as dc:
                dc.write(b"a" * 100)
                dc.write(b"b" * 100)
        trace = hook("_doc_write", "_appender.py", line="memmove(")
    """,
    # a blocking read about to park: the close's wake-up must not be missed
    # (the park would last its full 600 s; the child's deadline is 60 s)
    "read_blocking_park": """
        q = ac.open_queue(path)
        a = q.appender()
        a.append(b"x")
        a.close()
        obj = q.tailer(pauser=ac.Pauser.millis(600_000))
        assert obj.read_nowait() is not None
        op = lambda: obj.read_blocking(600)
        trace = hook("wait_sync", "_waiter.py", line="seen = stop[0]")
    """,
    # a notify tailer's first wait makes the queue's notifier, under the lock
    # of the notifiers' registry, which the queue's close takes as well
    "notify_first_wait": NOTIFY_SYNC + """
    trace = hook("notifier_for", "_notify.py", line="n = Notifier(")
""",
    # (a task's wait holds no call in flight: the close releases the table
    # store at once, and making the notifier must say "closed")
    "notify_first_wait_async": NOTIFY_ASYNC + """
    trace = hook("notifier_for", "_notify.py", line="n = Notifier(")
""",
    # ... and parks on the notify word (the close stops the notifier; the
    # park must still find its word mapped), or a task sets its loop's parked
    # bit in the notifier's words
    "notify_park": NOTIFY_SYNC + """
    trace = hook("_park_sync", "_waiter.py", line="return int(_cq_park(c, ns, notifier")
""",
    "notify_park_async": NOTIFY_ASYNC + """
    trace = hook("wait_async", "_waiter.py", line="got: Excerpt | Literal[False]")
""",
}

CLOSERS = {
    # a SIGTERM handler closes: it runs on this thread, inside the call
    "signal": """
        def on_term(signum, frame):
            (q if what == "queue" else obj).close()
        signal.signal(signal.SIGTERM, on_term)
        def fire():
            fired.append(1)
            signal.raise_signal(signal.SIGTERM)
        run_op()
    """,
    # another thread closes while this one waits at the point
    "thread": """
        go, done = threading.Event(), threading.Event()
        def fire():
            fired.append(1)
            go.set()
            assert done.wait(60)
        def close_it():
            assert go.wait(60)
            (q if what == "queue" else obj).close()
            done.set()
        th = threading.Thread(target=close_it)
        th.start()
        run_op()
        th.join()
    """,
    # the call runs in a thread threading does not know; the main thread closes
    "foreign": """
        go, done, over = (_thread.allocate_lock() for _ in range(3))
        for lk in (go, done, over):
            lk.acquire()
        def fire():
            fired.append(1)
            go.release()
            done.acquire()
        def body():
            try:
                run_op()
            except BaseException as exc:
                outcome.append(repr(exc))
            finally:
                over.release()
        _thread.start_new_thread(body, ())
        go.acquire()
        assert threading.active_count() == 1  # the case this closer is about
        (q if what == "queue" else obj).close()
        done.release()
        over.acquire()
        assert len(outcome) == 1 and not str(outcome[0]).startswith(("<", "Assert")), outcome
    """,
}

EPILOGUE = """
    assert fired == [1], "the point was never reached"
    if not q.closed:
        # the queue still works after one of its objects closed under a call
        n = q.appender().append(b"after")
        t = q.tailer()
        assert t.move_to_index(n) and t.read_nowait().payload == b"after"
    q.close()
    assert mapped() == 0, f"{mapped()} cycle file mapping(s) left after the close"
    print("OK", outcome)
"""


def _params() -> list[tuple[str, str, str]]:
    out = []
    for case in CASES:
        for closer in CLOSERS:
            if case in ("read_blocking_park", "notify_first_wait", "notify_first_wait_async",
                        "notify_park", "notify_park_async") and closer != "signal":
                # threads: the closer waits for the call to leave the park
                # (_abort_wait) or the registry's lock; fire() waits for the closer
                continue
            for what in ("queue", "object"):
                out.append((case, closer, what))
    return out


@pytest.mark.parametrize(("case", "closer", "what"), _params())
def test_a_close_inside_a_call(case: str, closer: str, what: str, tmp_path: Path) -> None:
    script = (PRELUDE + textwrap.dedent(CASES[case]) + textwrap.dedent(CLOSERS[closer])
              + textwrap.dedent(EPILOGUE))
    run_script(script, str(tmp_path / "q"), closer, what, timeout=60)


def test_closing_while_a_document_grows_its_claim_lets_the_lock_go(tmp_path: Path) -> None:
    """A document's writer grows its claim in two steps (the header CAS, then
    the length it records); a close from another thread between the two must
    still turn the slot into padding and release the write lock (it found the
    header changed and kept the lock for good: every other writer then timed
    out, 1 run in 50 of the close-race test)."""
    import aiochronicle as ac
    from aiochronicle._core._native import HDR_EOF, UNLOCKED

    with ac.open_queue(tmp_path / "q", lock_timeout=0.5) as q:
        a = q.appender()
        a.append(b"warm")
        dc = a.writing_document()
        dc.write(b"x" * 10)
        pos, claim = int(a._c.doc_pos), int(a._c.doc_claim)
        st = a._store
        assert st is not None
        # the owner's cq_doc_ensure halfway through growing to claim + 100
        assert st.file.cas32(pos, HDR_EOF | claim, HDR_EOF | (claim + 100))
        a.close()  # (as Queue.close from another thread would: the owner is mid-document)
        assert q.table_store_get("chronicle.write.lock") == UNLOCKED
        with pytest.raises(ac.QueueClosedError):
            dc.write(b"y")
        dc.close(rollback=True)
        n = q.appender().append(b"after")
        t = q.tailer()
        assert t.move_to_index(n) and t.read_nowait().payload == b"after"  # type: ignore[union-attr]
        assert [ex.payload for ex in q.tailer()] == [b"warm", b"after"]


def test_a_close_while_a_document_waits_for_the_lock(tmp_path: Path) -> None:
    """A document begun while its appender is closed from another thread: the
    close finds no document open yet (the writer is waiting for the write lock
    inside the native begin), the begin then succeeds, and the last call out
    must end that document (padding, lock released) before it lets the cycle
    file go; a rollback on the let-go file was a segfault."""
    script = textwrap.dedent("""
        import dis, sys, threading, time
        import aiochronicle as ac

        with ac.open_queue(sys.argv[1]) as q:
            holder, a = q.appender(), q.appender()
            holder.append(b"warm")
            a.append(b"warm")
            a._c.lock_spin_ns = 600 * 10**9  # waits for the lock inside cq_doc_begin
            held = holder.writing_document()  # holds the write lock
            held.write(b"held")
            outcome = []
            def write():
                try:
                    with a.writing_document() as dc:
                        dc.write(b"never")
                    outcome.append("written")
                except ac.QueueClosedError:
                    outcome.append("closed")
            # a handshake by looking: the writer's frame stands at the call of
            # cq_doc_begin while its thread burns 50 ms of CPU: it spins for
            # the lock in there, past the closed check (the lock is held here,
            # so the call cannot have returned)
            code = ac.Appender.writing_document.__wrapped__.__code__
            ins = list(dis.get_instructions(code))
            at = next(i for i, x in enumerate(ins) if x.argval == "doc_begin")
            call = next(x.offset for x in ins[at:] if x.opname == "CALL")
            th = threading.Thread(target=write)
            th.start()
            clock, since = time.pthread_getcpuclockid(th.ident), None
            while True:
                f = sys._current_frames().get(th.ident)
                if f is None or f.f_code is not code or f.f_lasti != call:
                    since = None
                elif since is None:
                    since = time.clock_gettime_ns(clock)
                elif time.clock_gettime_ns(clock) - since > 50_000_000:
                    break
                assert th.is_alive()
            a.close()
            held.close()  # commits, lets the lock go: the begin goes on
            th.join()
            assert outcome == ["closed"], outcome
            n = q.appender().append(b"after")
            t = q.tailer()
            assert t.move_to_index(n) and t.read_nowait().payload == b"after"
            assert [ex.payload for ex in q.tailer()] == [b"warm", b"warm", b"held", b"after"]
        print("OK")
    """)
    run_script(script, str(tmp_path / "q"), timeout=60)
