"""A method reader's async side: ``await run()``, ``async for`` and
``aread_one()``.  It never waits itself: when nothing is there it awaits its
source's wait, which the waiter drives (``_waiter``); the waiter's drain
hands it what a wake-up finds, in the task that awaits ``run()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, NamedTuple

from .._core._errors import QueueClosedError
from .._format._history import MessageHistory, incoming_history
from .._storage._excerpt import Excerpt
from ._methoddispatch import Dispatcher
from ._methodsource import ExcerptTaker

__all__ = ["MethodCall", "RunLoop"]


class MethodCall(NamedTuple):
    """A call a method reader dispatched (what ``async for`` yields)."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose
    method: str
    args: tuple[Any, ...]
    history: MessageHistory | None



class RunLoop(ExcerptTaker, Dispatcher):
    """The async side of a method reader (a mixin of
    :class:`~aiochronicle.MethodReader`)."""

    if not TYPE_CHECKING:  # no slots of its own (MethodReader's hold its state);
        __slots__ = ()      # mypy would see none of the attributes declared below

    _held: Awaitable[None] | Exception | None
    _held_n: int
    _busy: bool  # in a batch read: read_available(), run() (HotReader's, native/hot.c)

    if TYPE_CHECKING:
        def _reentered(self) -> bool: ...  # MethodReader's: raises ReentrantReadError

    async def aread_one(self) -> bool:
        """:meth:`read_one` for any handlers (awaits ``async def`` ones).

        Raises:
            ReentrantReadError: called while this reader's ``read_available()``
                or ``run()`` is in progress (by one of its handlers, or another
                task).  A handler of ``aread_one()`` may read on.
        """
        if self._busy:
            self._reentered()
        got = self._take()
        if got is None:
            return False
        r = self.process(*got)
        if r is not None:
            await r
        self._done()
        return True

    def _stopped(self) -> bool:
        return self._stopping or self._held is not None

    def _handle_parked(self, ex: Excerpt) -> bool:
        """:meth:`run`'s handling of the excerpts a wake-up finds (the waiter's
        drain, ``_waiter.wait_async``; in :meth:`run`'s task): False when
        :meth:`run` must take over (an async handler's awaitable is held for
        it, or the reader is stopped).  What a handler raises leaves through
        :meth:`run`."""
        self._held_n += 1
        r = self.process(ex.payload, ex.index)
        if r is not None:
            self._held = r
            return False
        self._done()
        return not self._stopping

    async def _wait(self) -> tuple[bytes | memoryview, int] | None:
        """The next excerpt, waiting with the tailer's pauser in this task (no
        Task of its own: :meth:`stop` unpauses the pauser); None once the
        reader is stopped or the tailer closed."""
        if self._stopping:
            return None
        try:
            ex = await self._source.wait(self._stopped, None, None)
        except QueueClosedError:
            if self._closed():
                return None
            raise
        return None if ex is None else (ex.payload, ex.index)

    async def run(self, *, until_end: bool = False) -> int:
        """Handle excerpts as they come until :meth:`stop`, the tailer or its
        queue closes, or (``until_end``) there is nothing more to read now.
        Returns the number of excerpts handled.  Gives the event loop a turn
        every ``tailer.checkpoint_every`` excerpts.  Handlers run in the task
        that awaits ``run()``, whatever the pauser.

        Raises:
            Exception: whatever a handler raised.
            ReentrantReadError: called while this reader's ``read_available()``
                or ``run()`` is in progress (by one of its handlers, or another
                task).
        """
        if self._busy:
            self._reentered()
        self._busy = True
        try:
            return await self._run(until_end)
        finally:
            self._busy = False
            self._fast_done[2] = 0

    async def _run(self, until_end: bool) -> int:
        self._stopping = False
        every = max(1, self._source.checkpoint_every)
        n = since = 0
        woke = False  # the last excerpt came out of a wait
        loop = asyncio.get_running_loop()  # once, not per wait (each lookup is a getpid())
        wait = self._source.wait  # the tailer's own wait (no coroutine layer between)
        stopped = self._stopped
        # the excerpts a wake-up finds are handled by the waiter's drain (in
        # this task), one coroutine resume per wake-up
        handle = self._handle_parked
        self._held_n = 0
        if self._held is not None:  # left by a run() cancelled before it took it over
            await self._take_held()
        while not self._stopping:
            if self._pend_i < self._pend_n or (
                    self._batch and not woke and self._refill_open()):
                k, r = self._drain(every - since)
                n += k
                since += k
                if r is not None:
                    # held, as the drain's: a cancellation that lands before
                    # it runs leaves it to the next run() (nothing lost)
                    self._held = r
                    await self._take_held()
                else:
                    self._done()
            else:
                # after a wake-up, one look (a C call) before a batch read: a
                # lone excerpt is the common case; in batches the refill just
                # found nothing: straight to waiting (which looks once more
                # after announcing its park)
                got = self._poll_one() if woke else None if self._batch else self._poll()
                woke = False
                if got is None:
                    if until_end or self._stopping:
                        break
                    # the tailer's wait itself (not self._wait(): one coroutine
                    # less to resume per wake-up)
                    try:
                        ex = await wait(stopped, loop, handle)
                    except QueueClosedError:
                        if self._closed():
                            break
                        raise
                    finally:
                        n += self._held_n
                        self._held_n = 0
                    if ex is None:
                        if self._held is None:
                            break
                        await self._take_held()
                        since = 0
                        continue
                    got = ex.payload, ex.index
                    since = 0
                    woke = True
                r = self.process(*got)
                n += 1
                since += 1
                if r is not None:
                    self._held = r
                    await self._take_held()
                else:
                    self._done()
            if since >= every:
                since = 0
                await asyncio.sleep(0)
        return n

    async def _take_held(self) -> None:
        """What :meth:`_handle_parked` left :meth:`run`: raise a handler's
        exception, or await an async handler's awaitable (in order: nothing
        after it was read)."""
        held = self._held
        task = asyncio.current_task()
        if held is not None and task is not None and task.cancelling():
            # a handler cancelled run(): the cancellation lands here, the
            # awaitable still held for the next run()
            await asyncio.sleep(0)
        self._held = None
        if isinstance(held, Exception):
            raise held
        if held is not None:
            await held
            self._done()

    def stop(self) -> None:
        """Make :meth:`run` (and ``async for``, and ``read_available()`` when a
        handler of it calls this) return after the current excerpt: no handler
        of a later excerpt runs, also within a batch."""
        self._stopping = True
        if self._busy:  # in run() or read_available(), which clear it when they end
            self._fast_done[2] = 1  # the batch dispatch stops after this handler
        self._source.pauser.unpause()  # ends a wait in progress (from any thread)

    def __aiter__(self) -> AsyncIterator[MethodCall]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[MethodCall]:
        self._stopping = False
        self._recording = True
        self._one_native = False
        every = max(1, self._source.checkpoint_every)
        k = 0
        while not self._stopping:
            got = self._poll()
            if got is None:
                got = await self._wait()
                if got is None:
                    return
                k = 0
            self._last = None
            r = self.process(*got)
            if r is not None:
                await r
            self._done()
            last = self._last
            if last is not None:
                name, args, inc = last
                yield MethodCall(got[1], name, args, None if inc is None else incoming_history(inc))
            k += 1
            if k >= every:
                k = 0
                await asyncio.sleep(0)
