"""asyncio support of Tailer: the base class that waits.

A tailer waits with its :class:`~aiochronicle.Pauser`.  On the event loop a
spin is one native call of at most ``pauser.spin_slice`` (50 µs by default)
that polls the tailer's next header and returns the moment an excerpt is
committed; between two slices the task gives the loop a turn
(``await asyncio.sleep(0)``), so other tasks keep running even with a busy
pauser.  Parks are loop timers (ended early by ``unpause()``, closing the
tailer, or, with ``Pauser.notify()``, an aiochronicle appender's commit).

Reads never lose an excerpt to cancellation: the native read only advances
the tailer when it returns an excerpt, and ``read()`` returns it without
awaiting anything after that.
"""

from __future__ import annotations

import contextvars
import threading
import time
import types
from collections.abc import AsyncIterator, Callable, Generator
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from ._errors import QueueClosedError
from ._excerpt import Excerpt, TailerDirection
from ._native import BAD_STATE, NONE, NULL, HotTailer, spin, yield_cpu
from ._notify import LoopWaker, Notifier, notifier_for, running_loop
from ._pauser import PARK, SPIN, SYNC_SPIN_SLICE, YIELD, Pauser

if TYPE_CHECKING:
    import asyncio

    from ._queueview import QueueView
    from ._tablestore import TableStore

__all__ = ["AsyncTailerMixin"]

_NONE = NONE
_cq_spin = spin
#: CLOCK_MONOTONIC in ns, as the native core reads it (a builtin: no GIL hand-off)
_mono_ns = time.monotonic_ns
_running_loop = running_loop


@types.coroutine
def _sleep(_: float) -> Generator[None, None, None]:
    """``await asyncio.sleep(0)`` without importing asyncio here: a bare yield
    makes the running task give the loop one turn."""
    yield


class AsyncTailerMixin(HotTailer):
    """The waiting side of :class:`~aiochronicle.Tailer`, its base: ``await
    read()``, ``async for``, ``read_blocking()``, ``until_end()`` and
    ``aclose()``, over the native reads of ``HotTailer`` (``native/hot.c``:
    ``read_nowait``, ``_spin_read``, ``checkpoint_every``; ``read()`` and
    ``async for`` give the loop a turn at least once per ``checkpoint_every``
    excerpts).

    The tailer sets what it is made with (``queue``, ``_c`` its native struct,
    ``_spin_reads``) and provides the steps below that are its own: how a
    native read code ends (``_after``, ``_taken``), closing, the closed
    checks, and its queue's table store (where the notify values live).
    """

    # set by the tailer when it is made (no class defaults: on CPython 3.11 an
    # instance attribute that shadows a class attribute is read unspecialised)
    queue: QueueView
    #: the native ``cq_tailer`` (parks of ``read_blocking`` read through it)
    _c: Any
    _closed: bool
    #: native reads while waiting (set by the tailer as its direction changes)
    _spin_reads: bool
    _pauser: Pauser | None = None
    _notifier_of_queue: Notifier | None = None
    _wait_guard: threading.RLock | None = None

    if TYPE_CHECKING:
        def read_nowait(self) -> Excerpt | None:
            """The next excerpt, or None (``HotTailer``'s, typed)."""

    # -- the tailer's own steps ----------------------------------------------
    def close(self) -> None:
        """Close the tailer (the tailer's own)."""
        raise NotImplementedError

    def _check(self) -> None:
        """Raise QueueClosedError when the tailer or its queue is closed."""
        raise NotImplementedError

    def _gone(self) -> bool:
        """True once the tailer or its queue is closed."""
        raise NotImplementedError

    def _table_store(self) -> TableStore | None:
        """The metadata table store of the tailer's queue (None: it has none)."""
        raise NotImplementedError

    @property
    def direction(self) -> TailerDirection:
        """FORWARD, BACKWARD or NONE (the tailer's own)."""
        raise NotImplementedError

    def _taken(self, n: int) -> Excerpt | None:
        """The excerpt a native read returned ``n`` (its length) for (guard held)."""
        raise NotImplementedError

    def _after(self, n: int, ex: Excerpt | None) -> Excerpt | None:
        """Finish a native read outside the guard (``n``: its code)."""
        raise NotImplementedError

    # -- the pauser --------------------------------------------------------
    @property
    def pauser(self) -> Pauser:
        """How this tailer waits (default: ``Pauser.balanced()``)."""
        p = self._pauser
        if p is None:
            p = self._pauser = Pauser.balanced()
        return p

    @pauser.setter
    def pauser(self, value: Pauser) -> None:
        if not isinstance(value, Pauser):
            raise TypeError(f"expected a Pauser, got {type(value).__name__}")
        self._pauser = value

    def _guard(self) -> threading.RLock:
        g = self._wait_guard
        if g is None:
            g = self._wait_guard = threading.RLock()
        return g

    def _abort_wait(self) -> None:
        """Called when the tailer closes (from any thread): end a spin or park
        in progress and wait until no native wait of it runs any more."""
        p = self._pauser
        if p is not None:
            p.unpause()
        g = self._wait_guard
        if g is not None:
            with g:
                pass

    def _notifier(self, pauser: Pauser) -> Notifier | None:
        if not pauser.notify_wakeup:
            return None
        n = self._notifier_of_queue
        if n is None:  # looked up once (the queue keeps it until it closes)
            n = self._notifier_of_queue = notifier_for(self._table_store())
        return n

    # -- async -------------------------------------------------------------
    async def read(self) -> Excerpt:
        """The next excerpt, waiting for it with the tailer's pauser.

        Cancelling it loses nothing: the next read returns the excerpt this
        one would have returned.  Wrap it in ``asyncio.timeout()`` to bound the
        wait.

        Raises:
            QueueClosedError: the tailer or its queue is (or gets) closed.
        """
        if self._unyielded >= self.checkpoint_every:
            self._unyielded = 0
            await _sleep(0)
        ex = self.read_nowait()
        if ex is not None:
            self._unyielded += 1
            return ex
        ex = await self._wait(None)
        assert ex is not None
        return ex

    async def _wait(self, until: Callable[[], bool] | None,
                    loop: asyncio.AbstractEventLoop | None = None,
                    handle: Callable[[Excerpt], bool] | None = None) -> Excerpt | None:
        """Wait for the next excerpt with the pauser; with ``until``, return
        None as soon as it is true after a step that found nothing (whoever
        makes it true calls ``pauser.unpause()`` to end a spin or park).
        ``loop``: the running loop, when the caller knows it (looking it up
        costs a system call, getpid(), per wait).

        ``handle`` (with ``until``): while parked on the loop's wake-up socket
        (``Pauser.notify()``), the excerpts a wake-up finds are handed to
        ``handle(excerpt)`` right in the loop's callback, in order, and the
        park goes on (re-armed, as if parked anew) while it returns True
        (which it does only while ``until()`` is false; ``until()`` is looked
        at when a wake-up comes); otherwise the wait ends, and returns None
        when ``until()`` is then true (the caller takes over what ``handle``
        left it) without reading further."""
        pauser = self._pauser
        if pauser is None:
            pauser = self.pauser
        pauser.reset()
        slice_ns = pauser.spin_slice_ns
        notifier = None
        if pauser.notify_wakeup:
            notifier = self._notifier_of_queue
            if notifier is None:
                notifier = self._notifier(pauser)
        guard = None
        waker = None  # this loop's wake-up socket (Pauser.notify), looked up once
        drain: Callable[[], bool] | None = None
        looked = False
        t0 = now = _mono_ns()
        try:
            while True:
                if until is not None and until():
                    return None
                kind, ns = pauser.next_step(now, slice_ns)
                if kind == SPIN:
                    if guard is None:
                        guard = self._guard()
                    ex = None
                    with guard:
                        # the wake counter first: a close after this look bumps it
                        stop = pauser.stop_word
                        seen = stop[0]
                        if self._closed:
                            self._check()
                        if self._spin_reads:  # native reads while waiting (Tailer._bind)
                            # spins in C with the GIL released; an excerpt comes
                            # back built (no cffi call, no copy through Python)
                            r = self._spin_read(ns, pauser.stop_address, seen)
                            if type(r) is int:
                                n = r
                            else:
                                ex, n = r, 0
                        else:
                            n = _NONE
                            _cq_spin(ns, stop, seen)
                    if n != _NONE:
                        ex = self._after(n, ex)
                        if ex is not None:
                            self._unyielded = 1
                            return ex
                    await _sleep(0)
                elif kind == YIELD:
                    await _sleep(0)
                else:
                    # announce the park (the loop's parked bit, else the
                    # futex), then one more look before parking (see _notify)
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
                        got: Excerpt | Literal[False] | None = self._arm_read(
                            parked, slot, owner, ident, not futs)
                        if got is not None and got is not False:
                            self._unyielded = 1
                            return got
                        armed = got is None
                    if not armed and notifier is not None:
                        snapshot = notifier.arm()
                        if snapshot is not None:
                            ex = self.read_nowait()
                            if ex is not None:
                                self._unyielded = 1
                                return ex
                    if armed and waker is not None and handle is not None \
                            and until is not None:
                        if drain is None:
                            drain = self._drainer(handle, until, pauser, loop, waker)
                        await pauser.apark(ns, None, 0, None, loop, waker.drains, drain)
                        if until():
                            return None  # the caller takes over (see handle)
                    else:
                        await pauser.apark(ns, notifier if snapshot is not None else None,
                                           snapshot or 0, futs if armed else None, loop)
                self._unyielded = 0
                ex = self.read_nowait()
                if ex is not None:
                    self._unyielded = 1
                    return ex
                now = _mono_ns()
        finally:
            pauser.add_paused_ns(_mono_ns() - t0)

    def _drainer(self, handle: Callable[[Excerpt], bool], until: Callable[[], bool],
                 pauser: Pauser, loop: asyncio.AbstractEventLoop,
                 waker: LoopWaker) -> Callable[[], bool]:
        """The ``drain()`` of a park of :meth:`_wait` with ``handle`` (called
        by the loop waker's readable callback): reads and hands over what is
        there, in order; when nothing is left, re-arms and looks once more in
        one native call (as a park does) and returns True (parked on: the
        pauser's park restarts from its first phase); False when the waiting
        task must run: ``handle`` or ``until`` said so, ``checkpoint_every``
        excerpts were handled in this call (the task gives the loop a turn),
        the pauser's next step after data is not a park, the slot was lost,
        or a read raised (the task reads again and raises it).  It runs in
        a copy of the waiting task's context (its context variables as they
        were at the park)."""
        read = self.read_nowait
        arm_read = self._arm_read
        parked, slot, owner, ident = waker.arm_args
        futs = waker.futs
        drains = waker.drains
        every = max(1, self.checkpoint_every)
        slice_ns = pauser.spin_slice_ns

        def drain() -> bool:
            if until():
                return False
            k = 0
            try:
                while True:  # handle() returns False once until() is true
                    ex = read()
                    if ex is None:
                        # the parked bit stays clear while draining (appenders
                        # send nothing meanwhile); set again, with a last look
                        got = arm_read(parked, slot, owner, ident,
                                       not futs and len(drains) < 2)
                        if got is None:
                            if k:
                                pauser.reset()
                                kind, ns = pauser.next_step(_mono_ns(), slice_ns)
                                if kind != PARK:
                                    return False
                                pauser.repark(ns, loop)
                            return True
                        if got is False:
                            return False
                        ex = got
                    k += 1
                    if not handle(ex) or k >= every:
                        return False
            except Exception:  # the task's own read raises it again
                return False

        return partial(contextvars.copy_context().run, drain)

    def __aiter__(self) -> AsyncIterator[Excerpt]:
        return self

    async def _anext(self) -> Excerpt:
        """``__anext__`` when no excerpt is ready (``native/hot.c`` returns a
        ready one itself): the next excerpt; the iteration ends when the
        tailer (or its queue) is closed."""
        try:
            return await self.read()
        except QueueClosedError:
            if self._gone():
                raise StopAsyncIteration from None
            raise

    async def until_end(self) -> AsyncIterator[Excerpt]:
        """Iterate to the end of the queue as it is now, then stop (for replay
        jobs): every excerpt up to the last one written before the call, or
        until nothing more is there.  Gives the loop a turn every
        ``checkpoint_every`` excerpts."""
        forward = self.direction == TailerDirection.FORWARD
        end = self.queue.last_index if forward else None
        if end is None and forward:
            return
        every = self.checkpoint_every
        n = 0
        while True:
            ex = self.read_nowait()
            if ex is None:
                return
            yield ex
            if end is not None and ex.index >= end:
                return
            n += 1
            if n >= every:
                n = 0
                await _sleep(0)

    async def aclose(self) -> None:
        """Close the tailer (idempotent); a pending ``read()`` raises
        QueueClosedError and ``async for`` ends."""
        self.close()

    # -- threads -----------------------------------------------------------
    def _read_blocking(self, timeout: float | None = None) -> Excerpt | None:
        """``Tailer.read_blocking`` (documented there): ``native/hot.c`` reads
        an excerpt that is already there itself and calls this for the rest."""
        ex = self.read_nowait()
        if ex is not None:
            return ex
        pauser = self.pauser
        pauser.reset()
        c = self._c
        stop = pauser.stop_word
        stop_addr = pauser.stop_address
        forward = self._spin_reads  # native reads while waiting (Tailer._bind)
        notifier = self._notifier(pauser)
        guard = self._guard()
        t0 = _mono_ns()
        deadline = None if timeout is None else t0 + int(timeout * 1e9)
        try:
            while True:
                now = _mono_ns()
                left = SYNC_SPIN_SLICE * 1000 if deadline is None else deadline - now
                if left <= 0:
                    return None
                kind, ns = pauser.next_step(now, SYNC_SPIN_SLICE, left)
                ex = None
                n = _NONE
                with guard:
                    # the wake counter first: a close after this look bumps it,
                    # so the park below ends at once
                    seen = stop[0]
                    if self._closed:
                        self._check()
                    if kind == SPIN:
                        if forward:
                            r = self._spin_read(ns, stop_addr, seen)
                            if type(r) is int:
                                n = r
                            else:
                                ex, n = r, 0
                        else:
                            _cq_spin(ns, stop, seen)
                    elif kind == YIELD:
                        yield_cpu()
                    else:
                        n = pauser.sync_park(c if forward else NULL, ns, notifier, seen)
                        if n == BAD_STATE and not forward:
                            n = _NONE
                    if n >= 0 and ex is None:
                        ex = self._taken(n)
                ex = self._after(n, ex) if n != _NONE else self.read_nowait()
                if ex is not None:
                    return ex
        finally:
            pauser.add_paused_ns(_mono_ns() - t0)
