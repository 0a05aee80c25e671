"""Pausers: the phases of each kind, timeouts, counters, unpause, and the native
spin / futex / notify primitives under them."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

import pytest
from workers import append_when_parked

import aiochronicle as ac
from aiochronicle._core._native import ffi, lib
from aiochronicle._objects._queue import cycles_of
from aiochronicle._waiting._notify import NOTIFY_KEY, notifier_for
from aiochronicle._waiting._pauser import PARK, SPIN, YIELD, wait_state

MS = 1_000_000
US = 1_000


def plans(p: ac.Pauser, times_ns: list[int]) -> list[tuple[int, int]]:
    return [p._plan(t) for t in times_ns]


# -- phases ---------------------------------------------------------------------------


def test_factories_and_modes() -> None:
    assert ac.Pauser.busy().mode is ac.PauserMode.BUSY
    assert ac.Pauser.timed_busy().mode is ac.PauserMode.TIMED_BUSY
    assert ac.Pauser.yielding().mode is ac.PauserMode.YIELDING
    assert ac.Pauser.balanced().mode is ac.PauserMode.BALANCED
    assert ac.Pauser.sleepy().mode is ac.PauserMode.SLEEPY
    assert ac.Pauser.millis(3).mode is ac.PauserMode.MILLI
    assert ac.Pauser.millis(1, 5).mode is ac.PauserMode.MILLI
    assert ac.Pauser.notify().mode is ac.PauserMode.NOTIFY
    assert ac.Pauser.notify().notify_wakeup and not ac.Pauser.sleepy().notify_wakeup
    for mode in ac.PauserMode:
        p = mode.get()
        assert isinstance(p, ac.Pauser) and p.mode is mode
        assert mode.value in repr(p)
    with pytest.raises(ValueError):
        ac.Pauser.millis(5, 1)
    with pytest.raises(ValueError):
        ac.Pauser.busy(spin_slice=0)
    with pytest.raises(ValueError):
        ac.Pauser.notify(min_park=0.01, max_park=0.001)


def test_busy_always_spins() -> None:
    p = ac.Pauser.busy()
    assert {k for k, _ in plans(p, [1, 10**9, 10**12])} == {SPIN}


def test_balanced_spins_10ms_then_parks_with_backoff() -> None:
    p = ac.Pauser.balanced()
    t0 = 10**12
    assert p._plan(t0) == (SPIN, 10 * MS)
    kind, budget = p._plan(t0 + 4 * MS)
    assert kind == SPIN and budget == 6 * MS
    parks = [p._plan(t0 + 11 * MS) for _ in range(3000)]
    assert {k for k, _ in parks} == {PARK}
    ns = [n for _, n in parks]
    assert ns[0] == 200 * US
    assert ns[1] == 200 * US + (200 * US >> 6) + 10 * US
    assert all(b >= a for a, b in itertools.pairwise(ns))
    assert ns[-1] == 50 * MS
    p.reset()
    assert p._plan(t0 + 10**9) == (SPIN, 10 * MS)
    assert ac.Pauser.balanced_up_to_millis(5)._plan(0)[0] == SPIN


def test_sleepy_yields_then_parks() -> None:
    p = ac.Pauser.sleepy()
    t0 = 10**12
    assert p._plan(t0) == (YIELD, 0)
    assert p._plan(t0 + 40 * US) == (YIELD, 0)
    assert p._plan(t0 + 60 * US) == (PARK, 500 * US)
    assert p._plan(t0 + 70 * US)[1] > 500 * US


def test_millis() -> None:
    p = ac.Pauser.millis(3)
    assert plans(p, [0, 10**9]) == [(PARK, 3 * MS), (PARK, 3 * MS)]
    grow = ac.Pauser.millis(1, 4)
    ns = [grow._plan(10**12)[1] for _ in range(400)]
    assert ns[0] == 1 * MS and ns[-1] == 4 * MS


def test_yielding_spins_min_busy_minus_one_times() -> None:
    p = ac.Pauser.yielding(3)
    assert [k for k, _ in plans(p, [0] * 5)] == [SPIN, SPIN, YIELD, YIELD, YIELD]
    p.reset()
    assert p._plan(0)[0] == SPIN
    with pytest.raises(ValueError):
        ac.Pauser.yielding(0)


def test_notify_phases() -> None:
    p = ac.Pauser.notify(spin=0.001, min_park=0.002, max_park=0.003)
    t0 = 10**12
    assert p._plan(t0) == (SPIN, 1 * MS)
    assert p._plan(t0 + 2 * MS) == (PARK, 2 * MS)


# -- pause(), timeouts, counters --------------------------------------------------------


@pytest.mark.parametrize("factory", [ac.Pauser.busy, ac.Pauser.timed_busy, ac.Pauser.yielding,
                                     ac.Pauser.balanced, ac.Pauser.sleepy, ac.Pauser.notify])
def test_pause_with_timeout_raises_after_timeout(factory: object) -> None:
    p = factory()  # type: ignore[operator]
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        while True:
            p.pause(0.03)
    elapsed = time.monotonic() - t0
    assert 0.03 <= elapsed < 5
    assert p.count_paused > 0
    assert p.time_paused_ns > 0
    # reset restarts the clock of the timeout
    p.reset()
    p.pause(0.03)


def test_milli_pause_timeout_parks_instead_of_raising() -> None:
    p = ac.Pauser.millis(1000)
    # a timed pause parks for its timeout, not for the pauser's 1 s
    assert p._timed_plan(time.monotonic_ns(), 0.01) == (PARK, 10 * MS)
    t0 = time.monotonic()
    for _ in range(3):
        p.pause(0.01)
    assert time.monotonic() - t0 < 1.0  # three 1 s parks would take 3 s; one at least 1 s
    assert p.count_paused == 3


def test_counters_and_statistics() -> None:
    p = ac.Pauser.millis(1)
    for _ in range(5):
        p.pause()
    s = p.statistics()
    assert s == ac.PauserStatistics(ac.PauserMode.MILLI, 5, p.time_paused_ns)
    assert s.time_paused_ns >= 5 * MS
    with pytest.raises(AttributeError):
        s.count_paused = 0  # type: ignore[misc]


def test_one_planner_cuts_steps_and_counts_them() -> None:
    """Every waiter takes its next step from its pauser's plan: a spin cut to the
    waiter's slice, any step to what is left of its deadline, each step
    counted once, a step refused by the timeout not counted."""
    busy = ac.Pauser.busy()
    now = time.monotonic_ns()
    assert wait_state(busy).plan(now, 50_000) == (0, 50_000)  # SPIN, the async slice
    assert wait_state(busy).plan(now, 1_000_000, 20_000) == (0, 20_000)  # the deadline is nearer
    sleepy = ac.Pauser.sleepy()
    wait_state(sleepy).plan(now, 50_000)  # yields first
    kind, ns = wait_state(sleepy).plan(now + 10 * MS, 50_000)  # then parks, 500 µs at first
    assert kind == 2 and ns == 500_000
    assert wait_state(sleepy).plan(now + 20 * MS, 50_000, 100_000) == (2, 100_000)
    assert (busy.count_paused, sleepy.count_paused) == (2, 3)
    timed = ac.Pauser.timed_busy()
    wait_state(timed).plan(now, 1000, None, 0.001)
    with pytest.raises(TimeoutError):
        wait_state(timed).plan(now + 2 * MS, 1000, None, 0.001)
    assert timed.count_paused == 1


def test_unpause_wakes_a_parked_thread() -> None:
    park = 20.0
    p = ac.Pauser.millis(int(park * 1000))
    started, done = threading.Event(), threading.Event()

    def waiter() -> None:
        started.set()
        p.pause()
        done.set()

    th = threading.Thread(target=waiter)
    th.start()
    started.wait()
    # an unpause() that lands before the waiter has read its counter is lost
    # (it was not waiting yet): unpause until it wakes, well within one park
    deadline = time.monotonic() + park / 2
    while not done.wait(0.01):
        assert time.monotonic() < deadline, "unpause() did not end the park"
        p.unpause()
    th.join()
    assert p.count_paused == 1


def test_unpause_without_waiter_is_harmless() -> None:
    p = ac.Pauser.sleepy()
    p.unpause()
    p.unpause()
    p.pause()


# -- native primitives -------------------------------------------------------------------


def test_native_spin_budget_and_stop() -> None:
    stop = ffi.new("uint32_t *")
    t0 = time.monotonic_ns()
    assert lib.cq_spin(2 * MS, stop, 0) == lib.CQ_SPIN_TIMEOUT
    assert time.monotonic_ns() - t0 >= 2 * MS
    # a changed stop word ends a long spin at once (the GIL is released meanwhile)
    result: list[int] = []
    budget = 10 * 10**9
    started = threading.Event()

    def spin() -> None:
        started.set()
        result.append(lib.cq_spin(budget, stop, 0))

    th = threading.Thread(target=spin)
    t0 = time.monotonic_ns()
    th.start()
    started.wait()
    stop[0] = 1  # (a change before the spin starts ends it as well)
    th.join(budget / 1e9)
    assert result == [lib.CQ_SPIN_STOPPED]
    assert time.monotonic_ns() - t0 < budget  # it did not spin out its budget


def test_native_spin_read_returns_within_budget_and_on_commit(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path) as q:
        a = q.appender()
        a.append(b"first")
        t = q.tailer()
        assert t.read_nowait() is not None
        stop = ffi.new("uint32_t *")
        t0 = time.monotonic_ns()
        assert lib.cq_spin_read(t._c, 3 * MS, stop, 0) == lib.CQ_NONE
        elapsed = time.monotonic_ns() - t0
        assert 3 * MS <= elapsed < 2 * 10**9
        # a commit in another thread ends a long spin with the excerpt
        th = threading.Timer(0.02, a.append, args=(b"second!",))
        th.start()
        t0 = time.monotonic_ns()
        n = lib.cq_spin_read(t._c, 10 * 10**9, stop, 0)
        th.join()
        assert n == len(b"second!")
        assert ffi.unpack(t._c.data, n) == b"second!"
        assert time.monotonic_ns() - t0 < 5 * 10**9
        assert t.read_nowait() is None


def test_native_spin_read_stays_inside_the_mapping() -> None:
    buf = ffi.new("uint8_t[]", 16)
    store = ffi.new("cq_store *")
    store.base = buf
    store.map_len = 16
    store.align = 4
    t = ffi.new("cq_tailer *")
    t.store = store
    t.pos = 14  # a header would run past the mapping
    t0 = time.monotonic_ns()
    assert lib.cq_spin_read(t, 10 * 10**9, ffi.NULL, 0) == lib.CQ_NEED_MAP
    assert time.monotonic_ns() - t0 < 10**9
    t.pos = 12  # in the mapping, nothing written: spins for the budget
    assert lib.cq_spin_read(t, 1 * MS, ffi.NULL, 0) == lib.CQ_NONE
    # no file to poll: it spends the budget (Python then looks for the file)
    t.store = ffi.NULL
    t0 = time.monotonic_ns()
    assert lib.cq_spin_read(t, 2 * MS, ffi.NULL, 0) == lib.CQ_BAD_STATE
    assert time.monotonic_ns() - t0 >= 2 * MS


def test_native_futex() -> None:
    word = ffi.new("uint32_t *", 7)
    assert lib.cq_futex_wait(word, 8, 10**9) == lib.CQ_WAIT_CHANGED
    assert lib.cq_futex_wait(word, 7, 2 * MS) == lib.CQ_WAIT_TIMEOUT
    result: list[int] = []
    th = threading.Thread(target=lambda: result.append(lib.cq_futex_wait(word, 7, 10 * 10**9)))
    th.start()
    # the portable path (native/platform.h) polls the word: it sees a change,
    # which every waker makes before it wakes, and not a bare wake-up
    portable = ffi.string(lib.cq_platform()) == b"portable"
    deadline = time.monotonic() + 5
    while not result and time.monotonic() < deadline:
        time.sleep(0.01)
        if portable:
            word[0] = 8
        lib.cq_futex_wake(word, 1)
    th.join(5)
    if portable:  # changed before the wait began, or during it
        assert result in ([lib.CQ_WAIT_WOKEN], [lib.CQ_WAIT_CHANGED])
    else:
        assert result == [lib.CQ_WAIT_WOKEN]


def test_native_notify_touches_nothing_without_waiters() -> None:
    cell = ffi.new("int64_t *")
    word, until = lib.cq_notify_word(cell), lib.cq_notify_until(cell)
    assert lib.cq_notify(cell) == lib.CQ_NOTIFY_IDLE and cell[0] == 0
    snap = lib.cq_notify_arm(cell, 50 * MS)
    assert until[0] != 0 and snap == word[0] == 0
    assert lib.cq_notify(cell) == lib.CQ_NOTIFY_WOKE and word[0] == 1
    # a later arm never lowers `until`; the counter is kept
    high = until[0]
    lib.cq_notify_arm(cell, 1 * MS)
    assert until[0] == high and word[0] == 1
    until[0] = (until[0] - 10_000) & 0xFFFFFFFF  # every waiter's horizon has passed
    assert lib.cq_notify(cell) == lib.CQ_NOTIFY_IDLE
    assert until[0] == 0 and word[0] == 1


def test_appender_finds_the_notify_value_created_after_it(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path) as q:
        a = q.appender()
        assert q.table_store_get(NOTIFY_KEY) is None  # the metadata stays Java's
        q.tailer("other")  # another key first: the appender's probe walks over it
        a.append(b"x")
        n = notifier_for(cycles_of(q).meta)
        assert n is not None and q.table_store_get(NOTIFY_KEY) == 0
        w = a._notify_watch  # type: ignore[attr-defined]
        assert w.cell == ffi.NULL
        a.append(b"y")  # the probe fires: the appender now watches the value
        assert w.cell != ffi.NULL
        assert lib.cq_notify_word(w.cell)[0] == 0
        n.arm()
        a.append(b"z")  # someone is parked: this commit bumps the counter
        assert lib.cq_notify_word(w.cell)[0] == 1
        b = q.appender()  # a new appender finds the value at once
        assert b._notify_watch.cell != ffi.NULL  # type: ignore[attr-defined]


# -- notify across processes ----------------------------------------------------------------


def test_notify_wakes_a_thread_parked_on_another_process(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ac.open_queue(tmp_path) as q:
        q.appender()  # creates the notify values
        # parks of 30 s: only the notify can end them in time
        t = q.tailer(pauser=ac.Pauser.notify(min_park=30, max_park=30))
        appended_at = ctx.Value("d", 0.0)
        proc = ctx.Process(target=append_when_parked,
                           args=(os.fspath(tmp_path), True, None, appended_at))
        proc.start()
        ex = t.read_blocking(timeout=60)
        woke = time.monotonic()
        proc.join(20)
        assert ex is not None and ex.payload == b"wake up"
        # timed from the append, not from the spawn: the park would last 30 s
        assert appended_at.value > 0 and woke - appended_at.value < 10
        assert 1 <= t.pauser.count_paused <= 3  # parked, not polling


def test_notify_reaches_an_appender_started_before_the_first_waiter(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ac.open_queue(tmp_path) as q:
        ready = ctx.Event()
        appended_at = ctx.Value("d", 0.0)
        proc = ctx.Process(target=append_when_parked,
                           args=(os.fspath(tmp_path), True, ready, appended_at))
        proc.start()
        assert ready.wait(60)  # its appender exists; the notify value does not yet
        assert q.table_store_get(NOTIFY_KEY) is None
        t = q.tailer(pauser=ac.Pauser.notify(min_park=30, max_park=30))
        ex = t.read_blocking(timeout=60)
        woke = time.monotonic()
        proc.join(20)
        assert ex is not None and ex.payload == b"wake up"
        assert appended_at.value > 0 and woke - appended_at.value < 10
        assert 1 <= t.pauser.count_paused <= 3  # parked, not polling


def test_writers_that_do_not_notify_are_found_by_polling(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with ac.open_queue(tmp_path) as q:
        q.appender()
        t = q.tailer(pauser=ac.Pauser.notify(min_park=0.005, max_park=0.02))
        proc = ctx.Process(target=append_when_parked, args=(os.fspath(tmp_path), False))
        proc.start()
        ex = t.read_blocking(timeout=60)
        proc.join(20)
        assert ex is not None and ex.payload == b"wake up"


def test_read_blocking_timeout_and_close_from_another_thread(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path) as q:
        for pauser in (ac.Pauser.busy(), ac.Pauser.sleepy(), ac.Pauser.notify()):
            t = q.tailer(pauser=pauser)
            t0 = time.monotonic()
            assert t.read_blocking(timeout=0.05) is None
            assert 0.05 <= time.monotonic() - t0 < 5
            closer = threading.Timer(0.05, t.close)
            closer.start()
            with pytest.raises(ac.QueueClosedError):
                t.read_blocking(timeout=20)
            closer.join()
        # closing the whole queue ends a blocked read too
        t = q.tailer(pauser=ac.Pauser.millis(10_000))
        closer = threading.Timer(0.05, q.close)
        closer.start()
        t0 = time.monotonic()
        with pytest.raises(ac.QueueClosedError):
            t.read_blocking(timeout=30)
        assert time.monotonic() - t0 < 10
        closer.join()


def test_parks_park_on_an_empty_queue_and_at_an_end(tmp_path: Path) -> None:
    """No file yet (and later the end of the data): parking pausers park
    instead of polling in a loop."""
    with ac.open_queue(tmp_path) as q:
        for make in (ac.Pauser.sleepy, ac.Pauser.notify, lambda: ac.Pauser.millis(5)):
            t = q.tailer(pauser=make())
            assert t.read_blocking(timeout=0.2) is None
            assert t.pauser.count_paused < 500, (t.pauser, t.pauser.count_paused)
        q.appender().append(b"x")
        t = q.tailer(pauser=ac.Pauser.notify())
        assert t.read_blocking(timeout=1) is not None
        assert t.read_blocking(timeout=0.2) is None
        assert t.pauser.count_paused < 500
