"""The locks in ``metadata.cq4t``: ``chronicle.write.lock``, which every
appender of every process (Java's too) takes around each write, and
``chronicle.append.lock``, which a replication sink holds to keep other
writers out; their recovery from dead holders and ``UnlockMode``.

A lock value holds its holder's PID in its low 32 bits (Java's layout);
``UNLOCKED`` (``Long.MIN_VALUE``) is free.  aiochronicle puts a tag of its PID
namespace in bits 32-62 (Java reads only ``(int) value``, and never takes a lock
that is not ``UNLOCKED``), so a process in another namespace (another container)
is never taken for dead because its PID means nothing here: see
:func:`holder_alive`.  Java's values (and older aiochronicle's) carry no tag and
are read as PIDs of this namespace, as Java reads them.  Taking and releasing is one CAS
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
from typing import TYPE_CHECKING

from .._core._errors import AppendLockedError, QueueClosedError, WriteLockTimeoutError
from .._core._native import UNLOCKED, Cell, lock, unlock
from ._settings import UnlockMode

if TYPE_CHECKING:
    from .._format._tablestore import TableStore

__all__ = [
    "APPEND_LOCK",
    "LOCK_KEYS",
    "WRITE_LOCK",
    "LockState",
    "WriteLock",
    "break_lock",
    "free_dead_lock",
    "holder_alive",
    "lock_holder",
    "lock_states_in",
    "lock_value",
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


#: the inode of the initial PID namespace (``PROC_PID_INIT_INO``): a process in it
#: sees every process of the host in /proc
_INIT_PID_NS = 0xEFFFFFFC
_TAG_MASK = 0x7FFFFFFF
_tag_of_pid: tuple[int, int] = (0, 0)   # (pid, tag) of this process, by pid (forks)
#: holder_alive's verdicts on holders of another namespace: value -> (verdict, when)
_foreign_seen: dict[int, tuple[bool, float]] = {}


def _ns_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _tag_for(inode: int | None) -> int:
    return 0 if inode is None else (inode & _TAG_MASK) or 1


def namespace_tag() -> int:
    """This process's PID-namespace tag (31 bits of its ``/proc/self/ns/pid``
    inode; 0 where there is no such file)."""
    global _tag_of_pid
    pid = os.getpid()
    if _tag_of_pid[0] != pid:
        _tag_of_pid = (pid, _tag_for(_ns_inode("self")))
    return _tag_of_pid[1]


def lock_value() -> int:
    """The value this process writes into a lock it takes: its PID, with its
    namespace tag above (a Java process reads the PID back with ``(int)``)."""
    return namespace_tag() << 32 | os.getpid()


def lock_tag(value: int) -> int:
    """The namespace tag of a lock value (0: none, as Java writes it)."""
    return (value >> 32) & _TAG_MASK if value >= 0 else 0


def is_mine(value: int) -> bool:
    """Whether a lock value is this process's."""
    return lock_holder(value) == os.getpid() and lock_tag(value) in (0, namespace_tag())


def holder_alive(value: int, fresh: bool = False) -> bool:
    """Whether the holder of a lock value may be alive: never False for a
    process that lives.  ``fresh``: look now, not at a verdict of the last
    100 ms (which waiting loops share).

    A value without a tag, or with this namespace's, is a PID here
    (:func:`pid_alive`).  One of another PID namespace is looked for in /proc
    (processes whose ``ns/pid`` has the tag, by their innermost ``NSpid``): it
    is dead only when that search is conclusive (this process in the host's
    initial namespace, which sees every process, or a live process of that
    namespace visible without the holder among them).
    """
    pid, tag = lock_holder(value), lock_tag(value)
    if tag in (0, namespace_tag()):
        return pid_alive(pid)
    now = time.monotonic()
    seen = _foreign_seen.get(value)
    if not fresh and seen is not None and now - seen[1] < 0.1:  # one /proc scan per 100 ms
        return seen[0]
    verdict = _alive_in_namespace(tag, pid)
    if len(_foreign_seen) > 64:
        _foreign_seen.clear()
    _foreign_seen[value] = (verdict, now)
    return verdict


def _alive_in_namespace(tag: int, pid: int) -> bool:
    members = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit() or _tag_for(_ns_inode(entry)) != tag:
            continue
        members += 1
        try:
            with open(f"/proc/{entry}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"NSpid:"):
                        if int(line.split()[-1]) == pid:
                            return True
                        break
        except (OSError, ValueError):
            return True  # cannot tell: alive
    if members:
        return False  # the namespace is visible from here, the holder not in it
    return _ns_inode("self") != _INIT_PID_NS  # gone from the host's view: dead


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
    if is_mine(value) or holder_alive(value, fresh=True):
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
    pid = lock_value()
    deadline = time.monotonic() + timeout
    while True:
        value = meta.get(key)
        if value is None or value == UNLOCKED:
            if meta.cas(key, UNLOCKED, pid):  # (creates the key, free, if absent)
                return None
            continue
        holder = lock_holder(value)
        if not is_mine(value) and not holder_alive(value):
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
    return off is not None and meta.file.cas64(off, lock_value(), UNLOCKED)


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
            out.append(LockState(key, value, holder, holder_alive(value)))
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
        self._cell: Cell | None = None
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

    def ptr(self) -> Cell:
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
        return p is not None and int(p[0]) == lock_value()

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
                    f"{'live ' if holder_alive(value) else ''}process "
                    f"{holder} for more than {self.lock_timeout}s")
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    def acquire(self) -> None:
        """Take the lock for this process (waiting as :meth:`wait` says)."""
        word = self.ptr()
        while not lock(word, lock_value(), SPIN_NS):
            self.wait()

    def release(self) -> None:
        """Release the lock if this process holds it."""
        unlock(self.ptr(), lock_value())

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
        if value is not None and value != UNLOCKED and not is_mine(value):
            self.check_append_lock()
