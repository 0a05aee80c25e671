"""The tailer: reads excerpts in index order, from any index, never consuming them.

Variants are chosen when a tailer is made (:meth:`Queue.tailer`): a named
tailer keeps its position in ``metadata.cq4t``; an acknowledged one reads only
what a replica acknowledged.  The waiting side (``await read()``, ``async
for``, ``read_blocking``) is its base, :class:`~aiochronicle._objects._aio.AsyncTailerMixin`.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from .._core._errors import QueueClosedError, ReadOnlyQueueError
from .._core._native import (
    BAD_STATE,
    CORRUPT,
    EOF_,
    HDR_LENGTH_MASK,
    NEED_MAP,
    NONE,
    NOT_FOUND,
    NOT_REACHED,
    NULL,
    OK,
    TAILER_INDEX_WORD,
    TOO_LARGE,
    UNMARKED_END,
    Cell,
    HotTailer,
    Pointer,
    TailerStruct,
    check,
    error,
    from_buffer,
    handle,
    int64_at,
    new_bytes,
    new_tailer,
    new_uint64,
    read,
    read_batch,
    release_buffer,
    struct_words,
    unpack,
)
from .._messages._search import KeyFn, SearchStats, binary_search
from .._storage._excerpt import (
    SCRATCH,
    Batch,
    Excerpt,
    MetadataExcerpt,
    TailerDirection,
    TailerState,
    batch_of,
)
from .._storage._resource import _CycleFileUser, in_flight
from .._storage._settings import ACK_KEY
from ._aio import AsyncTailerMixin
from ._reading import ReadingDocument

if TYPE_CHECKING:
    import asyncio

    from .._format._store import CycleStore
    from .._format._tablestore import TableStore
    from .._storage._cycles import Cycles
    from .._waiting._pauser import Pauser
    from ._queueview import QueueView

__all__ = ["Tailer"]

_cq_read = read
_unpack = unpack
_tuple_new = tuple.__new__
_OUT_INDEX = TAILER_INDEX_WORD


class Tailer(AsyncTailerMixin, _CycleFileUser):
    """The tailer's reading, below the queue: the public class is
    :class:`aiochronicle.Tailer` (``_queue.Tailer``), which subclasses this one
    to name its queue and its method readers."""

    def __init__(self, cycles: Cycles, queue: QueueView, name: str | None,
                 direction: TailerDirection, include_metadata: bool) -> None:
        """A tailer reading ``cycles``, made by ``queue`` (:meth:`Queue.tailer`,
        the documented way in)."""
        self.queue: QueueView = queue
        """The queue this object belongs to."""
        self._cycles = cycles
        self.name = name
        """The named tailer's name (its position is kept as ``index.<name>``), or None."""
        self._store: CycleStore | None = None
        c = new_tailer()
        self._c: TailerStruct = c
        self._scratch: Pointer = new_bytes(SCRATCH)
        c.scratch = self._scratch
        c.scratch_cap = SCRATCH
        # struct fields read on the hot path go through a memoryview: far
        # cheaper than cffi attribute access
        self._out = struct_words(c)
        c.queue_shift = cycles.roll_cycle.cycle_shift
        c.include_meta = 1 if include_metadata else 0
        c.index = -1  # last_read_index: nothing read yet
        c.stall_cycle = -1
        meta = cycles.meta
        high = meta.offset("listing.highestCycle") if meta is not None else None
        if meta is not None and high is not None and high % 8 == 0:
            # a forward read stopped at an unwritten header asks whether the
            # cycle ended there only while a later cycle is listed (_unmarked_end)
            c.last_cycle = int64_at(meta.file.ptr(high))
        self._stall: tuple[int, float] | None = None  # (cycle, monotonic time to look again)
        self._direction = TailerDirection(direction)
        self._bind()
        self._cycle: int | None = None  # cycle of the position when no store is held
        self._closed = False
        self._batch_buf: bytearray | None = None
        self._named_off: int | None = None
        self._saved = 0  # the value of index.<name> as this tailer last wrote it
        self._last_mod = -2
        self._before_start = False
        self._hold_files(cycles.holds)
        if name is not None:
            meta = cycles.meta
            if meta is None or cycles.read_only:
                raise ReadOnlyQueueError("a named tailer needs a writable metadata.cq4t")
            self._named_off = meta.acquire(f"index.{name}", 0)
            stored = meta.file.load64(self._named_off)
            self._saved = stored
            if stored:
                if not self.move_to_index(stored):
                    self._position_at(cycles.roll_cycle.to_cycle(stored),
                                      cycles.roll_cycle.to_sequence(stored))
                return
        if self._direction == TailerDirection.BACKWARD:
            self.to_end()
        else:
            self.to_start()

    def __repr__(self) -> str:
        name = f" name={self.name!r}" if self.name is not None else ""
        way = "" if self._direction == TailerDirection.FORWARD else f" {self._direction.name}"
        state = " closed" if self._closed else ""
        return f"<Tailer {self.queue.path!r}{name} index={self.index:#x}{way}{state}>"

    # -- lifecycle -------------------------------------------------------
    def close(self) -> None:
        """Release this tailer's cycle file.  A named tailer saves its position
        first: what it handed out is done."""
        self._close(True)

    def _close(self, clean: bool) -> None:
        if clean and not self._closed and not self._cycles.closed:
            self._save()
        self._detach()

    def _queue_closing(self) -> None:
        """Before a clean close of the queue: a named tailer not closed
        yet saves its position (what it handed out is done)."""
        if not self._closed:
            self._save()

    def _after_fork(self) -> CycleStore | None:
        """In a forked child: a fresh wait guard (a thread
        of the parent may have held it, and only the forking thread survives)
        and no call in flight (those were the parent's threads'); returns the
        cycle file it holds (the queue counts its holders again)."""
        self._wait_guard = None
        self._forked()
        return self._store

    def _detach(self) -> None:
        if self._closed:
            return
        self._closed = True
        # the flag turns every later native call away with CQ_BAD_STATE; a read
        # in flight (another thread's, or the one a signal handler closing this
        # interrupted) keeps the store until it leaves (_resource)
        self._c.closed = 1
        self._abort_wait()  # end a spin/park in progress first (_aio)
        if not self._owe():
            self._let_go()

    def _let_go(self) -> None:
        """Release the cycle file: on close with no call in flight, else when
        the last one leaves (``native/hot.c``)."""
        st, self._store = self._store, None
        # no native call runs now and none will touch the store again (the
        # closed flag comes first): the struct lets go of it too
        self._c.store = NULL
        self._cycles.release(st)

    def _held(self) -> CycleStore:
        """The store a native read just used; gone only when the tailer was
        closed since (from another thread or a signal handler)."""
        st = self._store
        if st is None:
            raise QueueClosedError("the tailer is closed")
        return st

    def _check(self) -> None:
        if self._closed:
            raise QueueClosedError("the tailer is closed")
        self._cycles.check_open()

    # -- position --------------------------------------------------------
    @property
    def direction(self) -> TailerDirection:
        """FORWARD, BACKWARD or NONE."""
        return self._direction

    @direction.setter
    @in_flight
    def direction(self, value: TailerDirection) -> None:
        value = TailerDirection(value)
        if value != self._direction and self._store is not None:
            self._before_start = False
            # re-seek so the cursor's byte position matches its sequence
            self._position_at(self._store.cycle, int(self._c.seq))
        self._direction = value
        self._bind()

    def _bind(self) -> None:
        """Point the C calls at the native struct.  They read forward themselves
        unless metadata excerpts are wanted (those are read here, flagged);
        the waits spin-read natively unless reads are gated."""
        hot = self._direction == TailerDirection.FORWARD and not self._c.include_meta
        # read_blocking reads in C first only where read_nowait is the C one
        plain = type(self).read_nowait is HotTailer.read_nowait
        self._bind_native(handle(self._c), hot, plain)
        self._spin_reads = hot and not self._gated

    @property
    def cycle(self) -> int | None:
        """The cycle of the tailer's position (None before the queue has any)."""
        return self._store.cycle if self._store is not None else self._cycle

    @property
    def index(self) -> int:
        """The index the next read returns (or would return once written)."""
        cyc = self.cycle
        if cyc is None:
            return 0
        return self._cycles.roll_cycle.to_index(cyc, int(self._c.seq))

    @property
    def last_read_index(self) -> int:
        """The index of the last excerpt read (Java's ``lastReadIndex()``), -1
        before the first read.  A metadata excerpt read with
        ``include_metadata=True`` counts with the index of the next data excerpt."""
        return int(self._c.index)

    @property
    def state(self) -> TailerState:
        """Where the tailer stands (Java's ``TailerState``), worked out when
        asked from the position (it costs the read path nothing): at an
        excerpt or the end of the open cycle (FOUND_IN_CYCLE), past the end of
        a closed cycle (END_OF_CYCLE), at a cycle without a file
        (CYCLE_NOT_FOUND), before the first excerpt when reading backward
        (BEYOND_START_OF_CYCLE), past the next index to be written
        (NOT_REACHED_IN_CYCLE), or on a queue that had no cycle file
        (UNINITIALISED)."""
        self._check()
        st = self._store
        if st is None:
            return TailerState.UNINITIALISED if self._cycle is None else TailerState.CYCLE_NOT_FOUND
        if self._before_start:
            return TailerState.BEYOND_START_OF_CYCLE
        seq = int(self._c.seq)
        _, count, eof = st.end()
        if seq < count:
            return TailerState.FOUND_IN_CYCLE
        if eof:
            return TailerState.END_OF_CYCLE
        return TailerState.FOUND_IN_CYCLE if seq == count else TailerState.NOT_REACHED_IN_CYCLE

    def binary_search(self, key: Any, *, key_fn: KeyFn = bytes,
                      stats: SearchStats | None = None) -> int | None:
        """The index of the first excerpt whose key (``key_fn(payload)``) is at
        or after ``key``, found by binary search over the queue's index, O(log
        n) excerpts read; the tailer is left there (or at the end when None).
        See :func:`aiochronicle.binary_search`."""
        return binary_search(self, key, key_fn=key_fn, stats=stats)

    def reading_document(self) -> ReadingDocument:
        """The next excerpt in place: ``with tailer.reading_document() as doc:``
        gives a read-only view of its bytes in the mapped file (no copy), valid
        inside the block (see :class:`ReadingDocument`); ``doc.present`` is
        False when there is nothing to read yet.  The tailer moves past it
        when the block ends, unless ``doc.rollback_on_close()`` was called or
        the block raised.  Never waits.

        Raises:
            QueueClosedError: the tailer or its queue is closed.
        """
        self._enter()  # in flight until the block ends: the file stays mapped
        try:
            found = self._doc_locate()
            if (found is not None and self._ack_cell is not None
                    and self.index > int(self._ack_cell[0])):
                found = None  # not acknowledged by a replica yet: not there yet
            if found is None:
                return ReadingDocument(self.index, None, self._doc_finish_none)
            seq, pos, n = found
            idx = self.index
            st = self._held()
            # the file stays mapped while the view or any view taken from it
            # lives, even past the block, or if the tailer moves to another
            # cycle meanwhile: pinned until the last of them is gone
            self._cycles.hold(st)
            cycles = self._cycles
            try:
                view = st.file.pinned_view(pos + 4, n, lambda: cycles.release_later(st))
            except BaseException:
                cycles.release(st)
                raise
        except BaseException:
            self._leave()
            raise
        return ReadingDocument(idx, view,
                               lambda consumed: self._doc_finish(consumed, st, seq, pos, n))

    def _doc_locate(self) -> tuple[int, int, int] | None:
        """(sequence, header position, length) of the excerpt at the position
        (mapped), moving to the next cycle past an EOF; None if none yet."""
        self._check()
        for _ in range(1000):
            st = self._store
            if st is None:
                if not self._find_first_store():
                    return None
                continue
            if self._before_start:
                return None
            seq = int(self._c.seq)
            code, pos = st.seek(seq)
            if code == OK:
                f = st.file
                n = f.load32(pos) & HDR_LENGTH_MASK
                if not f.ensure(pos + 4 + n, grow=False):
                    raise error(CORRUPT, path=st.path, pos=pos,
                                detail="an excerpt runs past the end of the file")
                return seq, pos, n
            if (code == NOT_FOUND and self._direction == TailerDirection.FORWARD
                    and st.end()[2] and self._next_cycle()):
                continue
            return None
        return None

    def _doc_finish_none(self, consumed: bool) -> None:
        self._leave()

    def _doc_finish(self, consumed: bool, st: CycleStore, seq: int, pos: int, n: int) -> None:
        """A reading document ended: move past its excerpt if ``consumed``
        (unless the tailer was moved inside the block: that move stands)."""
        try:
            c = self._c
            if consumed and not self._closed and self._store is st and int(c.seq) == seq:
                c.index = self._cycles.roll_cycle.to_index(st.cycle, seq)
                way = self._direction
                if way == TailerDirection.FORWARD:
                    end = pos + 4 + n
                    c.pos = (end + 3) & ~3 if st.layout.align == 4 else end
                    c.seq = seq + 1
                    self._save()
                elif way == TailerDirection.BACKWARD:
                    self._step_back(seq)
        finally:
            self._leave()

    def _use_store(self, st: CycleStore | None, cycle: int | None) -> None:
        if self._closed:  # closed during this call: hold nothing new
            self._cycles.release(st)
            self._check()
        old = self._store
        self._store = st
        self._cycle = cycle
        c = self._c
        c.store = st.file.c if st is not None else NULL
        c.dropped = 0
        if old is not None and old is not st:
            self._cycles.release(old)

    def _position_at(self, cycle: int, seq: int, pos: int = 0) -> None:
        """Hold ``cycle``'s store (if it exists) with the cursor at (pos, seq)."""
        self._before_start = False
        if self._store is not None and self._store.cycle == cycle:
            st: CycleStore | None = self._store
        else:
            st = self._cycles.acquire(cycle)
            self._use_store(st, cycle)
        self._cycle = cycle
        c = self._c
        c.pos = pos
        c.seq = seq
        if st is not None and pos == 0 and seq:
            code, p = st.seek(seq)
            if code in (OK, NOT_REACHED):
                c.pos = p

    def _save(self, index: int | None = None) -> None:
        """Named tailers: persist ``index`` (default: the current position) as
        ``index.<name>``, the index a restarted tailer reads first."""
        if self._named_off is not None:
            value = self.index if index is None else index
            if value != self._saved:
                meta = self._cycles.meta
                assert meta is not None
                meta.file.store64(self._named_off, value)
                self._saved = value

    def _handed(self, ex: Excerpt | None) -> None:
        """Named tailers, at-least-once: while an excerpt is handed out the saved
        position stays *at* it (a restart after a crash mid-processing reads it
        again); the next read, by asking for more, marks it done."""
        if self._named_off is not None:
            self._save(ex.index if ex is not None else None)

    @in_flight
    def to_start(self) -> Tailer:
        """Move to the first excerpt of the queue."""
        self._check()
        cycles = self._cycles.listing()
        first = cycles[0] if cycles else None
        if first is None:
            self._use_store(None, None)
            self._c.pos = 0
            self._c.seq = 0
        else:
            self._position_at(first, 0, 0)
            if self._direction == TailerDirection.BACKWARD:
                self._c.seq = 0
        self._save()
        return self

    @in_flight
    def to_end(self) -> Tailer:
        """FORWARD: move past the last excerpt (the next read returns the next one
        written).  BACKWARD: move to the last excerpt."""
        self._check()
        q = self._cycles
        cycles = q.listing()
        if not cycles:
            self._use_store(None, None)
            self._c.seq = 0
            self._c.pos = 0
            return self
        if self._direction == TailerDirection.BACKWARD:
            for cyc in reversed(cycles):
                n = q.count(cyc)
                if n:
                    self._position_at(cyc, n - 1)
                    break
            else:
                self._position_at(cycles[-1], 0)
        else:
            last = cycles[-1]
            self._position_at(last, 0)
            st = self._store
            if st is not None:
                pos, seq, _ = st.end()
                self._c.pos = pos
                self._c.seq = seq
        self._save()
        return self

    @in_flight
    def move_to_index(self, index: int) -> bool:
        """Position at ``index``; True if an excerpt exists there.

        When ``index`` is exactly the next one to be written the tailer is left
        there and False is returned, so the next read returns it once written.
        """
        self._check()
        rc = self._cycles.roll_cycle
        try:
            cycle, seq = rc.to_cycle(index), rc.to_sequence(index)
        except ValueError:
            return False
        st = self._cycles.acquire(cycle)
        if st is None:
            return False
        code, pos = st.seek(seq)
        if code not in (OK, NOT_REACHED):
            self._cycles.release(st)
            return False
        if self._store is st:
            self._cycles.release(st)
        else:
            self._use_store(st, cycle)
        self._c.pos = pos
        self._c.seq = seq
        self._before_start = False
        self._save()
        return bool(code == OK)

    @in_flight
    def move_to_cycle(self, cycle: int) -> bool:
        """Position at the first excerpt of ``cycle``; False if it has no file."""
        self._check()
        st = self._cycles.acquire(cycle)
        if st is None:
            return False
        if self._store is st:
            self._cycles.release(st)
        else:
            self._use_store(st, cycle)
        self._c.pos = 0
        self._c.seq = 0
        self._before_start = False
        self._save()
        return True

    # -- reading ---------------------------------------------------------
    if TYPE_CHECKING:
        checkpoint_every: int
        """``await read()`` and ``async for`` give the event loop a turn at
        least once per this many excerpts returned without waiting (default
        64), so a backlog never starves the loop (a member of the C type)."""

        def read_nowait(self) -> Excerpt | None:
            """The next excerpt, or None if none has been written yet.

            Forward reads run in C (``native/hot.c``); a roll, a remap, other
            directions and errors come back to Python.
            """

        def read_blocking(self, timeout: float | None = None) -> Excerpt | None:
            """The next excerpt, blocking this thread with the tailer's pauser
            for at most ``timeout`` seconds (None: until one comes).  Returns
            None on timeout.  Spins run in native code with the GIL released,
            in slices of at most 1 ms (so signals are handled); parks end early
            on ``unpause()``, on close, and with ``Pauser.notify()`` on a
            commit.  Do not call it from an event loop thread: use ``await
            read()``.  An excerpt already there is read in C.

            Raises:
                QueueClosedError: the tailer or its queue is (or gets) closed.
            """


    def _taken(self, n: int) -> Excerpt | None:
        """The excerpt a native read returned ``n`` for (the wait's guard held)."""
        payload = _unpack(self._scratch if n <= SCRATCH else self._c.data, n)
        ex: Excerpt = _tuple_new(Excerpt, (self._out[_OUT_INDEX], payload))
        return ex

    def _after(self, n: int, ex: Excerpt | None) -> Excerpt | None:
        """Finish a native read of a wait outside its guard: codes other than
        data and CQ_NONE (a roll, a remap, no file yet, an error) go the slow way."""
        if ex is None and n != NONE:
            ex = self._read_slow(n)
        if self._named_off is not None:
            self._handed(ex)
        return ex

    def _excerpt(self, n: int) -> Excerpt:
        """The excerpt the native read just returned ``n`` (its length) for."""
        c = self._c
        kind = MetadataExcerpt if c.is_meta else Excerpt
        ex: Excerpt = _tuple_new(kind, (int(c.index), _unpack(c.data, n)))
        return ex

    @in_flight
    def _read_slow(self, n: int) -> Excerpt | None:
        """Carry on after the native read returned the code ``n``: move to the
        next cycle, map more of the file, or raise (``_native.check``)."""
        c = self._c
        for _ in range(1000):
            if n >= 0:
                return self._excerpt(n)
            if n == NONE:
                return None
            if n == BAD_STATE:
                self._check()
                if not self._find_first_store():
                    return None
            elif n == EOF_:
                if not self._next_cycle():
                    return None
            elif n == UNMARKED_END:
                if not self._unmarked_end():
                    return None
            elif n == NEED_MAP:
                held = self._held()
                need = int(c.need)
                if not held.file.ensure(need, grow=False):
                    if need == int(c.err_pos) + 4:
                        held.check_not_truncated(int(c.err_pos), int(c.seq))
                        return None
                    index = self._cycles.roll_cycle.to_index(held.cycle, int(c.seq))
                    raise error(CORRUPT, path=held.path, pos=int(c.err_pos),
                                detail=f"an excerpt of cycle {held.cycle} (reading index "
                                f"{index:#x}) runs past the end of the file")
            else:
                st = self._store
                check(n, path=st.path if st else self._cycles.path, pos=int(c.err_pos),
                      detail="corrupt excerpt header" if n == CORRUPT else "")
            n = _cq_read(c)
        return None

    def _find_first_store(self) -> bool:
        """With no store held (empty queue, or a cycle without a file): find one."""
        q = self._cycles
        cyc = self._cycle
        if cyc is None:
            cycles = q.listing()
            first = cycles[0] if cycles else None
            if first is None:
                return False
            return self._enter_cycle(first, save=False)
        st = q.acquire(cyc)
        if st is not None:
            seq = int(self._c.seq)
            self._use_store(st, cyc)
            self._position_at(cyc, seq)
            return True
        if q.pending(cyc):
            return False  # its header is not written yet: nothing to read yet
        q.check_unwritten(cyc)
        nxt = q.neighbour(cyc, 1)
        if nxt is None:
            return False
        return self._enter_cycle(nxt, save=False)

    def _next_cycle(self) -> bool:
        """At an EOF: move to the next cycle that has a file."""
        st = self._held()
        q = self._cycles
        mod = q.meta.get("listing.modCount") if q.meta is not None else None
        nxt = q.neighbour(st.cycle, 1)
        if nxt is None:
            if mod is not None and mod == self._last_mod:
                return False
            self._last_mod = mod if mod is not None else -2
            return False
        return self._enter_cycle(nxt)

    def _enter_cycle(self, cycle: int, save: bool = True) -> bool:
        """Move to the start of ``cycle`` (its file listed), passing by files
        whose header is not written and whose creator is gone (older than the
        queue's ``timeout``) in the same call; False while the one reached may
        still be written (nothing to read yet) or no cycle follows."""
        q = self._cycles
        for _ in range(1 << 16):  # bounded: each step moves to a later listed cycle
            self._position_at(cycle, 0)
            if save:
                self._save()
            if self._store is not None:
                return True
            if q.pending(cycle):
                return False
            q.check_unwritten(cycle)  # (a cleared first header with excerpts after it)
            nxt = q.neighbour(cycle, 1)
            if nxt is None:
                return False
            cycle = nxt
        return False

    def _unmarked_end(self) -> bool:
        """The read stopped at a header that is not ready (0, a claim, a damaged
        EOF) while a later cycle is listed (``CQ_UNMARKED_END``): move to the
        next cycle when this one provably ended there (``Cycles.unmarked_end``),
        else stay (nothing yet; looked at again at most every 50 ms a cycle:
        while a file made ahead of time waits for the roll, a reader keeping up
        with the writer comes here at every excerpt)."""
        st = self._held()
        c = self._c
        pos = int(c.err_pos)
        now = time.monotonic()
        last = self._stall
        nxt = None
        if last is None or last[0] != st.cycle or now >= last[1]:
            self._stall = (st.cycle, now + 0.05)
            index = self._cycles.roll_cycle.to_index(st.cycle, int(c.seq))
            nxt = self._cycles.unmarked_end(st, pos, index)
        if nxt is None:
            c.stall_cycle = st.cycle
            c.stall_pos = pos
            c.stall_polls = 0
            return False
        self._stall = None
        return self._enter_cycle(nxt)

    def _read_other(self) -> Excerpt | None:
        if self._direction == TailerDirection.FORWARD:  # with metadata excerpts
            return self._read_slow(int(_cq_read(self._c)))
        if self._direction == TailerDirection.NONE:
            return self._peek()
        return self._read_backward()

    def _read_at(self, st: CycleStore, seq: int, pos: int) -> Excerpt:
        """Read the data excerpt whose header is at ``pos``."""
        c = self._c
        c.pos = pos
        c.seq = seq
        n = _cq_read(c)
        while n == NEED_MAP and st.file.ensure(int(c.need), grow=False):
            c.pos = pos
            c.seq = seq
            n = _cq_read(c)
        if n < 0:
            self._check()  # CQ_BAD_STATE: closed meanwhile
            raise error(CORRUPT, path=st.path, pos=pos, detail="cannot read an indexed excerpt")
        return self._excerpt(n)

    def _peek(self) -> Excerpt | None:
        """Direction NONE: the excerpt at the current index, without moving."""
        self._check()
        st = self._store
        if st is None:
            return None
        seq = int(self._c.seq)
        code, pos = st.seek(seq)
        if code != OK:
            return None
        ex = self._read_at(st, seq, pos)
        self._c.pos = pos
        self._c.seq = seq
        return ex

    def _read_backward(self) -> Excerpt | None:
        self._check()
        q = self._cycles
        c = self._c
        while True:
            st = self._store
            if st is None or self._before_start:
                return None
            seq = int(c.seq)
            code, pos = st.seek(seq)
            if code == OK:
                ex = self._read_at(st, seq, pos)
                self._step_back(seq)
                return ex
            count = st.end()[1]
            if 0 < count <= seq:
                # past the end (e.g. after to_end()): start from the last excerpt
                c.seq = count - 1
                continue
            if seq < count:
                # an excerpt the end of the cycle counts is not found: damage
                raise error(CORRUPT, path=st.path, pos=pos,
                            detail=f"excerpt {seq} of {count} is not where the headers lead")
            # before the start of this cycle: go to the end of the previous one
            prev = q.neighbour(st.cycle, -1)
            while prev is not None and q.count(prev) == 0:
                prev = q.neighbour(prev, -1)
            if prev is None:
                return None
            self._position_at(prev, q.count(prev) - 1)

    def _step_back(self, seq: int) -> None:
        c = self._c
        if seq > 0:
            c.seq = seq - 1
            c.pos = 0
            self._save()
            return
        # moving before sequence 0: remember it by pointing at the previous cycle
        q = self._cycles
        st = self._held()
        prev = q.neighbour(st.cycle, -1)
        while prev is not None and q.count(prev) == 0:
            prev = q.neighbour(prev, -1)
        if prev is None:
            self._before_start = True
            return
        self._position_at(prev, q.count(prev) - 1)
        self._save()

    def read_many(self, max_count: int = 65536, max_bytes: int = 1 << 20) -> Batch:
        """Read up to ``max_count`` excerpts (and about ``max_bytes`` of payload)
        in one native call.  An empty batch means nothing new yet; an excerpt
        larger than ``max_bytes`` comes alone.  The batch is the caller's: the
        tailer never writes into it again."""
        if max_count < 1 or max_bytes < 0:
            raise ValueError(f"read_many needs max_count >= 1 and max_bytes >= 0, got "
                             f"{max_count} and {max_bytes}")
        if self._direction != TailerDirection.FORWARD or self._c.include_meta:
            items = []
            for _ in range(max_count):
                ex = Tailer.read_nowait(self)
                if ex is None:
                    break
                items.append(ex)
            self._handed(items[0] if items else None)
            return batch_of(items)
        c = self._c
        sc = self._batch_scratch
        if sc is None or sc.max_bytes < max_bytes or sc.max_count < max_count:
            if sc is not None:
                sc.release()
            sc = self._batch_scratch = _BatchScratch(max(max_bytes, 1), max(max_count, 1))
        n_out = sc.n_out
        # the one call here that touches the mapping (it copies out): counted
        # in flight without a wrapper's cost (a poll that finds nothing is common)
        self._enter()
        try:
            rc = read_batch(c, sc.pdata, max_bytes, sc.poffsets, sc.pindices, max_count,
                                   n_out)
        finally:
            self._leave()
        n = int(n_out[0])
        if n:
            if self._named_off is not None:
                self._save(sc.indices[0])  # the array pindices points into
            batch, spent = sc.take(n)
            if spent:
                self._batch_scratch = None  # handed out: new buffers next time
            return batch
        if rc == NONE:
            self._handed(None)
            return batch_of([])
        # too large for the buffer, a roll, a remap or an error: one single read
        ex = Tailer.read_nowait(self) if rc == TOO_LARGE else self._read_slow(int(rc))
        self._handed(ex)
        return batch_of([ex] if ex is not None else [])

    _batch_scratch: _BatchScratch | None = None

    # -- replication: only what a replica acknowledged ---------------------
    _ack_cell: Cell | None = None
    #: reads are checked against the replicas' acknowledgement (_AckedTailer)
    _gated = False

    @property
    def read_after_replica_acknowledged(self) -> bool:
        """When True, reads return only excerpts whose index is at most
        ``chronicle.lastAcknowledgedIndexReplicated``, the highest index a
        replication sink has acknowledged (Java's
        ``readAfterReplicaAcknowledged``; Java's default check is ``index ==
        lastAck`` within a cycle, this one is ``index <= lastAck``).  Until
        then the excerpt reads as not written yet; ``await read()`` and
        ``read_blocking()`` wait for the acknowledgement with the pauser.

        Chosen when the tailer is made (``queue.tailer(...,
        read_after_replica_acknowledged=True)``), so other tailers pay
        nothing; such a tailer can turn the check off and on again.
        """
        return self._ack_cell is not None

    @read_after_replica_acknowledged.setter
    def read_after_replica_acknowledged(self, value: bool) -> None:
        self._check()
        if value and not self._gated:
            raise ValueError("this tailer was made without the replica check: make one "
                             "with queue.tailer(..., read_after_replica_acknowledged=True)")
        self._ack_cell = self._ack_pointer() if value else None

    def _ack_pointer(self) -> Cell:
        meta = self._cycles.meta
        if meta is None or (self._cycles.read_only and meta.offset(ACK_KEY) is None):
            raise ReadOnlyQueueError(f"queue {self._cycles.path} has no {ACK_KEY} value")
        return meta.ptr(ACK_KEY, -1)

    def _reader_source(self, metadata: bool) -> _ReaderSource:
        """This tailer as a method reader reads it (``Tailer.method_reader``,
        which the public :class:`~aiochronicle.Tailer` defines: it names the
        public reader).  ``metadata``: the reader has metadata handlers.

        Raises:
            ValueError: metadata handlers on a tailer that skips metadata.
        """
        if metadata and not self._c.include_meta:
            raise ValueError("metadata_handlers need a tailer that reads metadata: "
                             "queue.tailer(include_metadata=True)")
        return _ReaderSource(self, self._save, self._wait, self._gone)

    def _table_store(self) -> TableStore | None:
        """The queue's metadata table store (the notify values live there)."""
        return self._cycles.meta

    def _gone(self) -> bool:
        """True once this tailer or its queue is closed."""
        return self._closed or self.queue.closed

    def __iter__(self) -> Iterator[Excerpt]:
        """Iterate over the excerpts available now (stops at the current end)."""
        while True:
            ex = self.read_nowait()
            if ex is None:
                return
            yield ex


class _ReaderSource:
    """A tailer as its method readers see it (``_methodreader.MethodSource``): its
    public reads, and the save, wait and closed check the tailer hands over."""

    __slots__ = ("_gone", "name", "read_many", "read_nowait", "save", "source_id", "tailer",
                 "wait")

    def __init__(self, tailer: Tailer, save: Callable[[], None],
                 wait: Callable[[Callable[[], bool] | None, asyncio.AbstractEventLoop | None,
                                 Callable[[Excerpt], bool] | None],
                                Awaitable[Excerpt | None]],
                 gone: Callable[[], bool]) -> None:
        self.tailer = tailer
        self.name = tailer.name
        self.source_id = tailer.queue.source_id
        self.read_nowait = tailer.read_nowait
        self.read_many = tailer.read_many
        self.save = save
        self.wait = wait
        self._gone = gone

    # what may change while the reader lives is read from the tailer each time
    @property
    def direction(self) -> TailerDirection:
        return self.tailer.direction

    @property
    def checkpoint_every(self) -> int:
        return self.tailer.checkpoint_every

    @property
    def pauser(self) -> Pauser:
        return self.tailer.pauser

    @property
    def closed(self) -> bool:
        return self._gone()


class _NamedTailer(Tailer):
    """A named tailer (``Queue.tailer(name)``): its position persists in
    ``metadata.cq4t`` as ``index.<name>``, at least once (see :meth:`Tailer._handed`)."""

    def read_nowait(self) -> Excerpt | None:
        """The next excerpt, or None if none has been written yet."""
        ex = Tailer.read_nowait(self)
        self._handed(ex)
        return ex


class _AckedTailer(Tailer):
    """A tailer made with ``read_after_replica_acknowledged=True``: reads stop
    at the highest index a replica acknowledged (see
    :attr:`Tailer.read_after_replica_acknowledged`).  Waits poll with the
    pauser (the acknowledgement is no excerpt header to spin on)."""

    _gated = True

    def __init__(self, cycles: Cycles, queue: QueueView, name: str | None,
                 direction: TailerDirection, include_metadata: bool) -> None:
        """A tailer gated by ``chronicle.lastAcknowledgedIndexReplicated``."""
        super().__init__(cycles, queue, name, direction, include_metadata)
        self._ack_cell = self._ack_pointer()

    def _acked_limit(self) -> int | None:
        """The highest readable index, or None when nothing may be read now."""
        if self._closed or self._cycles.closed:
            self._check()
        cell = self._ack_cell
        assert cell is not None  # an acked tailer's check is on while it gates
        ack = int(cell[0])
        if ack < 0 or (self._direction == TailerDirection.FORWARD and self.index > ack):
            return None
        return ack

    def read_nowait(self) -> Excerpt | None:
        """The next excerpt a replica acknowledged, or None."""
        if self._ack_cell is None:
            return super().read_nowait()
        ack = self._acked_limit()
        if ack is None:
            return None
        before = self._c.index
        ex = super().read_nowait()
        if ex is not None and ex.index > ack:
            self.move_to_index(ex.index)  # not acknowledged yet: read it again later
            self._c.index = before  # nor read (last_read_index)
            return None
        return ex

    def read_many(self, max_count: int = 65536, max_bytes: int = 1 << 20) -> Batch:
        """:meth:`Tailer.read_many`, up to the acknowledged index."""
        if self._ack_cell is None:
            return super().read_many(max_count, max_bytes)
        ack = self._acked_limit()
        if ack is None:
            return batch_of([])
        rc = self._cycles.roll_cycle
        if self._direction == TailerDirection.FORWARD and self.cycle == rc.to_cycle(ack):
            max_count = max(1, min(max_count, ack - self.index + 1))
        before = self._c.index
        b = super().read_many(max_count, max_bytes)
        idx = b.indices
        if len(idx) and idx[-1] > ack:
            k = next(i for i, x in enumerate(idx) if x > ack)
            self.move_to_index(idx[k])
            self._c.index = idx[k - 1] if k else before
            o = b.offsets
            return Batch(b.data[:o[k]], o[:k + 1], idx[:k])
        return b


class _AckedNamedTailer(_AckedTailer, _NamedTailer):
    """A named tailer that reads only what a replica acknowledged."""


class _BatchScratch:
    """The buffers ``read_many`` reads into, kept by the tailer between calls.

    Allocating (and page-faulting) a fresh megabyte for every call made a poll
    that found nothing cost a millisecond.  A small batch is copied out (an
    allocation of its own size); a large one takes the buffers themselves, and
    the next call makes new ones.
    """

    __slots__ = ("data", "indices", "max_bytes", "max_count", "n_out", "offsets", "pdata",
                 "pindices", "poffsets")

    HAND_OFF = 256 << 10  # bytes of payload from which the buffer itself is handed out

    def __init__(self, max_bytes: int, max_count: int) -> None:
        self.max_bytes = max_bytes
        self.max_count = max_count
        self.data = bytearray(max_bytes)
        self.offsets = array("q", bytes(8 * (max_count + 1)))
        self.indices = array("q", bytes(8 * max_count))
        self.n_out = new_uint64()
        self.pdata = from_buffer(self.data)
        self.poffsets = from_buffer("int64_t[]", self.offsets)
        self.pindices = from_buffer("int64_t[]", self.indices)

    def release(self) -> None:
        for p in (self.pdata, self.poffsets, self.pindices):
            release_buffer(p)

    def take(self, n: int) -> tuple[Batch, bool]:
        """The first ``n`` excerpts read, as a Batch the caller owns, and
        whether the buffers themselves went with it (then they are not to be
        read into again)."""
        used = self.offsets[n]
        if used >= self.HAND_OFF or n >= 4096:
            # the buffers themselves (no copy); the tailer makes new ones next time
            self.release()
            offsets, indices = self.offsets, self.indices
            del offsets[n + 1:]
            del indices[n:]
            return Batch(memoryview(self.data)[:used], offsets, indices), True
        return Batch(memoryview(bytes(memoryview(self.data)[:used])), self.offsets[:n + 1],
                     self.indices[:n]), False

