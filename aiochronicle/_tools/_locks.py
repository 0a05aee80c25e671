"""The ``locks`` and ``unlock`` commands as library calls: the write and
append locks of a queue directory, and their release when a holder died (or
by force).  How a lock is taken, freed and read is ``_writelock``'s.
"""

from __future__ import annotations

import os

from .._core._errors import NoSuchQueueError, NotAQueueError, QueueBusyError
from .._format._tablestore import TableStore
from .._objects._queue import is_queue_dir
from .._storage._settings import METADATA_FILE
from .._storage._writelock import LockState, break_lock, lock_states_in

__all__ = ["lock_states", "unlock_queue"]


def _open_meta(path: str, *, writable: bool) -> TableStore:
    """The ``metadata.cq4t`` of the queue at ``path``, where its locks are.

    Raises:
        NoSuchQueueError: nothing at ``path``.
        NotAQueueError: no ``metadata.cq4t`` there.
    """
    if not os.path.exists(path):
        raise NoSuchQueueError(f"no such queue: {path}")
    meta_path = os.path.join(path, METADATA_FILE)
    if not os.path.isfile(meta_path):
        if os.path.isdir(path) and is_queue_dir(path):
            raise NotAQueueError(f"{path} has no {METADATA_FILE} (a Chronicle Queue 4 "
                                 "directory?): it has no locks")
        raise NotAQueueError(f"not a Chronicle queue: {path} (no {METADATA_FILE})")
    return TableStore(meta_path, read_only=not writable, timeout=2.0)


def lock_states(path: str) -> list[LockState]:
    """The write and append locks of the queue at ``path``, with their holders.

    Raises:
        NoSuchQueueError: nothing at ``path``.
        NotAQueueError: ``path`` has no ``metadata.cq4t``.
    """
    meta = _open_meta(path, writable=False)
    try:
        return lock_states_in(meta)
    finally:
        meta.close()


def unlock_queue(path: str, *, force: bool = False) -> list[tuple[LockState, bool]]:
    """Release ``chronicle.write.lock`` and ``chronicle.append.lock`` when their
    holder is dead (or, with ``force``, whoever holds them).

    Returns (state before, released) for every lock key present.

    Raises:
        NoSuchQueueError: nothing at ``path``.
        NotAQueueError: ``path`` has no ``metadata.cq4t``.
        QueueBusyError: a lock is held by a live process and ``force`` is False
            (nothing is changed then).
    """
    meta = _open_meta(path, writable=True)
    try:
        states = lock_states_in(meta)
        live = [s for s in states if s.locked and s.alive]
        if live and not force:
            who = ", ".join(f"{s.key} by live process {s.holder}" for s in live)
            raise QueueBusyError(f"{who}; use --force to release it anyway")
        out = []
        for s in states:
            released = False
            if s.locked:
                released = break_lock(meta, s.key, s.value)
            out.append((s, released))
        return out
    finally:
        meta.close()
