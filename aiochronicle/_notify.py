"""Cross-process wake-up of parked tailers (beyond Chronicle, which only polls).

One value of ``metadata.cq4t`` carries it, ``aiochronicle.notify``, created by
the first reader that parks with ``Pauser.notify()`` (so the metadata of a
queue nobody waits on stays byte for byte what Java writes; Java ignores the
key).  Its low 32 bits are a counter and futex word shared by every process
that maps the file; its high 32 bits say until when (``CLOCK_MONOTONIC``, ms)
some process may be parked.  See ``native/notify.h`` for the protocol.

Appenders: after each commit one load of the value when nobody is parked (or,
before the value exists, one load of the table store's end word, so that an
appender started before the first waiter still finds it).  Waiters: a thread
waits on the futex itself (``read_blocking``); a task registers with the
queue's :class:`Notifier`, whose helper thread waits on the futex and hands
wake-ups to the event loop with ``call_soon_threadsafe``, so the loop never
blocks.  Parks still end on their own timer, which is how excerpts of writers
that do not notify (Java) are found.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

from ._native import ffi, lib

if TYPE_CHECKING:
    import asyncio

    from ._appender import Appender
    from ._queue import Queue

__all__ = ["NOTIFY_KEY", "Notifier", "attach_appender", "close_notifier", "notifier_for"]

NOTIFY_KEY = "aiochronicle.notify"

#: how long one futex wait of the helper thread lasts (it then re-arms)
WAIT_SLICE_NS = 100_000_000
#: how far ahead a waiter announces itself: appenders wake until then
HORIZON_NS = 2 * WAIT_SLICE_NS
#: the helper thread exits after this long without waiters
IDLE_EXIT_S = 1.0


_notifiers: weakref.WeakKeyDictionary[Queue, Notifier] = weakref.WeakKeyDictionary()
_notifiers_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """The helper threads did not survive the fork; their locks may be held."""
    global _notifiers_lock
    _notifiers_lock = threading.Lock()
    for n in list(_notifiers.values()):
        n._cond = threading.Condition()
        n._thread = None
        n._waiters.clear()  # futures of the parent's event loops


os.register_at_fork(after_in_child=_after_fork_in_child)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Notifier:
    """The notify value of one queue, for the waiters of this process."""

    horizon_ns = HORIZON_NS

    def __init__(self, queue: Queue, offset: int) -> None:
        meta = queue._meta
        assert meta is not None
        # a mapping of its own, so that the helper thread never touches memory
        # the queue unmaps when it closes; it lives until close()
        size = offset + 8
        fd = os.open(meta.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            out = ffi.new("uint8_t **")
            if lib.cq_map(fd, size, 1, out) != 0:
                raise OSError(ffi.errno, f"mmap of {meta.path} failed")
        finally:
            os.close(fd)
        self._base: Any = out[0]
        self._size = size
        #: the value, and its futex word (for threads parking in cq_park_read)
        self.cell: Any = ffi.cast("int64_t *", self._base + offset)
        self.word: Any = lib.cq_notify_word(self.cell)
        self._cond = threading.Condition()
        self._waiters: dict[asyncio.Future[None], int] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self) -> int | None:
        """Announce a waiter (appenders wake from now on) and return the word's
        snapshot to register with after one more look for data (None once
        closed)."""
        with self._cond:
            if self._closed:
                return None
            return int(lib.cq_notify_arm(self.cell, HORIZON_NS))

    def register(self, fut: asyncio.Future[None], snapshot: int) -> None:
        """Have ``fut`` resolved (on its loop) once the word differs from ``snapshot``."""
        with self._cond:
            if self._closed:
                return
            self._waiters[fut] = snapshot
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="aiochronicle-notify",
                                                daemon=True)
                self._thread.start()
            else:
                self._cond.notify()

    def unregister(self, fut: asyncio.Future[None]) -> None:
        with self._cond:
            self._waiters.pop(fut, None)

    def _run(self) -> None:
        word = self.word
        cond = self._cond
        while True:
            with cond:
                if not self._waiters and not self._closed:
                    cond.wait(IDLE_EXIT_S)
                if self._closed or not self._waiters:
                    self._thread = None
                    return
                cur = int(word[0])
                ready = [f for f, snap in self._waiters.items() if snap != cur]
                for f in ready:
                    del self._waiters[f]
            if ready:
                self._hand_over(ready)
                continue
            # re-announce (appenders keep waking), then sleep on the word: any
            # waiter registered meanwhile took its snapshot no later than this
            if int(lib.cq_notify_arm(self.cell, HORIZON_NS)) != cur:
                continue
            lib.cq_futex_wait(word, cur, WAIT_SLICE_NS)

    @staticmethod
    def _hand_over(ready: list[asyncio.Future[None]]) -> None:
        for fut in ready:
            with contextlib.suppress(RuntimeError):  # its loop is closed
                fut.get_loop().call_soon_threadsafe(_wake, fut)

    def close(self) -> None:
        """Stop the helper thread and drop the mapping (idempotent)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            waiters = list(self._waiters)
            self._waiters.clear()
            thread = self._thread
            self._cond.notify()
        self._hand_over(waiters)
        if thread is not None:
            lib.cq_futex_wake(self.word, 1 << 30)
            thread.join(1.0)
            if thread.is_alive():  # pragma: no cover - a stuck thread keeps the mapping
                return
        lib.cq_unmap(self._base, self._size)


def notifier_for(queue: Queue) -> Notifier | None:
    """The queue's notifier, made (with the notify value) on first use; None
    for a queue whose metadata cannot be written (read-only)."""
    n = _notifiers.get(queue)
    if n is not None:
        return n
    with _notifiers_lock:
        n = _notifiers.get(queue)
        if n is None:
            meta = queue._meta
            if meta is None or queue.read_only or queue.closed:
                return None
            n = Notifier(queue, meta.acquire(NOTIFY_KEY, 0))
            _notifiers[queue] = n
        return n


def close_notifier(queue: Queue) -> None:
    """Called when ``queue`` closes."""
    with _notifiers_lock:
        n = _notifiers.pop(queue, None)
    if n is not None:
        n.close()


def _watch_setup(appender: Appender, w: Any) -> None:
    """Point ``w`` at the notify value, or at the table store's end to wait
    for it to be created."""
    meta = appender.queue._meta
    assert meta is not None
    off = meta.offset(NOTIFY_KEY)  # rescans the keys
    if off is not None:
        w.cell = ffi.cast("int64_t *", meta.file.ptr(off))
        w.meta = ffi.NULL
        return
    w.cell = ffi.NULL
    w.meta = meta.file.c.base
    w.meta_len = meta.file.c.map_len
    w.probe = meta._end


def _watch_view(w: Any) -> memoryview:
    """The 32-bit word whose being non-zero sends an append to the native
    check: `until` of the value, or the probe word of the table store."""
    if w.cell != ffi.NULL:
        return memoryview(ffi.buffer(lib.cq_notify_until(w.cell), 4)).cast("I")
    if w.meta != ffi.NULL:
        return memoryview(ffi.buffer(w.meta + w.probe, 4)).cast("I")
    return memoryview(bytes(4)).cast("I")


def attach_appender(appender: Appender) -> None:
    """Make ``appender`` wake parked ``Pauser.notify()`` tailers: the native
    core checks the watched word after each commit (one load when nobody is
    parked)."""
    queue = appender.queue
    if queue._meta is None or queue.read_only:
        return
    w = ffi.new("cq_notify_watch *")
    _watch_setup(appender, w)
    appender._notify_watch = w  # keeps it alive while the native appender points at it
    appender._c.notify = w
