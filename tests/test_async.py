"""The async tailer API on asyncio and uvloop, in debug mode, failing on anything
the loop's exception handler receives."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from workers import append_when_parked, parked

import aiochronicle as ac
from aiochronicle._objects._queue import cycles_of
from aiochronicle._waiting._notify import (
    PARKED_KEY,
    SLOTS,
    _sockname,
    notifier_for,
    slot_key,
    sweep_stale_names,
)

T = TypeVar("T")
Run = Callable[..., T]

PAUSERS: dict[str, Callable[[], ac.Pauser]] = {
    "busy": ac.Pauser.busy,
    "balanced": ac.Pauser.balanced,
    "sleepy": ac.Pauser.sleepy,
    "notify": ac.Pauser.notify,
    "yielding": ac.Pauser.yielding,
    "millis": lambda: ac.Pauser.millis(1),
}


@pytest.fixture(params=sorted(PAUSERS))
def pauser_factory(request: pytest.FixtureRequest) -> Callable[[], ac.Pauser]:
    return PAUSERS[request.param]


# -- reading ---------------------------------------------------------------------------------


def test_read_waits_for_an_append(run: Run[None], tmp_path: Path,
                                  pauser_factory: Callable[[], ac.Pauser]) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            a = q.appender()
            first = a.append(b"one")
            t = q.tailer(pauser=pauser_factory())
            assert (await t.read()) == ac.Excerpt(first, b"one")
            loop = asyncio.get_running_loop()
            loop.call_later(0.03, a.append, b"two")
            ex = await asyncio.wait_for(t.read(), 10)
            assert ex.payload == b"two" and ex.index == first + 1
            # a payload beyond the tailer's scratch buffer
            big = os.urandom(100_000)
            loop.call_later(0.01, a.append, big)
            assert (await asyncio.wait_for(t.read(), 10)).payload == big
            assert t.pauser.count_paused > 0

    run(main())


def test_default_pauser_is_balanced(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path) as q:
        t = q.tailer()
        assert t.pauser.mode is ac.PauserMode.BALANCED
        t.pauser = ac.Pauser.busy()
        assert t.pauser.mode is ac.PauserMode.BUSY
        with pytest.raises(TypeError):
            t.pauser = "busy"  # type: ignore[assignment]


def test_a_replaced_pauser_is_the_one_the_next_wait_uses(run: Run[None], tmp_path: Path) -> None:
    # a tailer keeps what its waits take (the pauser's wait state) from one wait
    # to the next: replacing the pauser must replace it, for read() and async for
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            a = q.appender()
            t = q.tailer(pauser=ac.Pauser.sleepy())
            first = t.pauser
            loop = asyncio.get_running_loop()
            loop.call_later(0.02, a.append, b"one")
            assert (await asyncio.wait_for(t.read(), 10)).payload == b"one"
            used = first.count_paused
            assert used > 0
            for second in (ac.Pauser.sleepy(), ac.Pauser.balanced()):
                t.pauser = second
                loop.call_later(0.02, a.append, b"two")
                async for ex in t:
                    assert ex.payload == b"two"
                    break
                assert second.count_paused > 0
                assert first.count_paused == used  # the old one no longer waits

    run(main())


def test_read_on_an_empty_queue_waits_for_the_first_file(run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            t = q.tailer(pauser=ac.Pauser.sleepy())
            asyncio.get_running_loop().call_later(0.05, lambda: q.appender().append(b"x"))
            assert (await asyncio.wait_for(t.read(), 10)).payload == b"x"

    run(main())


def test_async_for_yields_in_order_until_closed(run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            a = q.appender()
            t = q.tailer(pauser=ac.Pauser.balanced())
            got: list[bytes] = []

            async def consume() -> None:
                async for ex in t:
                    got.append(ex.payload)

            task = asyncio.create_task(consume())
            for i in range(300):
                a.append(b"%d" % i)
                if i % 50 == 0:
                    await asyncio.sleep(0.002)
            while len(got) < 300:
                await asyncio.sleep(0.005)
            await t.aclose()
            await asyncio.wait_for(task, 10)  # the iteration ended cleanly
            assert got == [b"%d" % i for i in range(300)]
            await t.aclose()  # idempotent
            with pytest.raises(ac.QueueClosedError):
                await t.read()

    run(main())


def test_aclose_everywhere_is_idempotent(run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        q = ac.open_queue(tmp_path)
        async with q.appender() as a, q.tailer() as t:
            a.append(b"x")
            assert (await t.read()).payload == b"x"
        await a.aclose()
        await t.aclose()
        await q.aclose()
        await q.aclose()
        assert q.closed

    run(main())


def test_closing_the_queue_ends_waiting_readers(run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        q = ac.open_queue(tmp_path)
        q.appender().append(b"x")
        tailers = [q.tailer(pauser=f()) for f in PAUSERS.values()]
        for t in tailers:
            await t.read()
        tasks = [asyncio.create_task(t.read()) for t in tailers]
        iters = [asyncio.create_task(_drain(t)) for t in (q.tailer(), q.tailer())]
        await asyncio.sleep(0)  # one turn: every read runs to its first wait
        assert not any(task.done() for task in tasks)
        threading.Timer(0.01, q.close).start()  # from another thread
        for task in tasks:
            with pytest.raises(ac.QueueClosedError):
                await asyncio.wait_for(task, 10)
        for it in iters:
            assert await asyncio.wait_for(it, 10) == 1

    run(main())


async def _drain(t: ac.Tailer) -> int:
    n = 0
    async for _ in t:
        n += 1
    return n


# -- cancellation and timeouts -----------------------------------------------------------------


def test_cancelled_read_loses_nothing(run: Run[None], tmp_path: Path,
                                      pauser_factory: Callable[[], ac.Pauser]) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            a = q.appender()
            t = q.tailer(pauser=pauser_factory())
            task = asyncio.create_task(t.read())
            await asyncio.sleep(0)  # one turn: the read runs to its first wait
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            index = a.append(b"kept")
            assert (await asyncio.wait_for(t.read(), 10)) == ac.Excerpt(index, b"kept")

    run(main())


@pytest.mark.parametrize("how", ["read", "anext"])
def test_timeouts_around_reads_lose_nothing_under_load(run: Run[None], tmp_path: Path,
                                                       pauser_factory: Callable[[], ac.Pauser],
                                                       how: str) -> None:
    """A writer appends in bursts while the reader keeps timing out: every excerpt
    still arrives exactly once, in order (``await read()``, and ``anext()`` as
    ``async for`` awaits, whose waits run inside the native awaitable)."""
    n = 2000

    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            a = q.appender()
            t = q.tailer(pauser=pauser_factory())
            rnd = random.Random(4)

            async def write() -> None:
                for i in range(n):
                    a.append(i.to_bytes(4, "little"))
                    if rnd.random() < 0.05:
                        await asyncio.sleep(rnd.random() * 0.002)

            writer = asyncio.create_task(write())
            got: list[int] = []
            timeouts = 0
            while len(got) < n:
                try:
                    async with asyncio.timeout(rnd.random() * 0.001):
                        ex = await (t.read() if how == "read" else anext(t))
                except TimeoutError:
                    timeouts += 1
                    continue
                got.append(int.from_bytes(ex.payload, "little"))
            await writer
            assert got == list(range(n))
            assert timeouts > 0
            assert t.read_nowait() is None

    run(main())


def test_wait_for_timeout(run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            t = q.tailer(pauser=ac.Pauser.busy())
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await t.read()
            assert 0.04 < time.monotonic() - t0 < 5

    run(main())


# -- the loop is never starved ---------------------------------------------------------------------


def test_busy_waiting_reader_does_not_starve_the_loop(run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            tailers = [q.tailer(pauser=ac.Pauser.busy()) for _ in range(2)]
            readers = [asyncio.create_task(t.read()) for t in tailers]
            # other tasks and timers run while both readers busy-wait: the
            # readers spin in bounded native slices between turns of the loop
            # (how long a turn takes is measured by bench/loop_turns.py)
            for _ in range(300):
                await asyncio.sleep(0)
            for _ in range(20):
                await asyncio.sleep(0.001)
            assert not any(r.done() for r in readers)
            q.appender().append(b"end")
            assert [(await r).payload for r in readers] == [b"end", b"end"]
            slices = [t.pauser.count_paused for t in tailers]
            assert all(n >= 20 for n in slices), slices  # each spun slice after slice

    run(main())


def test_backlog_does_not_starve_the_loop(run: Run[None], tmp_path: Path) -> None:
    n = 20_000

    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            q.appender().append_many([b"m"] * n)
            t = q.tailer()
            ticks = 0
            done = False

            async def ticker() -> None:
                nonlocal ticks
                while not done:
                    ticks += 1
                    await asyncio.sleep(0)

            tick_task = asyncio.create_task(ticker())
            count = 0
            async for _ in t:
                count += 1
                if count == n:
                    break
            done = True
            await tick_task
            assert ticks >= n // t.checkpoint_every // 2

    run(main())


def test_anext_of_a_ready_excerpt_never_loses_it(run: Run[None], tmp_path: Path) -> None:
    """``__anext__`` returns an awaitable that reads an excerpt already there in
    its first step (``native/hot.c``): dropped unawaited, or in a task cancelled
    before its first step, it reads nothing; awaited, it is the excerpt, once."""

    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            idx = [q.appender().append(b"m%d" % i) for i in range(4)]
            t = q.tailer()
            aw = t.__anext__()
            del aw  # dropped: nothing consumed
            task = asyncio.ensure_future(t.__anext__())
            task.cancel()  # before its first step
            with pytest.raises(asyncio.CancelledError):
                await task
            aw = t.__anext__()
            assert await aw == (idx[0], b"m0")
            with pytest.raises(RuntimeError):
                await aw  # taken already
            it = t.__anext__().__await__()  # the iterator protocol, step by step
            with pytest.raises(StopIteration) as stop:
                next(it)
            assert stop.value.value == (idx[1], b"m1")
            late = t.__anext__()  # reads when awaited, not when made
            assert t.read_nowait() == (idx[2], b"m2")
            assert await late == (idx[3], b"m3")
            assert t.read_nowait() is None
            got = []
            t.to_start()
            async for ex in t:
                got.append(ex)
                if len(got) == 4:
                    break
            assert got == [(i, b"m%d" % k) for k, i in enumerate(idx)]

    run(main())


# -- replay --------------------------------------------------------------------------------------


def test_until_end_stops_at_the_end_as_of_the_call(run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            a = q.appender()
            a.append_many([b"%d" % i for i in range(500)])
            t = q.tailer()
            got = []
            async for ex in t.until_end():
                got.append(ex.payload)
                if len(got) == 100:
                    a.append(b"later")  # written after the call: not part of the replay
            assert got == [b"%d" % i for i in range(500)]
            assert (await t.read()).payload == b"later"
            # an empty queue, and a tailer already at the end
            empty = ac.open_queue(tmp_path / "empty")
            assert [ex async for ex in empty.tailer().until_end()] == []
            empty.close()
            assert [ex async for ex in t.until_end()] == []
            back = q.tailer(direction=ac.TailerDirection.BACKWARD)
            assert len([ex async for ex in back.until_end()]) == 501

    run(main())


# -- wake-ups and idle cost ------------------------------------------------------------------------


def test_notify_wakes_an_async_reader_from_another_process(run: Run[None],
                                                           tmp_path: Path) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            q.appender()
            # parks of 30 s: only the notify can end them in time
            t = q.tailer(pauser=ac.Pauser.notify(min_park=30, max_park=30))
            ctx = mp.get_context("spawn")
            appended_at = ctx.Value("d", 0.0)
            proc = ctx.Process(target=append_when_parked,
                               args=(os.fspath(tmp_path), True, None, appended_at))
            proc.start()
            ex = await asyncio.wait_for(t.read(), 60)
            woke = time.monotonic()
            assert ex.payload == b"wake up"
            # timed from the append, not from the spawn: the park would last 30 s
            assert appended_at.value > 0 and woke - appended_at.value < 10
            assert 1 <= t.pauser.count_paused <= 3  # parked, not polling
            n = notifier_for(cycles_of(q).meta)
            assert n is not None and n._thread is None  # the loop's socket woke it
            await asyncio.get_running_loop().run_in_executor(None, proc.join, 20)

    run(main())


def test_parks_park_on_an_empty_queue(run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            for name in ("sleepy", "notify", "millis", "balanced"):
                t = q.tailer(pauser=PAUSERS[name]())
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(t.read(), 0.2)
                # balanced spins its first 10 ms in 50 µs slices
                assert t.pauser.count_paused < 700, (name, t.pauser.count_paused)

    run(main())


def _owner_slots(q: ac.Queue) -> dict[int, int]:
    return {i: v for i in range(SLOTS) if (v := q.table_store_get(slot_key(i)))}


def test_notify_parks_on_the_loop_and_frees_its_slot_on_close(run: Run[None],
                                                              tmp_path: Path) -> None:
    async def main() -> None:
        q = ac.open_queue(tmp_path)
        a = q.appender()
        t = q.tailer(pauser=ac.Pauser.notify(min_park=10, max_park=10))
        reader = asyncio.create_task(t.read())
        await parked(t.pauser)
        n = notifier_for(cycles_of(q).meta)
        assert n is not None
        assert n._thread is None  # no helper thread: the loop watches a socket
        owners = _owner_slots(q)
        assert list(owners.values()) == [owners[min(owners)]]  # one slot: this loop
        assert owners[min(owners)] & 0xFFFFFFFF == os.getpid()
        # this process's appender wakes it at once (its park is 10 s)
        a.append(b"now")
        ex = await asyncio.wait_for(reader, 5)
        assert ex.payload == b"now" and t.pauser.count_paused == 1
        reader = asyncio.create_task(t.read())
        await parked(t.pauser)
        await q.aclose()
        with pytest.raises(ac.QueueClosedError):
            await asyncio.wait_for(reader, 10)
        assert notifier_for(cycles_of(q).meta) is None  # a closed queue gets no new one
        with ac.open_queue(tmp_path) as again:
            assert _owner_slots(again) == {}  # the slot is free again

    run(main())


def test_notify_arms_and_reads_in_one_call(run: Run[None], tmp_path: Path) -> None:
    """A tailer's park on its loop sets the loop's parked bit and looks for data
    in one native call: armed with nothing there; with an excerpt there, it is
    returned and the bit is cleared again unless another task of the loop is
    parked; a slot no longer ours arms and reads nothing."""
    async def main() -> None:
        with ac.open_queue(tmp_path) as q:
            a = q.appender()
            t = q.tailer(pauser=ac.Pauser.notify())
            n = notifier_for(cycles_of(q).meta)
            assert n is not None
            w = n.loop_waker()
            assert w is not None
            parked_addr, slot, owner, ident = w.arm_args
            bit = 1 << slot

            def bits() -> int:
                return q.table_store_get(PARKED_KEY) or 0

            assert t._arm_read(parked_addr, slot, owner, ident, True) is None
            assert bits() & bit  # armed: an appender's commit now wakes the loop
            a.append(b"one")  # this process's appender took the bit and sent a datagram
            assert not bits() & bit
            a.append(b"two")
            # the first excerpt comes back; alone, the bit is cleared again
            ex = t._arm_read(parked_addr, slot, owner, ident, True)
            assert ex is not None and ex.payload == b"one"
            assert not bits() & bit
            # another task of the loop is parked: the bit stays for it
            ex = t._arm_read(parked_addr, slot, owner, ident, False)
            assert ex is not None and ex.payload == b"two"
            assert bits() & bit
            q.table_store_put(PARKED_KEY, 0)
            a.append(b"three")
            # a slot taken over by someone else: nothing armed, nothing read
            assert t._arm_read(parked_addr, slot, owner, ident + 1, True) is False
            assert not bits() & bit
            ex = t.read_nowait()
            assert ex is not None and ex.payload == b"three"

    run(main())


def test_a_park_after_a_longer_one_ends_on_its_own_timer(run: Run[None]) -> None:
    """The park timer is kept across parks; a park due before the kept timer
    fires gets a timer of its own, and one due after it is ended when it is
    due (the kept timer runs again), so every park still ends on its timer."""
    async def main() -> None:
        p = ac.Pauser.millis(20_000)
        task = asyncio.create_task(p.apause())  # a 20 s park, ended early
        await parked(p)
        p.unpause()
        await asyncio.wait_for(task, 10)
        # Pauser.millis parks `timeout` seconds on pause(timeout): 10 ms now,
        # which the 20 s timer of the first park must not stretch
        await asyncio.wait_for(p.apause(0.01), 10)
        short = ac.Pauser.millis(30)
        for _ in range(3):
            task = asyncio.create_task(short.apause())
            await parked(short)
            short.unpause()  # ended early: its timer is left for the next park
            await asyncio.wait_for(task, 10)
            # due after the kept timer fires: ended by it, run again if early
            await asyncio.wait_for(short.apause(), 10)
        assert short.count_paused == 6

    run(main())


def test_notify_falls_back_to_the_helper_thread_when_every_slot_is_taken(
        run: Run[None], tmp_path: Path) -> None:
    async def main() -> None:
        q = ac.open_queue(tmp_path)
        a = q.appender()
        # every slot owned by a live socket of someone else
        live = []
        for i in range(SLOTS):
            ident = (random.getrandbits(31) + 1) << 32 | (1 << 22) + i
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind(_sockname(ident))
            live.append(s)
            q.table_store_put(slot_key(i), ident)
        t = q.tailer(pauser=ac.Pauser.notify(min_park=10, max_park=10))
        reader = asyncio.create_task(t.read())
        await parked(t.pauser)
        n = notifier_for(cycles_of(q).meta)
        assert n is not None
        thread = n._thread
        assert thread is not None and thread.is_alive()
        a.append(b"via the thread")
        ex = await asyncio.wait_for(reader, 5)
        assert ex.payload == b"via the thread" and t.pauser.count_paused == 1
        reader = asyncio.create_task(t.read())
        await parked(t.pauser)
        await q.aclose()
        with pytest.raises(ac.QueueClosedError):
            await asyncio.wait_for(reader, 10)
        thread.join(5)
        assert not thread.is_alive()
        for s in live:  # looking for a dead owner's slot sent the live ones nothing
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(16)
            s.close()

    run(main())


def test_notify_slots_of_dead_owners_are_freed_and_taken(run: Run[None],
                                                         tmp_path: Path) -> None:
    async def main() -> None:
        async with ac.open_queue(tmp_path) as q:
            a = q.appender()
            # owners whose sockets are gone (their processes died): each bound
            # its name and was killed (where names are paths, the portable
            # build's, the file stays behind)
            # (random high bits: where names are paths, another run of this test
            # at the same time binds names of its own)
            dead = {i: (random.getrandbits(31) + 1) << 32 | (1 << 22) + i for i in range(SLOTS)}
            for i, ident in dead.items():
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                    s.bind(_sockname(ident))
                q.table_store_put(slot_key(i), ident)
            files = {i: os.fsdecode(_sockname(v)) for i, v in dead.items()
                     if not _sockname(v).startswith(b"\0")}
            # an appender that meets a dead owner's bit frees its slot and
            # removes the dead owner's file
            q.table_store_put(PARKED_KEY, 1 << 3)
            a.append(b"first")
            assert q.table_store_get(slot_key(3)) == 0
            assert q.table_store_get(PARKED_KEY) == 0
            assert not (3 in files and os.path.exists(files[3]))
            q.table_store_put(slot_key(3), dead[3])
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.bind(_sockname(dead[3]))
            # a loop looking for a slot takes a dead owner's
            t = q.tailer(pauser=ac.Pauser.notify(min_park=10, max_park=10))
            assert (await t.read()).payload == b"first"
            reader = asyncio.create_task(t.read())
            await parked(t.pauser)
            mine = {i: v for i, v in _owner_slots(q).items() if v & 0xFFFFFFFF == os.getpid()}
            assert len(mine) == 1
            # the dead owner whose slot the loop took has no file left either
            (taken,) = mine
            assert not (taken in files and os.path.exists(files[taken]))
            a.append(b"second")
            assert (await asyncio.wait_for(reader, 5)).payload == b"second"
            assert t.pauser.count_paused == 1
            for f in files.values():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f)

    run(main())


def test_notify_loops_of_one_process_have_a_slot_each(tmp_path: Path) -> None:
    got: dict[int, bytes] = {}
    both_parked = threading.Barrier(3)

    def reader(k: int, q: ac.Queue) -> None:
        async def main() -> None:
            t = q.tailer(pauser=ac.Pauser.notify(min_park=30, max_park=30))
            task = asyncio.ensure_future(t.read())
            await parked(t.pauser)
            await asyncio.get_running_loop().run_in_executor(None, both_parked.wait, 20)
            got[k] = (await asyncio.wait_for(task, 20)).payload

        asyncio.run(main())

    with ac.open_queue(tmp_path) as q:
        a = q.appender()
        threads = [threading.Thread(target=reader, args=(k, q)) for k in range(2)]
        for th in threads:
            th.start()
        both_parked.wait(20)
        mine = [v for v in _owner_slots(q).values() if v & 0xFFFFFFFF == os.getpid()]
        assert len(mine) == 2 and len(set(mine)) == 2
        a.append(b"both")  # one commit wakes both loops
        for th in threads:
            th.join(20)
        assert got == {0: b"both", 1: b"both"}


def test_notify_slot_of_a_dropped_loop_is_freed(tmp_path: Path) -> None:
    import gc

    async def park_once(q: ac.Queue) -> None:
        t = q.tailer(pauser=ac.Pauser.notify(min_park=30, max_park=30))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(t.read(), 0.1)

    with ac.open_queue(tmp_path) as q:
        asyncio.run(park_once(q))
        gc.collect()  # the loop is gone: its finalizer frees the slot
        assert _owner_slots(q) == {}
        asyncio.run(park_once(q))  # a new loop claims a slot again
        gc.collect()
        assert _owner_slots(q) == {}


def test_apause_unpause_and_timeout(run: Run[None]) -> None:
    async def main() -> None:
        p = ac.Pauser.millis(20_000)
        task = asyncio.create_task(p.apause())
        await parked(p)
        assert not task.done()
        threading.Thread(target=p.unpause).start()  # from another thread
        await asyncio.wait_for(task, 10)  # a tenth of the park
        b = ac.Pauser.busy()
        for _ in range(10):
            await b.apause()
        assert b.count_paused == 10 and b.time_paused_ns > 0
        with pytest.raises(TimeoutError):
            while True:
                await b.apause(0.01)
        s = ac.Pauser.sleepy()
        t0 = time.monotonic()
        for _ in range(20):
            await s.apause()
        assert time.monotonic() - t0 < 5

    run(main())


def test_a_sweep_removes_only_the_socket_files_nobody_is_bound_to() -> None:
    """Where socket names are paths (the portable build), a process killed after
    its queue was deleted leaves a file no slot names: the sweep removes the
    socket files of its prefix with no socket bound, and nothing else."""
    folder = tempfile.mkdtemp(prefix="acs", dir="/tmp")  # short: sun_path is 108 bytes
    try:
        dead, live_name = os.path.join(folder, "p.1"), os.path.join(folder, "p.2")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind(dead)  # closed: its owner is gone, the file stays
        live = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        live.bind(live_name)
        other = os.path.join(folder, "q.1")  # another prefix
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind(other)
        plain = os.path.join(folder, "p.3")  # not a socket
        Path(plain).write_bytes(b"x")
        try:
            assert sweep_stale_names(folder, "p.") == 1
            assert sorted(os.listdir(folder)) == ["p.2", "p.3", "q.1"]
            live.setblocking(False)
            with pytest.raises(BlockingIOError):
                live.recv(1)  # the look at the live name sent it nothing
            assert sweep_stale_names(folder, "p.") == 0
        finally:
            live.close()
        assert sweep_stale_names(folder, "p.") == 1  # its socket closed now
        assert sorted(os.listdir(folder)) == ["p.3", "q.1"]
    finally:
        shutil.rmtree(folder)


def test_the_first_loop_of_a_process_sweeps_dead_owners_files(tmp_path: Path) -> None:
    """A process's first notify park sweeps the names of owners that died with
    no slot left naming them: where names are paths, their files go (an owner
    alive keeps its own); where they are abstract, nothing is there to sweep."""
    ident = (random.getrandbits(31) + 1) << 32 | (1 << 22) + 7
    name = _sockname(ident)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(name)  # a dead owner of a queue deleted since
    # a park of 1 s, cut short after 50 ms: its claim (and the sweep) came first
    code = textwrap.dedent("""
        import asyncio, sys
        import aiochronicle as ac
        async def main():
            async with ac.open_queue(sys.argv[1]) as q:
                t = q.tailer(pauser=ac.Pauser.notify(min_park=1000, max_park=1000))
                try:
                    await asyncio.wait_for(t.read(), 0.05)
                except TimeoutError:
                    pass
        asyncio.run(main())
        """)
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "q")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if not name.startswith(b"\0"):
        assert not os.path.exists(name)
