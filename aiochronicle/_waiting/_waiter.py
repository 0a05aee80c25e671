"""The one place that waits: spin, yield, park, the futex and the loop's notify.

Readers never wait (as in Chronicle, where ``readingDocument()`` says "nothing
there" and the caller's pauser waits): a tailer reads without blocking and
hands this module a :class:`Probe`, what to look at while waiting (its next
header, through the native spin read) and what to arm (the queue's notify
word or the loop's parked bit, through the native arm-and-look).  A
:class:`~aiochronicle.Pauser` plans the steps; its :class:`WaitState` (the
stop word ``unpause()`` bumps, the parks in progress, the park timer) lives
here.  There is one sync driver, :func:`wait_sync`, and one async driver,
:func:`wait_async`; ``Pauser.pause()`` and ``apause()`` are one step of them
without a probe.

The drain (``wait_async`` with ``handle``, what ``MethodReader.run()`` waits
with) has one set of semantics: a task parks on a Park (native/park.c); the
loop's wake-up callback ends every park of that wake-up and steps each parked
task there and then, in its own context (it calls no handler itself); the
excerpts a wake-up finds are handed to ``handle`` in the task that awaits the
wait (``asyncio.current_task()`` is that task, its context variables are
its own), so whatever a handler raises, ``BaseException`` included, leaves
through that task's ``await``, and every other park of the wake-up is still
ended and its task stepped.
"""

from __future__ import annotations

import contextlib
import os
import time
import types
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from .._core._native import (
    BAD_STATE,
    NONE,
    NULL,
    Cell,
    NativeHandle,
    Park,
    Pointer,
    end_park,
    futex_wake,
    hot_after,
    new_int64,
    new_park,
    new_uint32,
    park_read,
    spin,
    yield_cpu,
)
from .._core._native import handle as native_handle
from ._notify import running_loop

if TYPE_CHECKING:
    import asyncio
    import threading

    from ._notify import Notifier

__all__ = ["PARK", "SPIN", "SYNC_SPIN_SLICE", "YIELD", "Probe", "WaitState", "unpause",
           "wait_async", "wait_sync"]

# what a pauser plans next
SPIN = 0   # poll in native code for up to N ns
YIELD = 1  # give the CPU (thread) or the loop (task) away once
PARK = 2   # sleep for N ns, unless unpaused (or notified) earlier

MS = 1_000_000
#: the longest a thread spins before it returns to the interpreter (signals)
SYNC_SPIN_SLICE = 1 * MS
#: a notify reader whose last two finds after a wait came less than this apart
#: (messages arrive faster than a park and its wake-up take) spins twice that
#: gap, at most this long, before its next park: about what a wake-up from
#: sleep costs here, so a spin that finds nothing costs at most about the
#: park after it (see WaitState.hot; 30 µs cost the bursty pipeline of
#: bench/pipeline.py 3-4% more CPU, 15 µs nothing measurable)
HOT_NS = 15_000
#: a park timer that fires this close to the park's end ends it (loop timers
#: have a resolution of 1 ms)
_TIMER_SLACK_NS = 1 * MS

_NONE = NONE
#: CLOCK_MONOTONIC in ns, as the native core reads it (a builtin: no GIL hand-off)
_mono_ns = time.monotonic_ns
_cq_spin = spin
_cq_park = park_read
_cq_futex_wake = futex_wake
_sched_yield = os.sched_yield
_running_loop = running_loop
_new_park = new_park
_hot_after = hot_after
_end_park = end_park

#: what a reader reads (an excerpt; the waiter hands it over untouched)
Excerpt = TypeVar("Excerpt")

#: plan(now, slice_ns, left_ns, timeout) -> (SPIN | YIELD | PARK, ns)
Plan = Callable[[int, int, "int | None", "float | None"], tuple[int, int]]


@types.coroutine
def _sleep0() -> Generator[None, None, None]:
    """``await asyncio.sleep(0)`` without importing asyncio here: a bare yield
    makes the running task give the loop one turn."""
    yield


def _wake_future(fut: Park) -> None:
    if not fut.done():
        fut.set_result(None)


class WaitState:
    """A pauser's waiting state (one per pauser; its waiter's): the stop word
    ``unpause()`` bumps to end a spin or park, the parks in progress, the
    park timer kept across parks, and the plan of the next step."""

    __slots__ = ("due", "found", "found_handle", "hot", "hot_ns", "notify", "parks",
                 "paused_ns", "plan", "reset", "slice_ns", "stop", "stop_handle", "sync_word",
                 "timer", "timer_due", "timer_loop")

    def __init__(self, plan: Plan, reset: Callable[[], None], slice_ns: int,
                 notify: bool) -> None:
        #: the pauser's planner and its reset (values of the pauser's)
        self.plan = plan
        self.reset = reset
        #: the longest a task spins before it gives the loop a turn
        self.slice_ns = slice_ns
        self.paused_ns = 0
        #: parks may be ended by the queue's notify (``Pauser.notify()``)
        self.notify = False
        # staying hot: a notify reader whose last two finds after a wait came
        # less than ``hot_ns`` apart spins for twice that gap
        # (at most ``hot_ns``) before its next park, once: ``hot`` is that
        # budget (0: park at once), set anew by each find after a wait.  At
        # rates where a park would end at once, the reader so keeps finding
        # the next excerpt in the spin rather than in a wake-up from sleep;
        # at lower rates it parks at once, as before; the end of a burst
        # costs a spin of twice the burst's gaps.  Timed parks (no notify)
        # never stay hot: hot_ns is 0.
        self.hot_ns = 0
        self.set_notify(notify)
        self.hot = 0
        #: when the last excerpt found after a wait was found (monotonic ns;
        #: native/hot.c's _hot_after reads and sets it)
        self.found: Cell = new_int64(0)
        self.found_handle = native_handle(self.found)
        self.stop: Cell = new_uint32()
        self.stop_handle = native_handle(self.stop)
        # the futures of the parks in progress; unpause() takes a copy from any
        # thread (adding, discarding and copying are each one C call on a set
        # of futures, which hash by identity: no lock needed)
        self.parks: set[Park] = set()
        # the notify word a thread is parked on (unpause() wakes it too)
        self.sync_word: Cell | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_loop: asyncio.AbstractEventLoop | None = None
        self.timer_due = 0
        self.due = 0

    def set_notify(self, notify: bool) -> None:
        """Whether the queue's notify may end this waiter's parks
        (``Pauser.notify()``); only then does it stay hot."""
        self.notify = notify
        self.hot_ns = HOT_NS if notify else 0


class Probe(Generic[Excerpt]):
    """What a kind of reader gives its waiter: how to read one without waiting,
    and what to arm and look at while waiting.  One per reader class, of
    plain functions that take the reader (``probe.read(reader)``), so that
    a reader holds no probe and no reference circle forms."""

    __slots__ = ("arm_read", "check", "closed", "finish", "guard", "notifier", "park_on", "read",
                 "spin_read", "spin_reads", "taken")

    def __init__(self, *, read: Callable[[Any], Excerpt | None],
                 spin_reads: Callable[[Any], bool],
                 spin_read: Callable[[Any, int, NativeHandle, int], Any],
                 arm_read: Callable[[Any, NativeHandle, int, NativeHandle, int, bool], Any],
                 park_on: Callable[[Any], Any],
                 finish: Callable[[Any, int, Excerpt | None], Excerpt | None],
                 taken: Callable[[Any, int], Excerpt | None],
                 closed: Callable[[Any], bool], check: Callable[[Any], None],
                 guard: Callable[[Any], threading.RLock],
                 notifier: Callable[[Any], Notifier | None]) -> None:
        #: the reader's non-blocking read (None: nothing there)
        self.read = read
        #: whether ``spin_read`` watches the next header (forward, ungated)
        self.spin_reads = spin_reads
        #: a native spin that watches the next header: ``(reader, budget_ns,
        #: stop_handle, seen) -> Excerpt | code``
        self.spin_read = spin_read
        #: set the loop's parked bit and look once more, in one native call:
        #: ``-> Excerpt | None (armed) | False (slot lost)``
        self.arm_read = arm_read
        #: the native struct a thread's park watches (``cq_park_read``; NULL:
        #: none, the park only sleeps)
        self.park_on = park_on
        #: finish a native read code outside the guard (``finish``) and
        #: inside it (``taken``)
        self.finish = finish
        self.taken = taken
        #: the reader is closed (``check`` raises the reader's error)
        self.closed = closed
        self.check = check
        #: the lock a close waits on until no native wait of the reader runs
        self.guard = guard
        #: the queue's notifier (looked up when a notify pauser waits)
        self.notifier = notifier


# -- the sync driver ---------------------------------------------------------
def wait_sync(w: WaitState, probe: Probe[Excerpt] | None, reader: Any = None,
              timeout: float | None = None, once: bool = False) -> Excerpt | None:
    """Wait in this thread.  With a probe: until the reader has an excerpt
    (returned) or ``timeout`` seconds pass (None returned).  Without one
    (``once``, ``Pauser.pause``): one step, ``timeout`` being the pauser's
    (``TimeoutError`` once it has passed since the first timed pause)."""
    notifier = None
    if probe is not None:
        w.reset()
        if w.notify:
            notifier = probe.notifier(reader)
        guard = probe.guard(reader)
    t0 = _mono_ns()
    deadline = None if timeout is None or once else t0 + int(timeout * 1e9)
    stop = w.stop
    try:
        while True:
            now = _mono_ns()
            if once:
                kind, ns = w.plan(now, SYNC_SPIN_SLICE, None, timeout)
                seen = stop[0]
                if kind == SPIN:
                    _cq_spin(ns, stop, seen)
                elif kind == YIELD:
                    _sched_yield()
                else:
                    _cq_park(NULL, ns, NULL, 0, stop, seen)
                return None
            assert probe is not None
            left = SYNC_SPIN_SLICE * 1000 if deadline is None else deadline - now
            if left <= 0:
                return None
            kind, ns = w.plan(now, SYNC_SPIN_SLICE, left, None)
            hot = w.hot if kind == PARK else 0
            if hot:  # found twice in quick succession: spin before this park
                w.hot = 0
                kind, ns = SPIN, min(hot, left)
            forward = probe.spin_reads(reader)
            ex = None
            n = _NONE
            with guard:
                # the wake counter first: a close after this look bumps it, so
                # the park below ends at once
                seen = stop[0]
                if probe.closed(reader):
                    probe.check(reader)
                if kind == SPIN:
                    if forward:
                        r = probe.spin_read(reader, ns, w.stop_handle, seen)
                        if type(r) is int:
                            n = r
                        else:
                            ex, n = r, 0
                    else:
                        _cq_spin(ns, stop, seen)
                elif kind == YIELD:
                    yield_cpu()
                else:
                    n = _park_sync(w, probe.park_on(reader) if forward else NULL, ns,
                                   notifier, seen)
                    if n == BAD_STATE and not forward:
                        n = _NONE
                if n >= 0 and ex is None:
                    ex = probe.taken(reader, n)
            ex = probe.finish(reader, n, ex) if n != _NONE else probe.read(reader)
            if ex is not None:
                if hot or kind == PARK:
                    w.hot = _hot_after(w.found_handle, w.hot_ns)
                return ex
    finally:
        w.paused_ns += _mono_ns() - t0


def _park_sync(w: WaitState, c: Pointer, ns: int, notifier: Notifier | None, seen: int) -> int:
    """Park this thread for ``ns``; with a notifier, on the queue's notify word
    (then a committed excerpt ends it).  Returns cq_park_read's code."""
    if notifier is None:
        return int(_cq_park(c, ns, NULL, 0, w.stop, seen))
    w.sync_word = notifier.word
    try:
        return int(_cq_park(c, ns, notifier.cell, notifier.horizon_ns, w.stop, seen))
    finally:
        w.sync_word = None


# -- the async driver --------------------------------------------------------
async def wait_async(w: WaitState, probe: Probe[Excerpt] | None, reader: Any = None,
                     until: Callable[[], bool] | None = None,
                     loop: asyncio.AbstractEventLoop | None = None,
                     handle: Callable[[Excerpt], bool] | None = None,
                     timeout: float | None = None, every: int = 1) -> Excerpt | None:
    """Wait in this task.  With a probe: until the reader has an excerpt
    (returned); with ``until``, None as soon as it is true after a step that
    found nothing (whoever makes it true calls ``unpause`` to end a spin or
    park).  Without one (``Pauser.apause``): one step, ``timeout`` being the
    pauser's.  ``loop``: the running loop, when the caller knows it.

    The drain (``handle``, with ``until``): the excerpts found after a park
    are handed to ``handle(excerpt)`` here, in this task, in order, and the
    wait goes on (from the pauser's first phase) while it returns True; the
    wait returns None when it returns False or ``until()`` is true, and gives
    the loop a turn every ``every`` excerpts handled."""
    t0 = _mono_ns()
    if probe is None:
        kind, ns = w.plan(t0, w.slice_ns, None, timeout)
        try:
            if kind == SPIN:
                stop = w.stop
                _cq_spin(ns, stop, stop[0])
                await _sleep0()
            elif kind == YIELD:
                await _sleep0()
            else:
                await _park_async(w, ns, None, 0, None, loop)
        finally:
            w.paused_ns += _mono_ns() - t0
        return None
    w.reset()
    slice_ns = w.slice_ns
    notifier = probe.notifier(reader) if w.notify else None
    guard = None
    waker = None  # this loop's wake-up socket (Pauser.notify), looked up once
    looked = False
    now = t0
    drained = False  # until() was false after the last excerpt a drain handled
    try:
        while True:
            if drained:
                drained = False  # nothing ran since until() was last asked
            elif until is not None and until():
                return None
            kind, ns = w.plan(now, slice_ns, None, None)
            hot = w.hot if kind == PARK else 0
            if hot:  # found twice in quick succession: spin before this park
                w.hot = 0
                kind, ns = SPIN, hot
            if kind == SPIN:
                if guard is None:
                    guard = probe.guard(reader)
                ex = None
                with guard:
                    # the wake counter first: a close after this look bumps it
                    stop = w.stop
                    seen = stop[0]
                    if probe.closed(reader):
                        probe.check(reader)
                    if probe.spin_reads(reader):
                        # spins in C with the GIL released; an excerpt comes
                        # back built (no cffi call, no copy through Python)
                        r = probe.spin_read(reader, ns, w.stop_handle, seen)
                        if type(r) is int:
                            n = r
                        else:
                            ex, n = r, 0
                    else:
                        n = _NONE
                        _cq_spin(ns, stop, seen)
                if n != _NONE:
                    ex = probe.finish(reader, n, ex)
                    if ex is not None:
                        if hot:
                            w.hot = _hot_after(w.found_handle, w.hot_ns)
                        return ex
                await _sleep0()
            elif kind == YIELD:
                await _sleep0()
            else:
                # announce the park (the loop's parked bit, else the futex),
                # then one more look before parking (see _notify)
                if loop is None:
                    loop = _running_loop()  # once per wait: it costs a getpid()
                if not looked and notifier is not None:
                    looked = True
                    waker = notifier.loop_waker(loop)
                    if waker is not None:
                        futs = waker.futs
                        parked, slot, owner, ident = waker.arm_args
                snapshot = None
                armed = False
                if waker is not None and waker.open:
                    # the parked bit and the look in one native call
                    got: Excerpt | Literal[False] | None = probe.arm_read(
                        reader, parked, slot, owner, ident, not futs)
                    if got is not None and got is not False:
                        return got
                    armed = got is None
                if not armed and notifier is not None:
                    snapshot = notifier.arm()
                    if snapshot is not None:
                        ex = probe.read(reader)
                        if ex is not None:
                            return ex
                if armed:
                    # _park_async on the loop's wake-up, inline (the common
                    # park of a notify reader: one coroutine less per wake-up)
                    # a Park (native/park.c), in the pauser's parks and the
                    # waker's: its wake-up runs this task's step at once
                    parks = w.parks
                    own = None
                    if parks:  # another task parks on this pauser: a timer of its own
                        fut = _new_park(loop, parks, futs)
                        own = loop.call_later(ns / 1e9, _wake_future, fut)
                    else:
                        # _retime's common case inline: the kept timer fires first
                        due = _mono_ns() + ns
                        if w.timer_loop is loop and w.timer_due <= due:
                            w.due = due
                        else:
                            _retime(w, ns, loop)
                        fut = _new_park(loop, parks, futs)
                    try:
                        await fut
                    finally:
                        if own is not None:
                            own.cancel()
                        _end_park(fut, parks, futs)
                else:
                    await _park_async(w, ns, notifier if snapshot is not None else None,
                                      snapshot or 0, None, loop)
            ex = probe.read(reader)
            if ex is not None:
                w.hot = _hot_after(w.found_handle, w.hot_ns)
                if handle is None:
                    return ex
                # the drain: what this wake-up found, handled in this task
                k = 0
                while ex is not None:
                    k += 1
                    if not handle(ex):
                        return None
                    if k >= every:
                        k = 0
                        await _sleep0()
                    if until is not None and until():
                        return None
                    ex = probe.read(reader)
                drained = until is not None
                w.reset()
            now = _mono_ns()
    finally:
        w.paused_ns += _mono_ns() - t0


async def _park_async(w: WaitState, ns: int, notifier: Notifier | None, snapshot: int,
                      wakers: set[Park] | None,
                      loop: asyncio.AbstractEventLoop | None) -> None:
    """Sleep ``ns`` on ``loop`` (the running loop); ``unpause`` ends it early,
    and so does a notify of the queue, given a notifier (and the futex
    snapshot), or the loop's own wake-up, given its set of parked futures
    (``wakers``).

    The timer that ends the park is kept for the next park: a park that a
    wake-up ends early leaves it running, and the next park (due later) uses
    it as it is, so parks ended by commits cost no timer each (a timer made
    and cancelled per park is a handle made and closed, and an extra turn of
    the loop, per wake-up with uvloop)."""
    if loop is None:
        loop = _running_loop()
    fut = _new_park(loop)
    parks = w.parks
    alone = not parks
    parks.add(fut)
    own = None
    if alone:
        _retime(w, ns, loop)
    else:  # another task parks on this pauser too: a timer of its own
        own = loop.call_later(ns / 1e9, _wake_future, fut)
    if wakers is not None:
        wakers.add(fut)
    elif notifier is not None:
        notifier.register(fut, snapshot)
    try:
        await fut
    finally:
        if own is not None:
            own.cancel()
        if wakers is not None:
            wakers.discard(fut)
        elif notifier is not None:
            notifier.unregister(fut)
        parks.discard(fut)


def _retime(w: WaitState, ns: int, loop: asyncio.AbstractEventLoop) -> None:
    """The park in progress on ``loop`` now ends ``ns`` from now.  The timer
    is kept when it fires no later (it then runs again when the park is due)."""
    due = _mono_ns() + ns
    w.due = due
    if w.timer_loop is loop and w.timer_due <= due:
        return  # the timer fires first and runs again when the park is due
    t = w.timer
    if t is not None and w.timer_loop is loop:
        t.cancel()
    w.timer = loop.call_later(ns / 1e9, _timer_fired, w, loop)
    w.timer_loop = loop
    w.timer_due = due


def _timer_fired(w: WaitState, loop: asyncio.AbstractEventLoop) -> None:
    """The park timer (on ``loop``): end the parks on it when the current park
    is due, else run again when it is."""
    if w.timer_loop is not loop:
        return  # replaced by a timer of another loop
    w.timer_loop = None
    w.timer = None
    parks = list(w.parks)
    if not parks:
        return  # nobody parked: the next park makes a new one
    left = w.due - _mono_ns()
    if left > _TIMER_SLACK_NS:
        w.timer = loop.call_later(left / 1e9, _timer_fired, w, loop)
        w.timer_loop = loop
        w.timer_due = w.due
        return
    for fut in parks:
        if fut.get_loop() is loop:
            _wake_future(fut)


# -- waking --------------------------------------------------------------------
def unpause(w: WaitState) -> None:
    """End the current spin or park of ``w``'s waiter early (from any thread);
    a no-op when it is not waiting."""
    stop = w.stop
    stop[0] = (stop[0] + 1) & 0xFFFFFFFF
    _cq_futex_wake(stop, 1 << 30)
    word = w.sync_word
    if word is not None:
        # a thread parked on the queue's notify word (others wake spuriously
        # and look again)
        _cq_futex_wake(word, 1 << 30)
    for fut in list(w.parks):
        with contextlib.suppress(RuntimeError):  # its loop is closed
            fut.get_loop().call_soon_threadsafe(_wake_future, fut)
