"""Cross-process wake-up of parked tailers (beyond Chronicle, which only polls).

Two values of ``metadata.cq4t`` carry it (both created by the first
aiochronicle appender or waiter of a queue; Java ignores them):

``aiochronicle.notify``
    a counter bumped by appenders; its low 32 bits are a futex word, shared
    by every process that maps the file.
``aiochronicle.notify.until``
    the ``CLOCK_MONOTONIC`` time (ns) up to which some process may be parked.

An appender, after each commit, loads ``until`` once; only when it lies in the
future does it bump the counter and ``FUTEX_WAKE`` the waiters (see
``native/pause.h``).  A parked thread waits on the futex itself
(``read_blocking``); a parked task registers with the queue's
:class:`Notifier`, whose helper thread waits on the futex and hands wake-ups
to the event loop with ``call_soon_threadsafe``, so the loop itself never
blocks.  Parks still end on their own timer, which is how excerpts of writers
that do not notify (Java) are found.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

from ._native import ffi, lib

if TYPE_CHECKING:
    from ._queue import Appender, Queue

__all__ = ["SEQ_KEY", "UNTIL_KEY", "Notifier", "attach_appender", "close_notifier",
           "notifier_for"]

SEQ_KEY = "aiochronicle.notify"
UNTIL_KEY = "aiochronicle.notify.until"

#: how long one futex wait of the helper thread lasts (it then re-arms)
WAIT_SLICE_NS = 100_000_000
#: how far ahead a waiter announces itself: appenders wake until then
HORIZON_NS = 2 * WAIT_SLICE_NS
#: the helper thread exits after this long without waiters
IDLE_EXIT_S = 1.0

_notifiers: weakref.WeakKeyDictionary[Queue, Notifier] = weakref.WeakKeyDictionary()
_notifiers_lock = threading.Lock()


def _values(queue: Queue) -> tuple[int, int] | None:
    """The offsets of the two notify values in metadata.cq4t (created if
    absent), or None when the queue cannot have them (read-only)."""
    meta = queue.meta
    if meta is None or queue.read_only or queue.closed:
        return None
    return meta.acquire(SEQ_KEY, 0), meta.acquire(UNTIL_KEY, 0)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Notifier:
    """The notify word of one queue, for the waiters of this process."""

    horizon_ns = HORIZON_NS

    def __init__(self, queue: Queue, seq_off: int, until_off: int) -> None:
        meta = queue.meta
        assert meta is not None
        # a mapping of its own, so that the helper thread never touches memory
        # the queue unmaps when it closes; it lives until close()
        size = max(seq_off, until_off) + 8
        fd = os.open(meta.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            out = ffi.new("uint8_t **")
            if lib.cq_map(fd, size, 1, out) != 0:
                raise OSError(ffi.errno, f"mmap of {meta.path} failed")
        finally:
            os.close(fd)
        self._base: Any = out[0]
        self._size = size
        self._seq: Any = ffi.cast("int64_t *", self._base + seq_off)
        self._until: Any = ffi.cast("int64_t *", self._base + until_off)
        self._word: Any = lib.cq_notify_word(self._seq)
        #: for thread waiters (cq_park_read), valid until the queue closes
        self.seq: Any = self._seq
        self.until: Any = self._until
        self.word: Any = self._word
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
            return int(lib.cq_notify_arm(self._seq, self._until, HORIZON_NS))

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
        word = self._word
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
            # re-announce (appenders keep waking), then sleep on the word
            if int(lib.cq_notify_arm(self._seq, self._until, HORIZON_NS)) != cur:
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
            lib.cq_futex_wake(self._word, 1 << 30)
            thread.join(1.0)
            if thread.is_alive():  # pragma: no cover - a stuck thread keeps the mapping
                return
        lib.cq_unmap(self._base, self._size)
        self._base = ffi.NULL


def notifier_for(queue: Queue) -> Notifier | None:
    """The queue's notifier (made on first use), or None for a read-only queue."""
    n = _notifiers.get(queue)
    if n is not None:
        return n
    with _notifiers_lock:
        n = _notifiers.get(queue)
        if n is None:
            offs = _values(queue)
            if offs is None:
                return None
            n = Notifier(queue, *offs)
            _notifiers[queue] = n
        return n


def close_notifier(queue: Queue) -> None:
    """Called when ``queue`` closes."""
    with _notifiers_lock:
        n = _notifiers.pop(queue, None)
    if n is not None:
        n.close()


def attach_appender(appender: Appender) -> None:
    """Make ``appender`` wake parked tailers after each commit.

    When nobody is parked this costs one load of ``until`` per append.  If the
    native appender has notify fields the core does it after each commit;
    otherwise the appender's append methods are wrapped here.
    """
    queue = appender.queue
    offs = _values(queue)
    if offs is None:
        return
    meta = queue.meta
    assert meta is not None
    seq = ffi.cast("int64_t *", meta.file.ptr(offs[0]))
    until = ffi.cast("int64_t *", meta.file.ptr(offs[1]))
    c = appender._c
    fields = dict(ffi.typeof("cq_appender").fields)
    if "notify_seq" in fields and "notify_until" in fields:
        c.notify_seq = seq
        c.notify_until = until
        return
    # no native support: check `until` from Python after each commit
    until_now = memoryview(ffi.buffer(until, 8)).cast("q")
    notify = lib.cq_notify
    inner_append = appender.append
    inner_packed = appender.append_packed
    inner_commit = appender._doc_commit

    def append(data: bytes | bytearray | memoryview | str) -> int:
        index = inner_append(data)
        if until_now[0]:
            notify(seq, until)
        return index

    def append_packed(data: bytes | bytearray | memoryview, offsets: Any) -> int:
        index = inner_packed(data, offsets)
        if until_now[0]:
            notify(seq, until)
        return index

    def doc_commit(length: int, metadata: bool) -> int | None:
        index = inner_commit(length, metadata)
        if until_now[0]:
            notify(seq, until)
        return index

    appender.append = append  # type: ignore[method-assign]
    appender.append_packed = append_packed  # type: ignore[method-assign]
    appender._doc_commit = doc_commit  # type: ignore[method-assign]
