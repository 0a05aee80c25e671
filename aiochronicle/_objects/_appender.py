"""The appender: writes excerpts at the end of a queue."""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .._core._errors import (
    ChronicleError,
    HeaderlessCycleError,
    IllegalIndexError,
    MessageTooLargeError,
    QueueClosedError,
    ReplicationTimeoutError,
)
from .._core._native import (
    APPEND_LOCKED,
    BAD_STATE,
    CORRUPT,
    DUPLICATE,
    EOF_,
    GAP,
    INDEX_FULL,
    LOCKED,
    NEED_MAP,
    NO_SPACE,
    NOT_REACHED,
    NULL,
    NULL_CELL,
    NULL_STORE,
    ROLL,
    AppenderStruct,
    Array,
    Cell,
    HotAppender,
    Pointer,
    append,
    append_at,
    append_batch,
    check,
    code_name,
    doc_abandon,
    doc_begin,
    doc_commit,
    doc_ensure,
    doc_rollback,
    from_buffer,
    handle,
    int64_at,
    memmove,
    new_appender,
    new_int64,
    new_uint64,
    release_buffer,
    unpack,
)
from .._format._clock import SetTimeProvider, SystemTimeProvider, TimeProvider, clock_cell
from .._format._headerless import headerless_append_message
from .._messages._methodwriter import make_method_writer
from .._storage._excerpt import text_bytes
from .._storage._resource import _CycleFileUser, in_flight
from .._storage._settings import ACK_KEY, MAX_PAYLOAD, SyncMode
from .._storage._writelock import lock_value
from .._waiting._notify import notify_watch
from ._document import DocumentContext

if TYPE_CHECKING:
    from .._format._store import CycleStore
    from .._messages._codecs import Codec
    from .._storage._cycles import Cycles
    from ._queueview import QueueView

__all__ = ["Appender", "AppenderListener"]

AppenderListener = Callable[[int, bytes], None]
"""``listener(index, payload)``: called after each excerpt an appender commits
(see :meth:`Queue.appender`)."""

_log = logging.getLogger("aiochronicle")

_T = TypeVar("_T")
_cq_append = append
_cq_append_at = append_at
#: native codes after which an appender rolls (a sink's append lock is checked first)
_ROLL_CODES = (BAD_STATE, ROLL, EOF_)
#: bytes of disk reserved ahead of the writers at a time
RESERVE_STEP = 1 << 20


class Appender(HotAppender, _CycleFileUser):
    """The appender's writing, below the queue: the public class is
    :class:`aiochronicle.Appender` (``_queue.Appender``), which subclasses this
    one to name its queue."""

    def __init__(self, cycles: Cycles, queue: QueueView, notify: bool = False) -> None:
        """An appender writing ``cycles`` (a writable queue's), made by
        ``queue`` (:meth:`Queue.appender`, the documented way in): it reads
        the queue's public sync settings; with ``notify`` it wakes parked
        ``Pauser.notify()`` tailers."""
        meta = cycles.meta
        assert meta is not None
        self.queue = queue
        """The queue this object belongs to."""
        self._cycles = cycles
        self._meta = meta
        self._write_lock = cycles.write_lock
        self._store: CycleStore | None = None
        c = new_appender()
        self._c: AppenderStruct = c
        self._keep: list[Cell] = []
        c.write_lock = self._write_lock.ptr()
        self._refresh_append_lock()
        c.pid = lock_value()  # the PID, with its namespace tag (_writelock)
        tp = cycles.time_provider
        self._py_clock: TimeProvider | None = None
        if isinstance(tp, SetTimeProvider):
            cell = clock_cell(tp)
            c.clock_cell = cell
            self._keep.append(cell)
        elif isinstance(tp, SystemTimeProvider):
            c.clock_cell = NULL_CELL
        else:
            cell = new_int64(tp.current_time_millis())
            self._keep.append(cell)
            c.clock_cell = cell
            self._py_clock = tp
        c.epoch = cycles.epoch
        c.length_ms = cycles.roll_cycle.length_ms
        c.queue_shift = cycles.roll_cycle.cycle_shift
        c.check_cycle = 1
        c.lock_spin_ns = 100_000
        c.populate_step = 1 << 20
        c.last_index = -1
        #: with ``notify``, what the native appender checks after each commit to
        #: wake parked ``Pauser.notify()`` tailers (``_notify``); kept while it points at it
        self._notify_watch: Pointer | None = notify_watch(meta) if notify else None
        if self._notify_watch is not None:
            c.notify = self._notify_watch
        self._closed = False
        self._synced_pos = 0
        self._synced_store: CycleStore | None = None
        self._since_sync = 0
        self._last_sync = time.monotonic()
        self._bind_native(handle(c))
        self._hold_files(cycles.holds)

    def _refresh_append_lock(self) -> None:
        meta = self._meta
        off = meta.offset("chronicle.append.lock")
        self._c.append_lock = NULL if off is None else int64_at(meta.file.ptr(off))

    def __repr__(self) -> str:
        return f"<Appender {self.queue.path!r} cycle={self.cycle}>"

    # -- lifecycle -------------------------------------------------------
    def close(self) -> None:
        """Release this appender's cycle file."""
        self._detach()

    async def aclose(self) -> None:
        """:meth:`close` for ``async`` code (idempotent)."""
        self.close()

    def _after_fork(self) -> CycleStore | None:
        """In a forked child: take the write lock with
        this process's PID (not the parent's); a document a thread of the
        parent had open stays the parent's (the child neither commits nor
        abandons it, and never releases the parent's lock), and no call is in
        flight (those were the parent's threads').  Returns the cycle file it
        holds (the queue counts its holders again)."""
        c = self._c
        c.pid = lock_value()
        c.doc_open = 0
        self._forked()
        return self._store

    def _detach(self) -> None:
        # May run on another thread than one appending right now (Queue.close),
        # or in a signal handler that interrupted an append: the closed flag
        # turns every later native call away; a call in flight keeps the store
        # (and the native struct its pointers) until it leaves (_resource).
        if self._closed:
            return
        self._closed = True
        c = self._c
        c.closed = 1
        if c.doc_open:
            # the owner may still be copying into the document: its slot
            # becomes padding, so those bytes land where nobody reads
            doc_abandon(c)
        if not self._owe():
            self._let_go()

    def _let_go(self) -> None:
        """Release the cycle file: on close with no call in flight, else when
        the last one leaves (``native/hot.c``)."""
        c = self._c
        if c.doc_open:
            # a document begun while the close ran (its begin was waiting for
            # the lock): end it as _detach does, while the file is still held
            doc_abandon(c)
        st, self._store = self._store, None
        # no native call runs now and none will touch the store again (the
        # closed flag comes first): the struct lets go of it too
        self._c.store = NULL_STORE
        self._cycles.release(st)

    def _held(self) -> CycleStore:
        """The store a native call just used; gone only when the appender
        was closed since (from another thread or a signal handler)."""
        st = self._store
        if st is None:
            raise QueueClosedError("the appender is closed")
        return st

    # -- properties ------------------------------------------------------
    @property
    def cycle(self) -> int | None:
        """The cycle this appender writes to, once it has written."""
        return None if self._store is None else self._store.cycle

    @property
    def last_index_appended(self) -> int:
        """The index of the last excerpt this appender wrote (-1 before any)."""
        return int(self._c.last_index)

    @property
    def excerpts_appended(self) -> int:
        """How many excerpts this appender has written (a counter the native
        core keeps as it commits: reading it costs nothing on the write path)."""
        return int(self._c.appended)

    #: the listeners of an appender made with some (``_ListenedAppender``)
    _listeners: tuple[AppenderListener, ...] = ()

    def _tell_run(self, buf: bytes | Array, offsets: array[int], start: int, n: int) -> None:
        """Tell the listeners about excerpts ``start..start+n-1`` of a packed
        run, just committed in one native batch (one cycle, one lock hold:
        their indices are consecutive up to the last one appended)."""
        first = int(self._c.last_index) - n + 1
        for j in range(n):
            o0, o1 = offsets[start + j], offsets[start + j + 1]
            payload = buf[o0:o1] if isinstance(buf, bytes) else unpack(buf + o0, o1 - o0)
            self._tell(first + j, payload)

    def _tell(self, index: int, payload: bytes) -> None:
        """Call every listener with ``(index, payload)``; one that raises is
        logged on the ``aiochronicle`` logger and the others still run (the
        excerpt is committed already)."""
        for fn in self._listeners:
            try:
                fn(index, payload)
            except Exception:
                _log.exception("appender listener %r failed on %#x (the excerpt is written)",
                               fn, index)

    # -- appending -------------------------------------------------------
    if TYPE_CHECKING:
        def append(self, data: bytes | bytearray | memoryview | str) -> int:
            """Append one excerpt; returns its 64-bit index.

            ``str`` is written as UTF-8 bytes (see :meth:`append_text` for
            BinaryWire text as Java's ``writeText`` writes it).  The common case
            runs in C (``native/hot.c``) without releasing the GIL; a roll, a
            remap, a busy lock or an error comes back to Python.
            """

    def _append_native_failed(self, rc: int, data: object) -> int:
        """The C ``append`` returned ``rc`` (0: it could not take ``data`` as a
        buffer): the slow path, which coerces, rolls, maps, waits or raises."""
        coerced = data if type(data) is bytes else self._coerce(data)
        if rc == 0:
            rc = _cq_append(self._c, coerced, len(coerced), 0)
            if rc >= 0:
                return int(rc)
        return self._append_slow(rc, coerced, 0)

    def append_text(self, text: str) -> int:
        """Append ``text`` as BinaryWire text, byte-compatible with Java's ``writeText``."""
        return self.append(text_bytes(text))

    def method_writer(self, iface: type[_T] | Callable[..., _T], *,
                      codec: Codec | str | None = None,
                      record_history: bool | None = None,
                      generic_event: str | None = None, metadata: bool = False) -> _T:
        """A proxy of the interface ``iface`` whose every method call appends one
        excerpt holding the method and its encoded arguments (see ``_methodwriter``).

        ``codec`` defaults to the one the queue records, else msgpack (recorded
        then), whatever the queue holds already; method calls for Java need
        ``codec="binary_wire"`` (the default only for interfaces with chained
        methods, which exist in BinaryWire alone).
        ``record_history`` (default: when the queue's ``source_id`` is not 0,
        as Java) writes the message history first in each excerpt.
        ``generic_event`` names a method of ``iface`` whose first argument is
        the event to write (Java's ``genericEvent``): ``w.send("onPrice", p)``
        writes what ``onPrice(p)`` would.  ``metadata=True`` writes the calls as
        metadata excerpts (for a reader's ``metadata_handlers``).

        Raises:
            CodecMismatchError: the queue records another codec.
            ValueError: ``record_history=True`` on a queue whose source_id is 0.
            TypeError: ``iface`` is not a usable interface, or has no method
                ``generic_event``.
        """
        q = self.queue
        return make_method_writer(self, iface, self._meta, q.path, q.source_id, codec=codec,
                                  record_history=record_history,
                                  generic_event=generic_event, metadata=metadata,
                                  append_metadata=self.append_metadata)

    @in_flight
    def append_metadata(self, data: bytes | bytearray | memoryview | str) -> None:
        """Append a metadata excerpt (skipped by tailers unless asked for; no index)."""
        raw = data if type(data) is bytes else self._coerce(data)
        if self._py_clock is not None:
            self._c.clock_cell[0] = self._py_clock.current_time_millis()
        rc = _cq_append(self._c, raw, len(raw), 1)
        if rc < 0:
            self._append_slow(rc, raw, 1)

    @staticmethod
    def _coerce(data: object) -> bytes | Array:
        if isinstance(data, str):
            return data.encode()
        if isinstance(data, bytearray | memoryview):
            return from_buffer(data)
        raise TypeError(f"cannot append {type(data).__name__}; expected bytes or str")

    def _append_slow(self, rc: int, data: bytes | Array, meta: int) -> int:
        c = self._c
        for _ in range(10_000):
            self._handle(rc, len(data), bool(meta))
            rc = _cq_append(c, data, len(data), meta)
            if rc >= 0:
                return int(rc) if not meta else -1
        raise ChronicleError(f"append did not settle (last code {rc})")

    def _handle(self, rc: int, size: int, meta: bool = False) -> None:
        """Deal with a non-OK code of the native append: roll, map, reserve,
        wait; raise the named error (``_native.check``) for the rest."""
        c = self._c
        if self._closed:
            raise QueueClosedError("the appender is closed")
        if not meta and rc in _ROLL_CODES:
            self._write_lock.refuse_if_sink()
        if rc == BAD_STATE:
            if c.doc_open:
                raise ChronicleError("a writing_document() of this appender is still open")
            self._roll(None)
        elif rc == ROLL:
            self._roll(int(c.want_cycle))
        elif rc == EOF_:
            self._roll(None, after_eof=True)
        elif rc == NEED_MAP:
            self._held().file.ensure(int(c.need))
        elif rc == NO_SPACE:
            self._reserve(int(c.need))
        elif rc == LOCKED:
            self._write_lock.wait()
        elif rc == NOT_REACHED:
            pass  # a long walk to the end of the data let the lock go: call again
        elif rc == APPEND_LOCKED:
            self._write_lock.check_append_lock()
        else:
            st = self._store
            check(rc, path=st.path if st is not None else self._cycles.path,
                  pos=int(c.err_pos), what=f"appending {size} bytes", size=size,
                  detail=self._detail(rc))

    def _detail(self, rc: int) -> str:
        """What the appender knows beyond ``check``'s own message."""
        if rc == INDEX_FULL:
            return (f"cycle {self.cycle} holds as many excerpts as "
                    f"{self._cycles.roll_cycle.name} can index")
        if rc == CORRUPT:
            return "found bytes where the next excerpt should go"
        return ""

    def _reserve(self, need: int) -> None:
        """Reserve disk blocks up to ``need`` (and a step beyond) before writing."""
        st = self._held()
        c = self._c
        start = int(c.allocated)
        end = max(need, min(start + RESERVE_STEP, st.file.size))
        if not st.file.reserve(start, end):
            # neither fallocate nor a populating fault works here (warned by
            # MappedFile.reserve): nothing can be reserved, stop asking
            end = 1 << 62
        c.allocated = end

    def _roll(self, want: int | None, after_eof: bool = False) -> None:
        """Move to the cycle the clock asks for, closing older cycles with EOF (``Cycles.roll``)."""
        cur = self._store
        self._set_store(self._cycles.roll(cur.cycle if cur is not None else None, want,
                                          after_eof))

    @in_flight
    def write_packed_at(self, index: int, data: bytes | bytearray | memoryview,
                        offsets: Sequence[int] | array[int]) -> int:
        """Write the messages ``data[offsets[i]:offsets[i+1]]`` as the excerpts
        ``index``, ``index + 1``, ... (a replication sink's positioned batch).

        The first is written as :meth:`write_at` writes (it may move to, and
        create, the cycle of ``index``); the rest follow in the same cycle in
        native batches, whatever the clock says.  Returns how many were written:
        0 when an excerpt already exists at ``index`` (a replayed write).

        Raises:
            IllegalIndexError: earlier indices are missing, the cycle is closed,
                or another writer appended in between (the indices moved).
        """
        n = len(offsets) - 1
        if n <= 0:
            return 0
        if not isinstance(offsets, array) or offsets.typecode != "q":
            offsets = array("q", offsets)
        if offsets[-1] > len(data) or offsets[0] < 0:
            raise ValueError("offsets run past the end of data")
        view = memoryview(data)
        if not self.write_at(index, view[offsets[0]:offsets[1]]):
            return 0
        if n > 1:
            self._append_run_here(index, view, offsets)
        return n

    def _append_run_here(self, first: int, data: memoryview, offsets: array[int]) -> None:
        """Excerpts ``1..n-1`` of a run whose excerpt 0 was just written at
        ``first``: native batch appends with the cycle check off (the run's
        cycle, not the clock's, decides)."""
        n = len(offsets) - 1
        c = self._c
        buf = from_buffer(data)
        offs = from_buffer("int64_t[]", offsets)
        saved = c.check_cycle
        c.check_cycle = 0
        try:
            self._append_batches(buf, offs, offsets, 1, at=first)
        finally:
            c.check_cycle = saved
            release_buffer(buf)
            release_buffer(offs)
        last = int(c.last_index)
        if last != first + n - 1:
            raise IllegalIndexError(f"another writer appended in between: wrote {last:#x}, "
                                    f"expected {first + n - 1:#x}")

    def _roll_to(self, cycle: int) -> None:
        """Move to ``cycle`` (creating it) regardless of the clock, closing every
        older cycle that lacks an EOF."""
        self._cycles.check_open()
        self._write_lock.refuse_if_sink()
        self._set_store(self._cycles.store_at(cycle))

    def _set_store(self, st: CycleStore) -> None:
        if self._closed:  # closed during this call: hold nothing new
            self._cycles.release(st)
            raise QueueClosedError("the appender is closed")
        if st.layout.headerless:
            self._cycles.release(st)
            raise HeaderlessCycleError(headerless_append_message(st.path))
        old = self._store
        self._store = st
        c = self._c
        c.store = st.file.c
        c.pos = 0
        c.seq = 0
        c.populated = 0
        c.dropped = 0
        c.allocated = 0
        if self._cycles.zoned is not None:
            # the native roll check divides by one length: give it this day's
            # (23, 24 or 25 hours) and the epoch that puts this cycle's start right
            start, end = self._cycles.span_ms(st.cycle)
            c.length_ms = end - start
            c.epoch = start - st.cycle * (end - start)
        self._refresh_append_lock()
        if old is not None:
            self._cycles.release(old)

    @in_flight
    def write_at(self, index: int, data: bytes | bytearray | memoryview) -> bool:
        """Write ``data`` as the excerpt at ``index`` exactly (Java's positioned
        ``writeBytes(index, bytes)``, what a replication sink does so indices
        mean the same on every host).

        Returns True when written, False when an excerpt already exists at
        ``index`` (a replayed write is ignored). Raises IllegalIndexError when
        earlier indices are missing, or ``index`` lies in a cycle that is
        already closed. Moves to (and creates) the cycle of ``index`` whatever
        the clock says.
        """
        raw: bytes | Array
        if type(data) is bytes:
            raw = data
        # a small payload is copied (cheaper than a cffi buffer per call)
        elif ((isinstance(data, bytearray) and len(data) <= 65536)
                or (isinstance(data, memoryview) and data.nbytes <= 65536)):
            raw = bytes(data)
        else:
            raw = self._coerce(data)
        shift = self._cycles.roll_cycle.cycle_shift
        st = self._store
        if st is not None and index >= 0 and st.cycle == index >> shift:
            # the common case of a replication sink: the next index of this cycle
            r = _cq_append_at(self._c, raw, len(raw), index & ((1 << shift) - 1))
            if r >= 0:
                return True
            if r == DUPLICATE:
                return False
        return self._write_at_slow(index, raw)

    def _write_at_slow(self, index: int, data: bytes | Array) -> bool:
        rc_ = self._cycles.roll_cycle
        cycle, seq = rc_.to_cycle(index), rc_.to_sequence(index)
        c = self._c
        for _ in range(10_000):
            st = self._store
            if st is None or st.cycle < cycle:
                self._roll_to(cycle)
                continue
            if st.cycle > cycle:
                older = self._cycles.acquire(cycle)
                count = 0
                if older is not None:
                    try:
                        count = older.end()[1]
                    finally:
                        self._cycles.release(older)
                if seq < count:
                    return False
                raise IllegalIndexError(
                    f"cannot write {index:#x}: cycle {cycle} is closed (this queue writes "
                    f"cycle {st.cycle})")
            r = _cq_append_at(c, data, len(data), seq)
            if r >= 0:
                return True
            if r == DUPLICATE:
                return False
            if r == GAP:
                raise IllegalIndexError(
                    f"cannot write {index:#x}: earlier excerpts of cycle {cycle} are missing "
                    f"(next is {rc_.to_index(cycle, st.end()[1]):#x})")
            if r == EOF_:
                older = self._cycles.acquire(cycle)
                try:
                    count = older.end()[1] if older is not None else 0
                finally:
                    self._cycles.release(older)
                if seq < count:
                    return False
                raise IllegalIndexError(f"cannot write {index:#x}: cycle {cycle} is closed")
            self._handle(int(r), len(data))
        raise ChronicleError("positioned write did not settle")

    def append_many(self, messages: Iterable[bytes]) -> int:
        """Append every message of ``messages`` (bytes) in order, holding the
        lock once per native batch; returns the index of the last one."""
        if not isinstance(messages, list | tuple):
            messages = list(messages)
        if not messages:
            return int(self._c.last_index)
        offsets = array("q", [0])
        total = 0
        for m in messages:
            total += len(m)
            offsets.append(total)
        return self.append_packed(b"".join(messages), offsets)

    @in_flight
    def append_packed(self, data: bytes | bytearray | memoryview,
                      offsets: Sequence[int] | array[int]) -> int:
        """Append the messages ``data[offsets[i]:offsets[i+1]]`` (Arrow's binary
        layout); returns the index of the last one."""
        n = len(offsets) - 1
        if n <= 0:
            return int(self._c.last_index)
        if not isinstance(offsets, array) or offsets.typecode != "q":
            offsets = array("q", offsets)
        if offsets[-1] > len(data):
            raise ValueError("offsets run past the end of data")
        buf = data if type(data) is bytes else from_buffer(data)
        self._append_batches(buf, from_buffer("int64_t[]", offsets), offsets, 0)
        return int(self._c.last_index)

    def _append_batches(self, buf: bytes | Array, offs: Array, offsets: array[int], start: int,
                        at: int | None = None) -> None:
        """Append excerpts ``start..n-1`` of a packed run in native batches,
        dealing with every other code (roll, map, wait) between them.  ``at``:
        the index of excerpt 0 of a positioned run, written in its cycle
        whatever the clock says (a code that would roll means the cycle
        changed under it: IllegalIndexError)."""
        n = len(offsets) - 1
        c = self._c
        done = new_uint64()
        guard = 0
        while start < n:
            if at is None and self._py_clock is not None:
                c.clock_cell[0] = self._py_clock.current_time_millis()
            rc = append_batch(c, buf, offs + start, min(4096, n - start), done)
            if self._listeners and done[0]:
                self._tell_run(buf, offsets, start, int(done[0]))
            start += int(done[0])
            if rc == 0:
                continue
            if at is not None and rc in (EOF_, ROLL, BAD_STATE, APPEND_LOCKED):
                if self._closed:
                    raise QueueClosedError("the appender is closed")
                raise IllegalIndexError(f"the cycle changed under a positioned run at "
                                        f"{at + start:#x} ({code_name(rc)})")
            guard += 1
            if guard > 10_000:
                raise ChronicleError(f"append did not settle ({code_name(rc)})")
            self._handle(rc, int(offsets[start + 1] - offsets[start]) if start < n else 0)

    @in_flight
    def writing_document(self, metadata: bool = False) -> DocumentContext:
        """Write one excerpt in place: holds the write lock until the block ends;
        commits on a clean exit, rolls back when the block raises."""
        c = self._c
        for _ in range(10_000):
            if self._py_clock is not None:
                c.clock_cell[0] = self._py_clock.current_time_millis()
            rc = doc_begin(c, 0, 1 if metadata else 0)
            if rc == 0:
                return DocumentContext(self._doc_write, self._doc_commit, self._doc_rollback,
                                       metadata)
            self._handle(rc, 0, metadata)
        raise ChronicleError("could not open a document")

    def _doc_ensure(self, length: int) -> None:
        c = self._c
        while True:
            rc = doc_ensure(c, length)
            if rc == 0:
                return
            if rc == NEED_MAP:
                self._held().file.ensure(int(c.need))
                continue
            self._handle(rc, length)

    @in_flight
    def _doc_write(self, at: int, raw: bytes | bytearray | memoryview, end: int) -> None:
        """Copy ``raw`` into the open document at ``at`` (``end`` = at + len)."""
        if self._closed:
            raise QueueClosedError("the appender is closed")
        if end > MAX_PAYLOAD:
            raise MessageTooLargeError(f"an excerpt holds at most {MAX_PAYLOAD} bytes")
        self._doc_ensure(end)
        c = self._c
        memmove(c.store.base + c.doc_pos + 4 + at, raw, len(raw))

    @in_flight
    def _doc_rollback(self, length: int) -> None:
        doc_rollback(self._c, length)

    @in_flight
    def _doc_commit(self, length: int, metadata: bool) -> int | None:
        c = self._c
        self._doc_ensure(length)
        rc = doc_commit(c, length)
        if rc != 0:
            self._handle(rc, length)
        return None if metadata else int(c.last_index)

    @in_flight
    def sync(self, wait: bool = True) -> None:
        """msync what this appender's cycle file holds up to its write position
        and record the last synced index in ``chronicle.lastIndexMSynced``
        (as Java's ``appender.sync()``)."""
        st = self._store
        if st is None:
            return
        end = int(self._c.pos) + 8
        st.file.sync(self._synced_pos if self._synced_store is st else 0, end, wait=wait)
        self._synced_pos = max(0, (end - 8) & ~4095)
        self._synced_store = st
        self._since_sync = 0
        self._last_sync = time.monotonic()
        last = int(self._c.last_index)
        meta = self._meta
        if last >= 0:
            meta.file.max64(meta.acquire("chronicle.lastIndexMSynced", -1), last)

    def _count_synced(self, index: int) -> int:
        """After an append with a sync mode: msync when ``sync_every`` or
        ``sync_interval`` says so."""
        self._since_sync += 1
        q = self.queue
        if (self._since_sync >= q.sync_every
                or (q.sync_interval is not None
                    and time.monotonic() - self._last_sync >= q.sync_interval)):
            self.sync(wait=q.sync_mode is SyncMode.SYNC)
        return index

    # -- replication acknowledgements -------------------------------------
    def _acked_target(self, index: int | None) -> tuple[Cell, int]:
        meta = self._meta
        self._cycles.check_open()
        if index is None:
            index = int(self._c.last_index)
            if index < 0:
                raise ValueError("this appender has not written anything yet: give an index")
        return meta.ptr(ACK_KEY, -1), index

    async def wait_replicated(self, index: int | None = None,
                              timeout: float | None = None) -> int:
        """Wait until a replica has acknowledged ``index`` (default: the last
        excerpt this appender wrote), i.e. until
        ``chronicle.lastAcknowledgedIndexReplicated`` reaches it; returns that
        value.  Polls it: a few loop turns first, then sleeps growing to 2 ms.

        Raises:
            ReplicationTimeoutError: ``timeout`` seconds passed first.
            QueueClosedError: the queue was closed meanwhile.
        """
        cell, target = self._acked_target(index)
        value = int(cell[0])
        if value >= target:
            return value
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        deadline = None if timeout is None else t0 + timeout
        delay = 0.0
        while True:
            await asyncio.sleep(delay)
            self._cycles.check_open()
            value = int(cell[0])
            if value >= target:
                return value
            now = loop.time()
            if deadline is not None and now >= deadline:
                raise _replication_timeout(self._cycles.path, target, value, timeout)
            if now - t0 > 200e-6:
                delay = min(max(delay * 2, 50e-6), 2e-3)
            if deadline is not None:
                delay = min(delay, deadline - now)

    def wait_replicated_blocking(self, index: int | None = None,
                                 timeout: float | None = None) -> int:
        """:meth:`wait_replicated` for threads: blocks (sleeping 20 µs growing
        to 1 ms between looks) until a replica has acknowledged ``index``."""
        cell, target = self._acked_target(index)
        t0 = time.monotonic()
        deadline = None if timeout is None else t0 + timeout
        delay = 20e-6
        while True:
            value = int(cell[0])
            if value >= target:
                return value
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise _replication_timeout(self._cycles.path, target, value, timeout)
            time.sleep(delay if deadline is None else min(delay, deadline - now))
            delay = min(delay * 2, 1e-3)
            self._cycles.check_open()



class _ClockedAppender(Appender):
    """An appender on a queue whose clock is a Python object (not the system
    clock or a SetTimeProvider): the native core gets its time before each
    append."""

    def append(self, data: bytes | bytearray | memoryview | str) -> int:
        """Append one excerpt; returns its 64-bit index."""
        assert self._py_clock is not None
        self._c.clock_cell[0] = self._py_clock.current_time_millis()
        return Appender.append(self, data)


class _SyncedAppender(Appender):
    """An appender on a queue opened with ``sync=SyncMode.SYNC`` or ``ASYNC``."""

    def append(self, data: bytes | bytearray | memoryview | str) -> int:
        """Append one excerpt (then msync as the queue's sync mode says);
        returns its 64-bit index."""
        if self._py_clock is not None:
            self._c.clock_cell[0] = self._py_clock.current_time_millis()
        return self._count_synced(Appender.append(self, data))


class _ListenedAppender(Appender):
    """An appender made with listeners (``open_queue(appender_listener=...)``
    or ``Queue.appender(listener=...)``): each is called after every commit
    with the excerpt's index and payload, in this thread, outside the write
    lock.  Appenders without listeners keep the native ``append`` (this
    variant is chosen when the appender is made: they pay nothing)."""

    def __init__(self, cycles: Cycles, queue: QueueView, notify: bool,
                 listeners: tuple[AppenderListener, ...]) -> None:
        """An appender calling ``listeners`` after each commit."""
        super().__init__(cycles, queue, notify)
        self._listeners = listeners
        self._synced = queue.sync_mode is not SyncMode.NONE

    def append(self, data: bytes | bytearray | memoryview | str) -> int:
        """Append one excerpt, then call the listeners; returns its index."""
        if self._py_clock is not None:
            self._c.clock_cell[0] = self._py_clock.current_time_millis()
        index = Appender.append(self, data)
        if self._synced:
            self._count_synced(index)
        self._tell(index, data if type(data) is bytes
                   else data.encode() if isinstance(data, str) else bytes(data))
        return index

    def append_packed(self, data: bytes | bytearray | memoryview,
                      offsets: Sequence[int] | array[int]) -> int:
        """:meth:`Appender.append_packed`, then the listeners, excerpt by excerpt."""
        return super().append_packed(data if type(data) is bytes else bytes(data), offsets)

    def write_at(self, index: int, data: bytes | bytearray | memoryview) -> bool:
        """:meth:`Appender.write_at`, then the listeners when written."""
        raw = data if type(data) is bytes else bytes(data)
        done = super().write_at(index, raw)
        if done:
            self._tell(index, raw)
        return done

    def _doc_commit(self, length: int, metadata: bool) -> int | None:
        c = self._c
        raw = None if metadata else self._held().file.read(int(c.doc_pos) + 4, length)
        index = super()._doc_commit(length, metadata)
        if index is not None and raw is not None:
            self._tell(index, raw)
        return index


def _replication_timeout(path: str, target: int, value: int,
                         timeout: float | None) -> ReplicationTimeoutError:
    return ReplicationTimeoutError(
        f"no replica of {path} acknowledged {target:#x} within {timeout}s "
        f"(last acknowledged: {value:#x})" if value >= 0 else
        f"no replica of {path} acknowledged {target:#x} within {timeout}s "
        f"(none acknowledged yet)")

