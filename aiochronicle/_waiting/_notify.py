"""Cross-process wake-up of parked tailers (beyond Chronicle, which only polls).

One value of ``metadata.cq4t`` carries it, ``aiochronicle.notify``, created by
the first reader that parks with ``Pauser.notify()`` (so the metadata of a
queue nobody waits on stays byte for byte what Java writes; Java ignores the
key).  Its low 32 bits are a counter and futex word shared by every process
that maps the file; its high 32 bits say until when (``CLOCK_MONOTONIC``, ms)
some process may be parked.  See ``native/notify.h`` for the protocol.

Appenders: after each commit a fence and a load or two when nobody is parked
(and, until every value exists, one load of the table store's end word, so that
an appender started before the first waiter still finds them).

Waiters:
- a thread waits on the futex itself (``read_blocking``);
- a task parks on its event loop: the loop watches a Unix datagram socket of
  its own, whose owner slot (``aiochronicle.notify.<i>``) names it; a parked
  task sets the slot's bit in ``aiochronicle.notify.parked`` and the first
  appender to commit clears it and sends one byte.  The appender's send is the
  only hop: no thread stands between it and the loop;
- when every slot is taken by a live owner, tasks fall back to the queue's
  helper thread, which waits on the futex and hands wake-ups to the loop with
  ``call_soon_threadsafe``.

Parks still end on their own timer, which is how excerpts of writers that do
not notify (Java, or another network namespace) are found.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import stat
import threading
import weakref
from typing import TYPE_CHECKING

from .._core._native import (
    NOTIFY_SLOTS,
    NULL,
    NULL_CELL,
    Cell,
    NotifyWatch,
    Park,
    cas64,
    futex_wait,
    futex_wake,
    handle,
    int64_at,
    new_notify_watch,
    notify_arm,
    notify_sockname,
    notify_unpark,
    notify_word,
    park_readable,
)
from .._format._mapped import MappedWords

if TYPE_CHECKING:
    from .._format._tablestore import TableStore

__all__ = ["NOTIFY_KEY", "PARKED_KEY", "SLOTS", "LoopWaker", "Notifier", "close_notifier",
           "notifier_for", "notify_watch", "running_loop", "slot_key", "sweep_stale_names"]

#: the running event loop (each call costs a getpid() system call in CPython)
running_loop = asyncio.get_running_loop

NOTIFY_KEY = "aiochronicle.notify"
#: bit i: the owner of slot i is parked
PARKED_KEY = "aiochronicle.notify.parked"
#: how many event loops (of any processes) can own a slot of one queue
SLOTS = NOTIFY_SLOTS


def slot_key(i: int) -> str:
    """The key of owner slot ``i``."""
    return f"{NOTIFY_KEY}.{i}"


def _cas_slot(slot_ptr: Cell, expected: int, value: int) -> bool:
    return cas64(slot_ptr, expected, value)


def _sockname(ident: int) -> bytes:
    return notify_sockname(ident)


def _unlink_sockname(ident: int) -> None:
    """Remove the owner's socket file where names are paths (the portable
    build, native/platform.h); abstract names vanish with their socket."""
    name = _sockname(ident)
    if not name.startswith(b"\0"):
        with contextlib.suppress(OSError):
            os.unlink(name)

#: the most entries of the socket names' directory one sweep looks at
SWEEP_MAX = 4096
#: the process whose sweep ran (once a process: a fork sweeps again)
_swept_by = 0


def _bound(name: str | bytes) -> bool | None:
    """Whether a socket is bound to the datagram socket name ``name``: True
    (its owner lives), False (none is: the owner died), None (cannot tell).
    ``connect()`` asks the kernel and sends the owner nothing."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(name)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return None
    return True


def sweep_stale_names(folder: str, prefix: str) -> int:
    """Remove the socket files named ``prefix...`` in ``folder`` that no
    socket is bound to (their owners died) and this user owns; returns how
    many.  A name whose socket lives is left alone: ``connect()`` to it
    succeeds, and sends nothing.  At most :data:`SWEEP_MAX` entries are
    looked at."""
    uid = os.getuid()
    looked = removed = 0
    try:
        with os.scandir(folder) as entries:
            for e in entries:
                if not e.name.startswith(prefix):
                    continue
                looked += 1
                if looked > SWEEP_MAX:
                    break
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISSOCK(st.st_mode) or st.st_uid != uid:
                    continue
                if _bound(e.path) is False:
                    with contextlib.suppress(OSError):
                        os.unlink(e.path)
                        removed += 1
    except OSError:
        pass
    return removed


def _sweep_once() -> None:
    """Where names are paths (the portable build): the files of owners that
    died without anyone freeing their slot, because their queue is gone
    (an appender or a claim that meets a dead owner's slot removes its file),
    are removed by the first claim of each process."""
    global _swept_by
    pid = os.getpid()
    if _swept_by == pid:
        return
    _swept_by = pid
    name = _sockname(1)
    if name.startswith(b"\0"):  # abstract names vanish with their socket
        return
    folder, base = os.path.split(os.fsdecode(name))
    sweep_stale_names(folder, base[:-16])  # less the ident's 16 hex digits


#: how long one futex wait of the helper thread lasts (it then re-arms)
WAIT_SLICE_NS = 100_000_000
#: how far ahead a waiter announces itself: appenders wake until then
HORIZON_NS = 2 * WAIT_SLICE_NS
#: the helper thread exits after this long without waiters
IDLE_EXIT_S = 1.0


#: each queue's notifier, keyed by its metadata table store (None: closed)
_notifiers: weakref.WeakKeyDictionary[TableStore, Notifier | None] = weakref.WeakKeyDictionary()
#: reentrant: a signal handler that closes the queue runs on the thread that
#: may hold it (inside notifier_for), and close_notifier takes it too
_notifiers_lock = threading.RLock()


def _after_fork_in_child() -> None:
    """The helper threads did not survive the fork; their locks may be held.
    The loops' sockets and slots stay the parent's."""
    global _notifiers_lock
    _notifiers_lock = threading.RLock()
    for n in list(_notifiers.values()):
        if n is not None:
            n.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _wake(fut: Park) -> None:
    if not fut.done():
        fut.set_result(None)


class LoopWaker:
    """One event loop's wake-ups for one queue: a datagram socket the loop
    watches, named by owner slot ``slot`` of the notify values.  Package
    internal (the tailers' waits); not part of the user API."""

    def __init__(self, notifier: Notifier, loop: asyncio.AbstractEventLoop, slot: int,
                 ident: int, sock: socket.socket) -> None:
        self._notifier = notifier  # its mapping holds the slot and the bits
        self._loop = weakref.ref(loop)
        self._slot = slot
        self._ident = ident
        self._sock = sock
        self._fd = sock.fileno()
        self._slot_ptr = notifier.slot_ptr(slot)
        self._parked = notifier.parked
        #: the parks in progress: a wake-up ends every one of them and runs
        #: their tasks' steps right then (native/park.c's park_readable, the
        #: socket's reader callback, which no task runs in: the tasks read
        #: and handle what they find, see ``_waiter``)
        self.futs: set[Park] = set()
        #: until close(): its slot may be armed
        self.open = True
        #: the arguments of a tailer's ``_arm_read`` (native/hot.c), which
        #: arms and looks for data in one call: the parked bits' handle, the
        #: slot, the slot's owner value's address and our ident
        self.arm_args = (handle(self._parked), slot, handle(self._slot_ptr), ident)
        # a finished Future the parked tasks' wake-ups are handed (they take
        # the result of an exact Future in C: see native/park.c wake_now);
        # only the loop's reader holds it (it holds the loop: this object
        # must not, see the finalizer below)
        done: asyncio.Future[None] = loop.create_future()
        done.set_result(None)
        loop.add_reader(self._fd, park_readable, self._fd, self.futs, done)
        # a loop that is dropped without the queue closing frees its slot
        self._finalizer = weakref.finalize(loop, LoopWaker._drop, sock, self._slot_ptr,
                                           self._parked, slot, ident)

    def _wake_all(self) -> None:
        # may run in a task (a close): the parks' tasks step from the loop
        futs = [*self.futs]
        self.futs.clear()
        for fut in futs:
            _wake(fut)

    @staticmethod
    def _drop(sock: socket.socket | None, slot_ptr: Cell, parked: Cell, slot: int,
              ident: int) -> None:
        """Give the slot up (unless someone took it over) and clear its bit."""
        _cas_slot(slot_ptr, ident, 0)
        notify_unpark(parked, slot)
        if sock is not None:
            sock.close()
        _unlink_sockname(ident)

    def close(self) -> None:
        """Free the slot, stop watching the socket and wake the parked tasks
        (from any thread)."""
        if not self.open:
            return
        self.open = False
        self._finalizer.detach()
        self._drop(None, self._slot_ptr, self._parked, self._slot, self._ident)
        loop = self._loop()
        if loop is None or loop.is_closed():
            self._sock.close()
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or not loop.is_running():
            self._finish(loop)
        else:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self._finish, loop)

    def _finish(self, loop: asyncio.AbstractEventLoop) -> None:
        if not loop.is_closed():
            loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._wake_all()

    def forget(self) -> None:
        """In a forked child: the socket and the slot are the parent's."""
        self.open = False
        self._finalizer.detach()
        self._sock.close()  # the child's descriptor only


class Notifier:
    """The notify values of one queue, for the waiters of this process."""

    horizon_ns = HORIZON_NS

    def __init__(self, meta: TableStore, offsets: dict[str, int]) -> None:
        # a mapping of its own, so that the helper thread and the loops'
        # wake-ups never touch memory the queue unmaps when it closes; it
        # lives until close()
        size = max(offsets.values()) + 8
        self._words = MappedWords(meta.path, size)
        self._offsets = offsets
        #: the value, and its futex word (for threads parking in cq_park_read)
        self.cell: Cell = self._words.int64(offsets[NOTIFY_KEY])
        self.word: Cell = notify_word(self.cell)
        #: the parked bits of the owner slots
        self.parked: Cell = self._words.int64(offsets[PARKED_KEY])
        self._cond = threading.Condition()
        self._waiters: dict[Park, int] = {}
        self._thread: threading.Thread | None = None
        self._wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker | None]
        self._wakers = weakref.WeakKeyDictionary()
        #: the last loop asked for and its waker
        self._fast: tuple[weakref.ref[asyncio.AbstractEventLoop], LoopWaker | None] | None
        self._fast = None
        self._closed = False

    def after_fork_in_child(self) -> None:
        """In a forked child: no helper thread, no waiter of the parent's loops;
        the loops' sockets and slots stay the parent's."""
        self._cond = threading.Condition()
        self._thread = None
        self._waiters.clear()  # futures of the parent's event loops
        for w in self._wakers.values():
            if w is not None:
                w.forget()
        self._fast = None
        self._wakers = weakref.WeakKeyDictionary()

    def slot_ptr(self, i: int) -> Cell:
        """The value of owner slot ``i``."""
        return self._words.int64(self._offsets[slot_key(i)])

    # -- tasks: the loop's own socket ----------------------------------------
    def loop_waker(self, loop: asyncio.AbstractEventLoop | None = None) -> LoopWaker | None:
        """The waker of ``loop`` (default: the running loop), made (with its
        slot) on first use; None when every slot has a live owner (the loop
        then uses the helper thread) or once closed."""
        if loop is None:
            loop = asyncio.get_running_loop()
        fast = self._fast
        if fast is not None and fast[0]() is loop:
            return fast[1]
        w = self._wakers[loop] if loop in self._wakers else self._claim(loop)
        if w is not None or self._closed:
            self._fast = (weakref.ref(loop), w)
        return w

    def _claim(self, loop: asyncio.AbstractEventLoop) -> LoopWaker | None:
        """A slot and a socket for ``loop`` (None: every slot has a live owner,
        or the socket could not be made; the loop then uses the helper thread)."""
        _sweep_once()  # (directory I/O: not under the lock)
        with self._cond:
            if self._closed:
                return None
            ident = (secrets.randbits(31) + 1) << 32 | os.getpid()
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.setblocking(False)
                _unlink_sockname(ident)
                sock.bind(_sockname(ident))
            except OSError:
                self._wakers[loop] = None
                return None
            slot = self._free_slot(ident)
            if slot is None:
                sock.close()
                self._wakers[loop] = None
                return None
            w = LoopWaker(self, loop, slot, ident, sock)
            self._wakers[loop] = w
            return w

    def _free_slot(self, ident: int) -> int | None:
        for i in range(SLOTS):
            if _cas_slot(self.slot_ptr(i), 0, ident):
                return i
        # every slot is taken: take one whose owner's name is unbound (dead)
        for i in range(SLOTS):
            old = int(self.slot_ptr(i)[0])
            if old == 0 or old == ident:
                continue
            if _bound(_sockname(old)) is not False:
                continue  # alive, or cannot tell: not ours to take
            if _cas_slot(self.slot_ptr(i), old, ident):
                _unlink_sockname(old)  # the dead owner's name, where names are paths
                return i
        return None

    # -- the futex: threads, and tasks without a slot ---------------------------
    def arm(self) -> int | None:
        """Announce a waiter (appenders wake from now on) and return the word's
        snapshot to register with after one more look for data (None once
        closed)."""
        with self._cond:
            if self._closed:
                return None
            return notify_arm(self.cell, HORIZON_NS)

    def register(self, fut: Park, snapshot: int) -> None:
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

    def unregister(self, fut: Park) -> None:
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
            if notify_arm(self.cell, HORIZON_NS) != cur:
                continue
            futex_wait(word, cur, WAIT_SLICE_NS)

    @staticmethod
    def _hand_over(ready: list[Park]) -> None:
        for fut in ready:
            with contextlib.suppress(RuntimeError):  # its loop is closed
                fut.get_loop().call_soon_threadsafe(_wake, fut)

    def close(self) -> None:
        """Stop the helper thread and free the loops' slots (idempotent); the
        mapping of the words goes when this object does."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            waiters = list(self._waiters)
            self._waiters.clear()
            wakers = [w for w in self._wakers.values() if w is not None]
            self._wakers = weakref.WeakKeyDictionary()
            self._fast = None
            thread = self._thread
            self._cond.notify()
        self._hand_over(waiters)
        for w in wakers:
            w.close()
        if thread is not None:
            futex_wake(self.word, 1 << 30)
            thread.join(1.0)
        # The mapping goes with this object, not before: whoever uses its
        # words holds the object.  A loop on another thread may be between a
        # look at its slot and its park; a thread may be about to park on the
        # word when a signal handler on that same thread closes the queue (the
        # park then reads the word after this close); a stuck helper thread
        # holds it too.  Not at exit: a daemon thread may still park on it.
        weakref.finalize(self, self._words.unmap).atexit = False


def notifier_for(meta: TableStore | None) -> Notifier | None:
    """The notifier of the queue whose metadata table store is ``meta``, made
    (with the notify values) on first use; None for a queue whose metadata
    cannot be written (none, or read-only), or once :func:`close_notifier` ran."""
    if meta is None:
        return None
    n = _notifiers.get(meta)
    if n is not None:
        return n
    with _notifiers_lock:
        if meta in _notifiers:
            return _notifiers[meta]  # None once the queue closed
        if meta.read_only:
            return None
        keys = [NOTIFY_KEY, PARKED_KEY, *(slot_key(i) for i in range(SLOTS))]
        n = Notifier(meta, {k: meta.acquire(k, 0) for k in keys})
        # one step (close_notifier may have run meanwhile, in a signal
        # handler on this thread: then it left None, and that stays)
        got = _notifiers.setdefault(meta, n)
        if got is not n:
            n.close()
        return got


def close_notifier(meta: TableStore) -> None:
    """Called when the queue whose metadata table store is ``meta`` closes:
    its notifier stops, and no other is made for it."""
    with _notifiers_lock:
        n = _notifiers.get(meta)
        _notifiers[meta] = None
    if n is not None:
        n.close()


def _watch_setup(meta: TableStore, w: NotifyWatch) -> None:
    """Point ``w`` at the notify values that exist, and at the table store's
    end to pick up the others when a waiter creates them."""
    file = meta.file

    def value(key: str) -> Cell:
        off = meta.offset(key)  # rescans the keys when absent
        return NULL_CELL if off is None else int64_at(file.ptr(off))

    w.cell = value(NOTIFY_KEY)
    w.parked = value(PARKED_KEY)
    known = 0
    for i in range(SLOTS):
        w.slots[i] = value(slot_key(i))
        if w.slots[i] != NULL:
            known |= 1 << i
    w.known = known
    if w.cell != NULL and w.parked != NULL and known == (1 << SLOTS) - 1:
        w.meta = NULL
        return
    w.meta = file.c.base
    w.meta_len = file.c.map_len
    w.probe = meta.end


def notify_watch(meta: TableStore) -> NotifyWatch | None:
    """What an appender of the queue whose metadata table store is ``meta``
    points its native struct at (``cq_appender.notify``) to wake parked
    ``Pauser.notify()`` tailers: the native core checks the watched words
    after each commit (a load or two when nobody is parked); None for a
    read-only table store.  The appender keeps it while its struct points at
    it; the socket its wake-ups are sent from closes when it is garbage (not
    at the appender's close(): another thread may be sending on it right then)."""
    if meta.read_only:
        return None
    w = new_notify_watch()
    _watch_setup(meta, w)
    return w
