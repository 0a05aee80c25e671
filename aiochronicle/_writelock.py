"""The locks in ``metadata.cq4t``: ``chronicle.write.lock``, which every
appender of every process (Java's too) takes around each write, and
``chronicle.append.lock``, which a replication sink holds to keep other
writers out; their recovery from dead holders and ``UnlockMode``.

A lock value holds its holder's PID in its low 32 bits (Java's layout);
``UNLOCKED`` (``Long.MIN_VALUE``) is free.  Taking and releasing is one CAS
in the native core (``cq_lock``/``cq_unlock``, which spin with the GIL
released); waiting, forcing and recovery are here.

So is every lock the tools and a replication sink take or free:
:func:`take_lock` (repair takes the write lock, a sink the append lock),
:func:`break_lock` (a dead holder's lock, ``unlock``, ``UnlockMode.ALWAYS``)
and :func:`release_lock`; :func:`lock_states_in` reads both locks.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import AppendLockedError, QueueClosedError, WriteLockTimeoutError
from ._native import UNLOCKED, lock, unlock
from ._settings import UnlockMode

if TYPE_CHECKING:
    from ._tablestore import TableStore

__all__ = [
    "APPEND_LOCK",
    "LOCK_KEYS",
    "WRITE_LOCK",
    "LockState",
    "WriteLock",
    "break_lock",
    "free_dead_lock",
    "lock_holder",
    "lock_states_in",
    "pid_alive",
    "recover_dead_locks",
    "release_lock",
    "take_lock",
]

WRITE_LOCK = "chronicle.write.lock"
APPEND_LOCK = "chronicle.append.lock"
LOCK_KEYS = (WRITE_LOCK, APPEND_LOCK)
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


def break_lock(meta: TableStore, key: str, value: int) -> bool:
    """Free lock ``key``, seen holding ``value``, whoever holds it: one CAS, so a
    lock that changed hands meanwhile is left alone.  True if it was freed."""
    return meta.cas(key, value, UNLOCKED)


def free_dead_lock(meta: TableStore, key: str, value: int) -> bool:
    """Free lock ``key``, seen holding ``value``, if its holder is another
    process and dead.  True if the holder was dead (the lock is free now, or
    was taken by another process meanwhile)."""
    holder = lock_holder(value)
    if holder == os.getpid() or pid_alive(holder):
        return False
    break_lock(meta, key, value)
    return True


def recover_dead_locks(meta: TableStore) -> None:
    """Free both locks when their holder is dead (done when a queue opens)."""
    for key in LOCK_KEYS:
        value = meta.get(key)
        if value is not None and value != UNLOCKED:
            free_dead_lock(meta, key, value)


def take_lock(meta: TableStore, key: str, timeout: float = 0.0) -> int | None:
    """Take lock ``key`` for this process with a CAS, taking it over from a dead
    holder; a live holder (this process too) is waited for up to ``timeout``
    seconds.  For the tools and the replication sink; an appender takes the
    write lock with :class:`WriteLock`.

    Returns None once the lock is taken, else the PID of the live holder that
    kept it.
    """
    pid = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        value = meta.get(key)
        if value is None or value == UNLOCKED:
            if meta.cas(key, UNLOCKED, pid):  # (creates the key, free, if absent)
                return None
            continue
        holder = lock_holder(value)
        if holder != pid and not pid_alive(holder):
            if meta.cas(key, value, pid):  # its holder died: ours now
                return None
            continue
        if time.monotonic() >= deadline:
            return holder
        time.sleep(0.01)


def release_lock(meta: TableStore, key: str) -> bool:
    """Release lock ``key`` if this process holds it (taken with :func:`take_lock`);
    a key that does not exist is left so.  True if it was released."""
    off = meta.offset(key)
    return off is not None and meta.file.cas64(off, os.getpid(), UNLOCKED)


@dataclass(frozen=True, slots=True)
class LockState:
    """One lock value of ``metadata.cq4t``."""

    key: str
    value: int
    holder: int | None  # PID, None when unlocked
    alive: bool

    @property
    def locked(self) -> bool:
        """True if some process holds this lock."""
        return self.holder is not None


def lock_states_in(meta: TableStore | None) -> list[LockState]:
    """The write and append locks of ``meta`` (those present), with their holders."""
    out: list[LockState] = []
    if meta is None:
        return out
    for key in LOCK_KEYS:
        value = meta.get(key)
        if value is None:
            continue
        if value == UNLOCKED:
            out.append(LockState(key, value, None, False))
        else:
            holder = value & 0xFFFFFFFF
            out.append(LockState(key, value, holder, pid_alive(holder)))
    return out


class WriteLock:
    """``chronicle.write.lock`` of one open queue, and its ``chronicle.append.lock``
    check.  Waiting follows ``unlock_mode`` and ``lock_timeout``."""

    __slots__ = ("_cell", "_closed", "_meta_or_none", "lock_timeout", "path", "unlock_mode")

    def __init__(self, meta: TableStore | None, path: str, *, lock_timeout: float,
                 unlock_mode: UnlockMode) -> None:
        """The lock words of ``meta`` (None: a read-only queue without
        metadata, which never takes the lock), for the queue at ``path``."""
        self._meta_or_none = meta
        self.path = path
        """The queue directory (for messages)."""
        self.lock_timeout = lock_timeout
        """Seconds to wait for a live holder before ``unlock_mode`` applies."""
        self.unlock_mode = unlock_mode
        """What to do with a lock a live process holds past ``lock_timeout``."""
        self._cell: Any = None
        self._closed = False

    def close(self) -> None:
        """The queue is closing: a wait stops with QueueClosedError (the lock
        word may be unmapped soon); a lock held can still be released."""
        self._closed = True

    @property
    def _meta(self) -> TableStore:
        meta = self._meta_or_none
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
        meta = self._meta
        lock = self.ptr()
        deadline = 0.0
        delay = 20e-6
        mode = self.unlock_mode
        last = UNLOCKED
        while True:
            if self._closed:  # before the word: a closed queue may have unmapped it
                raise QueueClosedError(f"queue {self.path} is closed")
            value = int(lock[0])
            if value == UNLOCKED:
                return
            if value != last:
                # the timeout is how long one holder keeps the lock: it starts
                # again whenever the lock changes hands
                last = value
                deadline = time.monotonic() + self.lock_timeout
            if mode is not UnlockMode.NEVER and free_dead_lock(meta, WRITE_LOCK, value):
                return
            holder = lock_holder(value)
            if time.monotonic() >= deadline:
                if mode is UnlockMode.ALWAYS:
                    warnings.warn(f"forcing {WRITE_LOCK} of {self.path} away from "
                                  f"process {holder} after {self.lock_timeout}s",
                                  RuntimeWarning, stacklevel=4)
                    break_lock(meta, WRITE_LOCK, value)
                    return
                raise WriteLockTimeoutError(
                    f"{WRITE_LOCK} of {self.path} is held by "
                    f"{'live ' if pid_alive(holder) else ''}process "
                    f"{holder} for more than {self.lock_timeout}s")
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
        if free_dead_lock(meta, APPEND_LOCK, value):
            return
        raise AppendLockedError(
            f"queue {self.path} is a replication sink: {APPEND_LOCK} is held "
            f"by process {lock_holder(value)}")

    def refuse_if_sink(self) -> None:
        """Refuse (AppendLockedError) before a roll creates a file or writes an
        EOF when another live process holds ``chronicle.append.lock`` (a
        replication sink), as Java checks it before rolling."""
        meta = self._meta_or_none
        value = meta.get(APPEND_LOCK) if meta is not None else None
        if value is not None and value != UNLOCKED and lock_holder(value) != os.getpid():
            self.check_append_lock()
