"""Rolling: which cycle file an appender writes next, and EOF normalisation.

An appender rolls when the clock enters a new cycle, when its cycle was
closed by an EOF marker (another writer rolled), or when it is told to write
at an index of another cycle (``write_at``).  Under the write lock it picks the
target (never behind a newer cycle that already holds data), closes every
older cycle that lacks an EOF marker, newest first, stopping at the first
that has one (Java's EOF normalisation), and opens or creates the target.
"""

from __future__ import annotations

import bisect
import warnings
from typing import TYPE_CHECKING

from ._errors import CorruptQueueError, UnalignedCycleError

if TYPE_CHECKING:
    from ._queue import Queue
    from ._store import CycleStore

__all__ = ["cycle_has_content", "normalise_eofs", "roll_store", "store_at"]


def normalise_eofs(queue: Queue, before: int, cycles: list[int]) -> None:
    """Close every cycle older than ``before`` that lacks its EOF marker,
    newest first, stopping at the first that has one.  The write lock must be
    held.  A damaged older cycle is left as it is, with one warning per queue."""
    for older in reversed(cycles[:bisect.bisect_left(cycles, before)]):
        st = queue._acquire_store(older, wait=True)  # (a creator may be writing its header)
        if st is None:
            continue
        try:
            if st.end()[2]:
                return
            st.write_eof()
        except (CorruptQueueError, UnalignedCycleError) as exc:
            # a damaged older cycle must not make the queue unwritable:
            # leave it as it is (readers stop there with this error, and
            # `aiochronicle repair` recovers it) and go on
            if older not in queue._unclosable:
                queue._unclosable.add(older)
                warnings.warn(f"cycle {older} could not be closed with an end-of-file "
                              f"marker: {exc}", RuntimeWarning, stacklevel=2)
        finally:
            queue._release_store(st)


def cycle_has_content(queue: Queue, cycle: int) -> bool:
    """True if ``cycle``'s file holds an excerpt or is closed by an EOF."""
    st = queue._acquire_store(cycle)
    if st is None:
        return False
    try:
        _, count, eof = st.end()
        return count > 0 or eof
    finally:
        queue._release_store(st)


def roll_store(queue: Queue, current: int | None, want: int | None,
               after_eof: bool) -> CycleStore:
    """The store an appender now on cycle ``current`` moves to: the cycle the
    clock asks for (at least ``want``; past ``current`` when that was closed by
    an EOF), older cycles closed first.  Takes the write lock for it."""
    queue._check_open()
    with queue._write_lock:
        clock = queue.current_cycle()
        target = clock if want is None else max(want, clock)
        # the listing is fresh by listing.modCount, which every creator of a
        # cycle file bumps (Java too): no directory scan per roll
        cycles = queue.cycles()
        # never write behind a newer cycle that already holds data (another
        # writer's clock is ahead); an empty pre-created file does not count
        for newer in reversed(cycles[bisect.bisect_right(cycles, target):]):
            if cycle_has_content(queue, newer):
                target = newer
                break
        if current is not None and after_eof and target <= current:
            target = current + 1
        while True:
            normalise_eofs(queue, target, cycles)
            st = queue._acquire_store(target, create=True)
            assert st is not None
            if not st.end()[2]:
                return st
            queue._release_store(st)
            target += 1
            cycles = queue.cycles()


def store_at(queue: Queue, cycle: int) -> CycleStore:
    """The store of ``cycle`` (created if needed) regardless of the clock, every
    older cycle that lacks an EOF closed first.  Takes the write lock for it."""
    queue._check_open()
    with queue._write_lock:
        queue._invalidate_listing()
        normalise_eofs(queue, cycle, queue.cycles())
        st = queue._acquire_store(cycle, create=True)
        assert st is not None
        return st
