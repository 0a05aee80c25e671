"""One waiter, one set of semantics: every pauser kind, on asyncio, uvloop and
plain threads (``aiochronicle._waiting._waiter``).

For each kind and each driver: a wait ends on an append from another process
(a real one, told to append once the wait has begun), a timeout ends it, a
close while waiting raises QueueClosedError, a cancelled read loses nothing;
and the drain (``MethodReader.run()``) runs handlers in run()'s task, every
waiter of a wake-up is served, a BaseException from a handler leaves through
that run() only.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from loops import KINDS, loop_factory
from workers import reader_parked

import aiochronicle as ac
from aiochronicle._waiting import _waiter

PAUSERS: dict[str, Callable[[], ac.Pauser]] = {
    "busy": ac.Pauser.busy,
    "timed_busy": ac.Pauser.timed_busy,
    "yielding": ac.Pauser.yielding,
    "balanced": ac.Pauser.balanced,
    "sleepy": lambda: ac.Pauser.sleepy(5),
    "millis": lambda: ac.Pauser.millis(1, 5),
    "notify": lambda: ac.Pauser.notify(min_park=0.005, max_park=0.005),
}
DRIVERS = [*KINDS, "thread"]


def _append_on(path: str, go: Any, payload: bytes) -> None:
    """In another process: append ``payload`` once ``go`` is set."""
    with ac.open_queue(path) as q:
        a = q.appender()
        assert go.wait(30), "never told to append"
        a.append(payload)


@pytest.fixture
def ctx() -> Any:
    return mp.get_context("spawn")


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[ac.Queue]:
    with ac.open_queue(tmp_path / "q") as q:
        yield q


def _run(driver: str, coro: Any) -> Any:
    with asyncio.Runner(loop_factory=loop_factory(driver)) as r:
        return r.run(coro)


async def _began(p: ac.Pauser) -> None:
    """Until the wait on ``p`` has taken a step (handshake, not a sleep)."""
    deadline = time.monotonic() + 30
    while p.count_paused == 0:
        assert time.monotonic() < deadline, "the wait never began"
        await asyncio.sleep(0)


def _began_sync(p: ac.Pauser) -> None:
    deadline = time.monotonic() + 30
    while p.count_paused == 0:
        assert time.monotonic() < deadline, "the wait never began"
        time.sleep(0.0005)


@pytest.mark.slow
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("kind", list(PAUSERS))
def test_a_wait_ends_on_an_append_from_another_process(queue: ac.Queue, ctx: Any, kind: str,
                                                       driver: str) -> None:
    pauser = PAUSERS[kind]()
    t = queue.tailer(pauser=pauser)
    go = ctx.Event()
    child = ctx.Process(target=_append_on, args=(str(queue.path), go, b"from afar"))
    child.start()
    try:
        if driver == "thread":
            got: list[Any] = []
            th = threading.Thread(target=lambda: got.append(t.read_blocking(30)))
            th.start()
            _began_sync(pauser)
            go.set()
            th.join(30)
            ex = got[0]
        else:
            async def main() -> ac.Excerpt:
                task = asyncio.ensure_future(t.read())
                await _began(pauser)
                go.set()
                return await asyncio.wait_for(task, 30)
            ex = _run(driver, main())
        assert ex is not None and ex.payload == b"from afar"
    finally:
        child.join(30)
    assert child.exitcode == 0


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("kind", list(PAUSERS))
def test_timeouts_close_and_cancel_mean_the_same(queue: ac.Queue, kind: str,
                                                 driver: str) -> None:
    """A timeout ends a wait with nothing (None, or TimeoutError in a task); a
    close from elsewhere while waiting raises QueueClosedError; a cancelled
    read (a task) loses nothing."""
    pauser = PAUSERS[kind]()
    t = queue.tailer(pauser=pauser)
    if driver == "thread":
        assert t.read_blocking(0.02) is None
        errors: list[BaseException] = []

        def read() -> None:
            try:
                t.read_blocking(30)
            except BaseException as e:
                errors.append(e)

        th = threading.Thread(target=read)
        th.start()
        _began_sync(pauser)
        t.close()
        th.join(30)
        assert [type(e) for e in errors] == [ac.QueueClosedError]
        return

    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.02):
                await t.read()
        # cancelled while waiting: the next read gets what it would have
        task = asyncio.ensure_future(t.read())
        await _began(pauser)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        queue.appender().append(b"kept")
        assert (await asyncio.wait_for(t.read(), 30)).payload == b"kept"
        # closed by another task while waiting
        before = pauser.count_paused
        task = asyncio.ensure_future(t.read())
        while pauser.count_paused == before:
            await asyncio.sleep(0)
        t.close()
        with pytest.raises(ac.QueueClosedError):
            await asyncio.wait_for(task, 30)

    _run(driver, main())


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("kind", ["busy", "sleepy", "millis", "notify"])
def test_pause_alone_is_one_step_of_the_same_drivers(kind: str, driver: str) -> None:
    """Pauser.pause()/apause() outside a tailer: one step, unpause() ends a
    park early, a pauser timeout raises TimeoutError (millis: parks instead,
    as Chronicle's)."""
    p = PAUSERS[kind]()
    if driver == "thread":
        p.pause()
        p.reset()
        if kind != "millis":
            p.pause(0)  # starts the pauser's clock; the next one is past it
            with pytest.raises(TimeoutError):
                p.pause(0)
        assert p.count_paused >= 1 and p.time_paused_ns > 0
        return

    async def main() -> None:
        await p.apause()
        p.reset()
        if kind != "millis":
            await p.apause(0)
            with pytest.raises(TimeoutError):
                await p.apause(0)
        assert p.count_paused >= 1 and p.time_paused_ns > 0

    _run(driver, main())


class Ticks(Protocol):
    def tick(self, n: int) -> None: ...


class Boom(BaseException):
    """Not an Exception: it must still leave through run() only."""


class Recorder:
    def __init__(self, boom_at: int = -1) -> None:
        self.calls: list[int] = []
        self.tasks: set[asyncio.Task[Any] | None] = set()
        self.boom_at = boom_at

    def tick(self, n: int) -> None:
        self.tasks.add(asyncio.current_task())
        self.calls.append(n)
        if n == self.boom_at:
            raise Boom(n)


@pytest.mark.slow
@pytest.mark.parametrize("driver", KINDS)
@pytest.mark.parametrize("kind", list(PAUSERS))
def test_the_drain_runs_handlers_in_run_and_serves_every_waiter(
        queue: ac.Queue, ctx: Any, kind: str, driver: str) -> None:
    """Two readers wait on one queue; one append from another process wakes
    both; handlers run in the task that awaits each run(); the BaseException
    one raises leaves through its run() only, the other reader handles the
    same call and goes on."""
    w = queue.appender().method_writer(Ticks)

    async def main() -> None:
        boom = Recorder(boom_at=1)
        calm = Recorder()
        r1 = queue.tailer(pauser=PAUSERS[kind]()).method_reader(boom, interfaces=[Ticks])
        r2 = queue.tailer(pauser=PAUSERS[kind]()).method_reader(calm, interfaces=[Ticks])
        t1 = asyncio.ensure_future(r1.run())
        t2 = asyncio.ensure_future(r2.run())
        w.tick(0)  # both handle it, then wait again
        while len(boom.calls) < 1 or len(calm.calls) < 1:
            await asyncio.sleep(0)
        go = ctx.Event()
        child = ctx.Process(target=_append_on_ticks, args=(str(queue.path), go))
        child.start()
        go.set()
        with pytest.raises(Boom):
            await asyncio.wait_for(t1, 30)
        while len(calm.calls) < 3:
            assert not t2.done()
            await asyncio.sleep(0.001)
        r2.stop()
        assert await asyncio.wait_for(t2, 30) == 3
        child.join(30)
        assert child.exitcode == 0
        assert boom.calls == [0, 1] and calm.calls == [0, 1, 2]
        assert boom.tasks == {t1} and calm.tasks == {t2}

    _run(driver, main())


def _append_on_ticks(path: str, go: Any) -> None:
    with ac.open_queue(path) as q:
        w = q.appender().method_writer(Ticks)
        assert go.wait(30)
        w.tick(1)
        w.tick(2)


# -- staying hot ------------------------------------------------------------------------------


def _read_on(driver: str, t: ac.Tailer) -> ac.Excerpt | None:
    if driver == "thread":
        return t.read_blocking(30)
    return _run(driver, asyncio.wait_for(t.read(), 30))  # type: ignore[no-any-return]


def _hot(p: ac.Pauser, hot_ns: int) -> _waiter.WaitState:
    """Mark ``p``'s waiter hot, as two quick finds in a row do, spinning
    ``hot_ns`` (long here, so that the test sees which way it went)."""
    w: _waiter.WaitState = p._w  # type: ignore[attr-defined]
    w.hot, w.hot_ns, w.found[0] = hot_ns, hot_ns, time.monotonic_ns()
    return w


def _append_when(cond: Callable[[], bool], a: ac.Appender, seen: list[bool],
                 q: ac.Queue) -> threading.Thread:
    """A thread that appends once ``cond()``, noting first whether a reader
    of ``q`` had announced a park."""
    def run() -> None:
        deadline = time.monotonic() + 30
        while not cond():
            assert time.monotonic() < deadline
            time.sleep(0.0005)
        seen.append(reader_parked(q))
        a.append(b"hot")
    th = threading.Thread(target=run)
    th.start()
    return th


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_hot_notify_reader_spins_before_it_parks(queue: ac.Queue, driver: str) -> None:
    """After two finds in quick succession a notify reader spins before its
    next park (a wake-up from sleep costs more than the gap): the excerpt
    appended during the spin is found with no park announced, and the find,
    again soon after the last one, keeps the reader hot."""
    pauser = ac.Pauser.notify(min_park=30, max_park=30)
    t = queue.tailer(pauser=pauser)
    a = queue.appender()
    w = _hot(pauser, 20 * 10**9)
    seen: list[bool] = []
    th = _append_when(lambda: pauser.count_paused > 0, a, seen, queue)
    ex = _read_on(driver, t)
    th.join(30)
    assert ex is not None and ex.payload == b"hot"
    assert seen == [False]  # it was spinning, not parked: a park would also end on the append
    assert w.hot


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_hot_spin_that_finds_nothing_parks_and_cools(queue: ac.Queue, driver: str) -> None:
    pauser = ac.Pauser.notify(min_park=30, max_park=30)
    t = queue.tailer(pauser=pauser)
    a = queue.appender()
    w = _hot(pauser, 50 * MS_NS)
    seen: list[bool] = []
    th = _append_when(lambda: reader_parked(queue), a, seen, queue)
    ex = _read_on(driver, t)
    th.join(30)
    assert ex is not None and ex.payload == b"hot"  # the notify ended the 30 s park
    assert seen == [True]
    assert not w.hot  # found long after the last find: cold, the next wait parks at once


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_close_ends_a_hot_spin(queue: ac.Queue, driver: str) -> None:
    pauser = ac.Pauser.notify(min_park=30, max_park=30)
    t = queue.tailer(pauser=pauser)
    _hot(pauser, 60 * 10**9)
    def close_when_spinning() -> None:
        _began_sync(pauser)
        t.close()
    th = threading.Thread(target=close_when_spinning)
    th.start()
    t0 = time.monotonic()
    with pytest.raises(ac.QueueClosedError):
        _read_on(driver, t)
    th.join(30)
    assert time.monotonic() - t0 < 30  # not the 60 s spin


def test_the_hot_budget_is_twice_the_gap_up_to_hot_ns() -> None:
    """native/hot.c's _hot_after: the gap since the last find, doubled, at
    most hot_ns; 0 from a gap of hot_ns on; each call is the next gap's start."""
    from aiochronicle._core._native import handle, hot_after, new_int64, new_uint32
    found = new_int64(0)
    h = handle(found)
    assert hot_after(h, 30_000) == 0  # the first find: no gap known
    assert time.monotonic_ns() - found[0] < 10**9  # set to now, on Python's clock
    budget = hot_after(h, 10**9)  # a gap of microseconds, at most a second away
    assert 0 < budget < 10**9
    found[0] -= 10**8  # 0.1 s ago
    assert 2 * 10**8 <= hot_after(h, 10**9) < 3 * 10**8
    found[0] -= 10**8
    assert hot_after(h, 15 * 10**7) == 15 * 10**7  # capped
    found[0] -= 10**9
    assert hot_after(h, 10**9) == 0  # cold
    with pytest.raises(TypeError):
        hot_after(handle(new_uint32()), 1)  # not an int64 cell
    with pytest.raises(TypeError):
        hot_after(h, "1")  # type: ignore[arg-type]


def test_only_notify_readers_stay_hot() -> None:
    """A timed park is never skipped for a spin: the pausers that do not
    notify have no hot spin."""
    for kind, make in PAUSERS.items():
        w: _waiter.WaitState = make()._w  # type: ignore[attr-defined]
        assert (w.hot_ns > 0) == (kind == "notify"), kind


MS_NS = 1_000_000


def test_one_wait_loop_in_the_package() -> None:
    """The waiter is the only module that spins, parks or plans steps."""
    pkg = Path(ac.__file__).parent
    for path in pkg.rglob("*.py"):
        text = path.read_text()
        if path.name in ("_waiter.py", "_native.py"):
            continue
        for word in ("park_read(", "_cq_park(", "_cq_spin(", ".plan(", "sched_yield("):
            assert word not in text, f"{path.name} waits itself ({word})"
    assert _waiter.wait_sync is not None and _waiter.wait_async is not None
