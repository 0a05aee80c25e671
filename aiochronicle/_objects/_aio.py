"""asyncio support of Tailer: the base class whose reads wait.

A tailer never waits itself: it reads without blocking and gives the waiter
(``aiochronicle._waiting._waiter``) its probe; the waiter waits with the tailer's
:class:`~aiochronicle.Pauser`.  On the event loop a
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

import threading
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import TYPE_CHECKING

from .._core._errors import QueueClosedError
from .._core._native import NULL, HotTailer, Pointer, TailerStruct
from .._storage._excerpt import Excerpt, TailerDirection
from .._waiting._notify import Notifier, notifier_for
from .._waiting._pauser import Pauser, wait_state
from .._waiting._waiter import Probe, WaitState, wait_async, wait_sync

if TYPE_CHECKING:
    import asyncio

    from .._format._tablestore import TableStore
    from ._queueview import QueueView

__all__ = ["AsyncTailerMixin", "tailer_wait"]


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
    _c: TailerStruct
    _closed: bool
    #: native reads while waiting (set by the tailer as its direction changes)
    _spin_reads: bool
    _pauser: Pauser | None = None
    _notifier_of_queue: Notifier | None = None
    _wait_guard: threading.RLock | None = None
    #: ``_waiting()``'s value, once asked for (no class default: read per wait)
    _wait_with: tuple[WaitState, Probe[Excerpt]]

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
        self._wait_with = (wait_state(value), _probe(type(self)))

    def _waiting(self) -> tuple[WaitState, Probe[Excerpt]]:
        """What this tailer's waits take: its pauser's wait state and its
        class's probe (kept until the pauser is replaced: a wake-up's next
        wait looks neither up again)."""
        w = self._wait_with = (wait_state(self.pauser), _probe(type(self)))
        return w

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

    # -- what the waiter reads and arms (its Probe: see _probe) ---------------
    def _spin_reads_now(self) -> bool:
        return self._spin_reads  # native reads while waiting (Tailer._bind)

    def _park_on(self) -> Pointer:
        return self._c if self._spin_reads else NULL

    def _is_closed(self) -> bool:
        return self._closed

    def _queue_notifier(self) -> Notifier | None:
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
        every = self.checkpoint_every
        if self._unyielded >= every:
            self._unyielded = 0
            await _sleep(0)
        ex = self.read_nowait()
        if ex is not None:
            self._unyielded += 1
            return ex
        try:
            w, probe = self._wait_with
        except AttributeError:
            w, probe = self._waiting()
        # the waiter's coroutine awaited here (as tailer_wait does, with no
        # frames between: each wake-up resumes one coroutine less)
        ex = await wait_async(w, probe, self, None, None, None, None, every)
        assert ex is not None
        self._unyielded = 1
        return ex

    def _wait(self, until: Callable[[], bool] | None,
              loop: asyncio.AbstractEventLoop | None = None,
              handle: Callable[[Excerpt], bool] | None = None) -> Awaitable[Excerpt | None]:
        """The next excerpt, waited for by the waiter with the pauser
        (``_waiter.wait_async``, which documents ``until``, ``loop`` and the
        drain, ``handle``): its coroutine itself, one frame less to resume
        per wake-up."""
        return tailer_wait(self, until, loop, handle)

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
        an excerpt that is already there itself and calls this for the rest,
        which the waiter waits for (``_waiter.wait_sync``)."""
        ex = self.read_nowait()
        if ex is not None:
            return ex
        return wait_sync(wait_state(self.pauser), _probe(type(self)), self, timeout)


def tailer_wait(tailer: AsyncTailerMixin, until: Callable[[], bool] | None,
                loop: asyncio.AbstractEventLoop | None = None,
                handle: Callable[[Excerpt], bool] | None = None) -> Awaitable[Excerpt | None]:
    """The next excerpt of ``tailer``, waited for by the waiter with the
    tailer's pauser (``_waiter.wait_async``, which documents ``until``,
    ``loop`` and the drain, ``handle``): the one wait of a tailer, which a
    method reader's ``run()`` (through its source) and the package's services
    share.  Returns the waiter's coroutine itself (no frame of its own to
    resume per wake-up)."""
    return wait_async(wait_state(tailer.pauser), _probe(type(tailer)), tailer, until, loop,
                      handle, None, tailer.checkpoint_every)


#: each tailer class's probe (its own reads, looked up through its class)
_probes: dict[type, Probe[Excerpt]] = {}


def _probe(cls: type[AsyncTailerMixin]) -> Probe[Excerpt]:
    """What the waiter of a tailer of class ``cls`` reads and arms."""
    p = _probes.get(cls)
    if p is None:
        p = _probes[cls] = Probe(
            read=cls.read_nowait, spin_reads=cls._spin_reads_now, spin_read=cls._spin_read,
            arm_read=cls._arm_read, park_on=cls._park_on, finish=cls._after, taken=cls._taken,
            closed=cls._is_closed, check=cls._check, guard=cls._guard, notifier=cls._queue_notifier)
    return p
