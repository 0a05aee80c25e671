"""The Park (native/park.c): what a task parked on ``Pauser.notify()`` awaits.

A Park is a future a Task accepts (asyncio's duck-typed protocol); the loop's
notify wake-up runs the parked tasks' steps at once, every other way a park
ends (unpause from any thread, the park timer, a close, a cancel) schedules
them with the loop.  Each test ends a park one way, with parks long enough
(a minute) that only that way can end it, on asyncio and uvloop; each fails
(the wait never ends, or ends wrong) when that way is broken.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from loops import KINDS, loop_factory

import aiochronicle as ac
import aiochronicle._core._native
from aiochronicle._core import _hot

LONG = 60.0  # a park no test waits out: only the way under test ends it
WITHIN = 30.0  # how long a wake-up may take before the test fails


class Ticks(Protocol):
    def tick(self, n: int) -> None: ...


class Seen:
    def __init__(self) -> None:
        self.calls: list[int] = []
        self.tasks: set[asyncio.Task[Any] | None] = set()
        self.ctx: list[str] = []

    def tick(self, n: int) -> None:
        self.calls.append(n)
        self.tasks.add(asyncio.current_task())
        self.ctx.append(VAR.get())


VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="none")


def _long() -> ac.Pauser:
    return ac.Pauser.notify(min_park=LONG, max_park=LONG)


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[ac.Queue]:
    with ac.open_queue(tmp_path / "q") as q:
        yield q


def _run(kind: str, coro: Any) -> Any:
    with asyncio.Runner(loop_factory=loop_factory(kind)) as r:
        return r.run(coro)


async def _parked(p: ac.Pauser, steps: int = 1) -> None:
    """Until the waiter of ``p`` has taken ``steps`` steps (a handshake)."""
    deadline = time.monotonic() + WITHIN
    while p.count_paused < steps:
        assert time.monotonic() < deadline, "the wait never parked"
        await asyncio.sleep(0)


async def _ended(fut: asyncio.Future[Any]) -> Any:
    """``fut``'s result once it ends (the test fails when it does not end in
    WITHIN seconds; it is not cancelled: a park that ignores cancels would
    hang the test)."""
    await asyncio.wait({fut}, timeout=WITHIN)
    assert fut.done(), "the park was never ended"
    return fut.result()


@pytest.mark.parametrize("kind", KINDS)
def test_a_commit_wakes_run_in_its_task_and_context(queue: ac.Queue, kind: str) -> None:
    """The notify wake-up steps the parked run() at once: handlers run in its
    task, with its context variables."""
    w = queue.appender().method_writer(Ticks)

    async def first() -> None:
        # the loop's notify socket is watched from the first park on it: from
        # this task, whose context its reader callback runs in
        VAR.set("first's")
        p = _long()
        f = asyncio.ensure_future(queue.tailer(pauser=p).read())
        await _parked(p)
        f.cancel()
        await asyncio.gather(f, return_exceptions=True)

    async def main() -> None:
        await asyncio.ensure_future(first())
        seen = Seen()
        p = _long()
        r = queue.tailer(pauser=p).method_reader(seen, interfaces=[Ticks])
        VAR.set("run's")
        task = asyncio.ensure_future(r.run())
        VAR.set("main's")
        for i in range(3):
            await _parked(p, i + 1)
            w.tick(i)
            while len(seen.calls) <= i:
                await asyncio.sleep(0)
        r.stop()
        assert await _ended(task) == 3
        assert seen.calls == [0, 1, 2]
        assert seen.tasks == {task} and seen.ctx == ["run's"] * 3

    _run(kind, main())


@pytest.mark.parametrize("kind", KINDS)
def test_unpause_from_another_thread_ends_every_park(queue: ac.Queue, kind: str) -> None:
    """Two run()s on two tailers of one pauser (two parks of one waiter state):
    stop() from a thread unpauses it; each run() ends on its own stop()."""

    async def main() -> None:
        p = _long()
        r1 = queue.tailer(pauser=p).method_reader(Seen(), interfaces=[Ticks])
        r2 = queue.tailer(pauser=p).method_reader(Seen(), interfaces=[Ticks])
        t1 = asyncio.ensure_future(r1.run())
        t2 = asyncio.ensure_future(r2.run())
        await _parked(p, 2)
        th = threading.Thread(target=r1.stop)
        th.start()
        assert await _ended(t1) == 0
        th.join()
        assert not t2.done()
        th = threading.Thread(target=r2.stop)
        th.start()
        assert await _ended(t2) == 0
        th.join()

    _run(kind, main())


@pytest.mark.parametrize("kind", KINDS)
def test_one_commit_wakes_two_tasks_of_one_pauser(queue: ac.Queue, kind: str) -> None:
    """Two reads parked with one pauser: one append wakes both."""

    async def main() -> None:
        p = _long()
        t1, t2 = queue.tailer(pauser=p), queue.tailer(pauser=p)
        f1 = asyncio.ensure_future(t1.read())
        f2 = asyncio.ensure_future(t2.read())
        await _parked(p, 2)
        queue.appender().append(b"both")
        got = [await _ended(f1), await _ended(f2)]
        assert [ex.payload for ex in got] == [b"both", b"both"]

    _run(kind, main())


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_while_parked_loses_nothing(queue: ac.Queue, kind: str) -> None:
    w = queue.appender().method_writer(Ticks)

    async def main() -> None:
        seen = Seen()
        p = _long()
        r = queue.tailer(pauser=p).method_reader(seen, interfaces=[Ticks])
        task = asyncio.ensure_future(r.run())
        await _parked(p)
        task.cancel()
        await asyncio.wait({task}, timeout=WITHIN)
        assert task.cancelled()
        w.tick(7)
        assert await r.run(until_end=True) == 1
        assert seen.calls == [7]

    _run(kind, main())


@pytest.mark.parametrize("kind", KINDS)
def test_close_while_parked_ends_run(queue: ac.Queue, kind: str) -> None:
    async def main() -> None:
        p = _long()
        t = queue.tailer(pauser=p)
        r = t.method_reader(Seen(), interfaces=[Ticks])
        task = asyncio.ensure_future(r.run())
        await _parked(p)
        t.close()
        assert await _ended(task) == 0

    _run(kind, main())


@pytest.mark.parametrize("kind", KINDS)
def test_the_park_timer_ends_parks(queue: ac.Queue, kind: str) -> None:
    """Nothing is appended: only the park timer ends each park (the wait then
    parks again), for one task and for two on one pauser (a timer each)."""

    async def main() -> None:
        p = ac.Pauser.notify(min_park=0.002, max_park=0.002)
        f1 = asyncio.ensure_future(queue.tailer(pauser=p).read())
        await _parked(p, 5)
        f2 = asyncio.ensure_future(queue.tailer(pauser=p).read())
        before = p.count_paused
        await _parked(p, before + 10)
        assert not f1.done() and not f2.done()
        f1.cancel()
        f2.cancel()
        await asyncio.gather(f1, f2, return_exceptions=True)

    _run(kind, main())


class Boom(BaseException):
    pass


@pytest.mark.parametrize("kind", KINDS)
def test_a_wake_up_serves_every_park_when_a_callback_raises(kind: str) -> None:
    """wake_parks() runs each park's callbacks, in each one's context; what one
    raises (a BaseException too) is raised after the others ran."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        parks: set[_hot.Park] = set()
        a = _hot.new_park(loop, parks)
        b = _hot.new_park(loop, parks)
        ran: list[str] = []

        def boom(park: _hot.Park) -> None:
            ran.append("boom")
            raise Boom

        def calm(park: _hot.Park) -> None:
            ran.append(VAR.get())

        ctx = contextvars.copy_context()
        ctx.run(VAR.set, "calm's")
        a.add_done_callback(boom)
        b.add_done_callback(calm, context=ctx)
        with pytest.raises(Boom):
            _hot.wake_parks(parks)
        assert sorted(ran) == ["boom", "calm's"] and not parks
        assert a.done() and b.done() and not a.cancelled()

    _run(kind, main())


@pytest.mark.parametrize("kind", KINDS)
def test_the_future_protocol(kind: str) -> None:
    """What a Task relies on: pending until ended, result() then None,
    cancel() raises CancelledError in the awaiting task, callbacks added
    after the end still run, set_result() and cancel() on an ended park."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        p = _hot.new_park(loop)
        assert asyncio.isfuture(p) and p.get_loop() is loop and not p.done()
        with pytest.raises(asyncio.InvalidStateError):
            p.result()
        task = asyncio.ensure_future(_await(p))
        await asyncio.sleep(0)
        p.set_result(None)
        assert await _ended(task) == "woke"
        assert p.result() is None and p.exception() is None
        with pytest.raises(asyncio.InvalidStateError):
            p.set_result(None)
        assert not p.cancel()
        late: list[_hot.Park] = []
        p.add_done_callback(late.append)
        await asyncio.sleep(0)
        assert late == [p]

        c = _hot.new_park(loop)
        task = asyncio.ensure_future(_await(c))
        await asyncio.sleep(0)
        task.cancel("why")
        await asyncio.wait({task}, timeout=WITHIN)
        assert task.cancelled() and c.cancelled()
        with pytest.raises(asyncio.CancelledError, match="why"):
            c.result()

        d = _hot.new_park(loop)
        assert d.remove_done_callback(late.append) == 0
        d.add_done_callback(late.append)
        assert d.remove_done_callback(late.append) == 1
        d.set_result(None)
        await asyncio.sleep(0)
        assert late == [p]

    _run(kind, main())


async def _await(p: _hot.Park) -> str:
    await p
    return "woke"
