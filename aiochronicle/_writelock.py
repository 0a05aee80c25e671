"""The locks in ``metadata.cq4t``: ``chronicle.write.lock``, which every
appender of every process (Java's too) takes around each write, and
``chronicle.append.lock``, which a replication sink holds to keep other
writers out; their recovery from dead holders and ``UnlockMode``.

A lock value holds its holder's PID in its low 32 bits (Java's layout);
``UNLOCKED`` (``Long.MIN_VALUE``) is free.  Taking and releasing is one CAS
in the native core (``cq_lock``/``cq_unlock``, which spin with the GIL
released); waiting, forcing and recovery are here.
"""

from __future__ import annotations

import os
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from ._errors import AppendLockedError, QueueClosedError, WriteLockTimeoutError
from ._native import UNLOCKED, lock, unlock
from ._settings import UnlockMode

if TYPE_CHECKING:
    from ._queue import Queue
    from ._tablestore import TableStore

__all__ = [
    "APPEND_LOCK",
    "WRITE_LOCK",
    "WriteLock",
    "lock_holder",
    "pid_alive",
    "recover_dead_locks",
]

WRITE_LOCK = "chronicle.write.lock"
APPEND_LOCK = "chronicle.append.lock"
#: how long the native lock call spins (GIL released) before Python waits
SPIN_NS = 100_000


def lock_holder(value: int) -> int:
    """The PID in a lock value, as Java reads it: its low 32 bits, signed."""
    low = value & 0xFFFFFFFF
    return low - (1 << 32) if low >= 1 << 31 else low


def pid_alive(pid: int) -> bool:
    """True if a process ``pid`` exists (this host; any user)."""
    if pid <= 0 or pid >= 1 << 31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_dead_locks(meta: TableStore) -> None:
    """Free both locks when their holder is dead (done when a queue opens)."""
    for key in (WRITE_LOCK, APPEND_LOCK):
        value = meta.get(key)
        if value is None or value == UNLOCKED:
            continue
        holder = lock_holder(value)
        if holder != os.getpid() and not pid_alive(holder):
            meta.cas(key, value, UNLOCKED)


class WriteLock:
    """``chronicle.write.lock`` of one open queue, and its ``chronicle.append.lock``
    check.  Waiting follows the queue's ``unlock_mode`` and ``lock_timeout``."""

    __slots__ = ("_cell", "_queue")

    def __init__(self, queue: Queue) -> None:
        # weak: the queue owns its lock, and a reference back would make every
        # queue a cycle that only the garbage collector frees (its files would
        # stay mapped until then)
        self._queue = weakref.ref(queue)
        self._cell: Any = None

    @property
    def queue(self) -> Queue:
        q = self._queue()
        if q is None:
            raise QueueClosedError("the queue of this lock is gone")
        return q

    @property
    def _meta(self) -> TableStore:
        meta = self.queue._meta
        assert meta is not None
        return meta

    def ptr(self) -> Any:
        """The lock word in the mapped table store (what the native appender CASes)."""
        # looked up once, while the queue is open; kept so that a lock taken
        # just before another thread closes the queue can still be released
        # (the table store stays mapped until the queue is garbage)
        p = self._cell
        if p is None:
            p = self._cell = self._meta.ptr(WRITE_LOCK, UNLOCKED)
        return p

    def held_here(self) -> bool:
        """This process holds the lock (a ``with`` block below this call)."""
        p = self._cell
        return p is not None and lock_holder(int(p[0])) == os.getpid()

    def wait(self) -> None:
        """Wait for the lock to come free; take it over from a dead holder (or
        after ``lock_timeout`` with ``UnlockMode.ALWAYS``).

        Raises:
            WriteLockTimeoutError: a live holder kept it past ``lock_timeout``.
            QueueClosedError: the queue was closed meanwhile.
        """
        q = self.queue
        meta = self._meta
        lock = self.ptr()
        deadline = 0.0
        delay = 20e-6
        mode = q.unlock_mode
        last = UNLOCKED
        while True:
            if q.closed:  # before the word: a closed queue may have unmapped it
                raise QueueClosedError(f"queue {q.path} is closed")
            value = int(lock[0])
            if value == UNLOCKED:
                return
            if value != last:
                # the timeout is how long one holder keeps the lock: it starts
                # again whenever the lock changes hands
                last = value
                deadline = time.monotonic() + q.lock_timeout
            holder = lock_holder(value)
            if (mode is not UnlockMode.NEVER and holder != os.getpid()
                    and not pid_alive(holder)):
                meta.cas(WRITE_LOCK, value, UNLOCKED)
                return
            if time.monotonic() >= deadline:
                if mode is UnlockMode.ALWAYS:
                    warnings.warn(f"forcing {WRITE_LOCK} of {q.path} away from "
                                  f"process {holder} after {q.lock_timeout}s",
                                  RuntimeWarning, stacklevel=4)
                    meta.cas(WRITE_LOCK, value, UNLOCKED)
                    return
                raise WriteLockTimeoutError(
                    f"{WRITE_LOCK} of {q.path} is held by "
                    f"{'live ' if pid_alive(holder) else ''}process "
                    f"{holder} for more than {q.lock_timeout}s")
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    def acquire(self) -> None:
        """Take the lock for this process (waiting as :meth:`wait` says)."""
        word = self.ptr()
        while not lock(word, os.getpid(), SPIN_NS):
            self.wait()

    def release(self) -> None:
        """Release the lock if this process holds it."""
        unlock(self.ptr(), os.getpid())

    def __enter__(self) -> WriteLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- chronicle.append.lock (a replication sink) ------------------------
    def check_append_lock(self) -> None:
        """Raise AppendLockedError if a live process holds ``chronicle.append.lock``
        (freeing it if its holder is dead)."""
        meta = self._meta
        value = meta.get(APPEND_LOCK)
        if value is None or value == UNLOCKED:
            return
        holder = lock_holder(value)
        if not pid_alive(holder):
            meta.cas(APPEND_LOCK, value, UNLOCKED)
            return
        raise AppendLockedError(
            f"queue {self.queue.path} is a replication sink: {APPEND_LOCK} is held "
            f"by process {holder}")

    def refuse_if_sink(self) -> None:
        """Refuse (AppendLockedError) before a roll creates a file or writes an
        EOF when another live process holds ``chronicle.append.lock`` (a
        replication sink), as Java checks it before rolling."""
        meta = self.queue._meta
        value = meta.get(APPEND_LOCK) if meta is not None else None
        if value is not None and value != UNLOCKED and lock_holder(value) != os.getpid():
            self.check_append_lock()
