"""A queue's cycle files: one owner for the open stores, the directory
listing, ``metadata.cq4t``, the write lock and rolling.

:class:`Cycles` is what the appender, tailer, pretoucher and tools are given
(``Queue`` holds one; see ``docs/architecture.md``).  It caches every open
:class:`~aiochronicle._format._store.CycleStore` with a count of its holders, lists
the directory (re-listing only when ``listing.modCount`` in the metadata
moved), and rolls: an appender rolls when the clock enters a new cycle, when
its cycle was closed by an EOF marker (another writer rolled), or when it is
told to write at an index of another cycle (``write_at``).  Under the write
lock it picks the target (never behind a newer cycle that already holds
data), closes every older cycle that lacks an EOF marker, newest first,
stopping at the first that has one (Java's EOF normalisation), and opens or
creates the target.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import errno
import os
import threading
import time
import warnings
from collections.abc import Callable

from .._core._errors import CorruptQueueError, QueueClosedError, UnalignedCycleError
from .._core._native import HDR_NOT_COMPLETE, UNLOCKED
from .._format._clock import TimeProvider
from .._format._rollcycles import CycleNamer, RollCycle
from .._format._rolltime import ZonedDays
from .._format._store import (
    CycleStore,
    create_or_open_store,
    creator_gone,
    first_word,
    open_store,
    unwritten_age,
)
from .._format._tablestore import TableStore
from ._resource import FileHolds
from ._settings import SUFFIX, UnlockMode
from ._writelock import WRITE_LOCK, WriteLock, lock_holder, pid_alive

__all__ = ["Cycles", "StoreListener"]

#: called with ("on_acquired" | "on_released", cycle, path) when a cycle file
#: is opened or let go (``Cycles.listeners``)
StoreListener = Callable[[str, int, str], None]

#: seconds a listing stays good while ``listing.modCount`` does not move
LISTING_TTL = 60.0

#: the bytes that follow an EOF marker's word (BinaryWire text "EOF")
_EOF_TRAILER = b"\xc3EOF"


def _still_dead(path: str, dead: tuple[int, int]) -> bool:
    """True if ``path`` is still the file found half-created earlier, its header
    still unfinished (a cheap look, not another wait of ``timeout``)."""
    got = first_word(path)
    if got is None or (got[0].st_dev, got[0].st_ino) != dead:
        return False
    return got[1] == 0 or bool(got[1] & HDR_NOT_COMPLETE)


class Cycles:
    """The cycle files of one open queue, and everything that touches them.

    The queue makes one once it knows its roll cycle and epoch, and gives it
    (not itself) to its appenders, tailers and pretouchers; the tools in this
    package reach it through ``_queue.cycles_of(queue)``.  Thread-safe: the store
    cache is guarded by :attr:`lock`.
    """

    def __init__(self, path: str, meta: TableStore | None, roll_cycle: RollCycle, epoch: int,
                 namer: CycleNamer, *, time_provider: TimeProvider, read_only: bool,
                 block_size: int, timeout: float, lock_timeout: float,
                 unlock_mode: UnlockMode, zoned: ZonedDays | None = None) -> None:
        """Own the files of the queue directory ``path`` named by ``namer``;
        ``meta`` (None: a read-only queue without usable metadata) is closed
        by :meth:`close`."""
        self.path = path
        """The queue directory."""
        self.meta = meta
        """``metadata.cq4t`` (None for a read-only queue whose metadata is absent
        or unreadable: then the cycle files alone say what the queue holds)."""
        self.roll_cycle = roll_cycle
        """The roll cycle in use (the stored one when the queue existed)."""
        self.epoch = epoch
        """Milliseconds added to the Unix epoch before cycles are counted."""
        self.namer = namer
        """Names cycle files and parses names back to cycles."""
        self.zoned = zoned
        """Daily cycles rolling at a local time in a zone (``roll_time`` with a
        ``roll_time_zone`` other than UTC): 23, 24 or 25 hours long; None: every
        cycle is ``roll_cycle.length_ms`` from ``epoch``."""
        self.time_provider = time_provider
        """The clock that chooses the cycle of each append."""
        self.read_only = read_only
        """Files are opened read-only and never created."""
        self.block_size = block_size
        """Bytes a cycle file grows by (its mapping chunk)."""
        self.overlap = block_size // 4
        """Bytes each chunk's mapping runs past its end (so an excerpt never straddles two)."""
        self.timeout = timeout
        """Seconds to wait for another process creating a cycle file."""
        self.write_lock = WriteLock(meta, path, lock_timeout=lock_timeout,
                                    unlock_mode=unlock_mode)
        """``chronicle.write.lock`` (every roll and creation happens under it)."""
        self.lock = threading.RLock()
        """Guards the store cache (and the queue's close)."""
        self.holds = FileHolds()
        """The appenders and tailers holding these files (the queue's close and
        the fork handler reach them through it)."""
        self._closed = False
        self._stores: dict[int, CycleStore] = {}
        self.listeners: list[StoreListener] = []
        """Called with ("on_acquired" | "on_released", cycle, path) whenever a
        cycle file is opened or let go by this queue object."""
        self._listing_cache: tuple[int, list[int]] | None = None
        self._listing_time = 0.0
        self._parsed_names: dict[str, int | None] = {}  # file name -> cycle (None: not one)
        self._dead_files: dict[str, tuple[int, int]] = {}
        self._unclosable: set[int] = set()  # damaged older cycles already warned about
        # stores let go of by release_later, released by the next call that
        # takes the lock (a deque's appends need no lock)
        self._later: collections.deque[CycleStore] = collections.deque()
        # calls of the queue's own (not an appender's or tailer's) reading or
        # writing ``metadata.cq4t`` now, and whether a close left its unmapping
        # to the last of them (a scrape of another thread must not read a page
        # a close unmapped; see :meth:`use_meta`)
        self._meta_users = 0
        self._meta_owed = False

    # -- open / closed -----------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`shut` has run (the queue is closing or closed)."""
        return self._closed

    def check_open(self) -> None:
        """Raise QueueClosedError once the queue is closing or closed."""
        if self._closed:
            raise QueueClosedError(f"queue {self.path} is closed")

    def shut(self) -> None:
        """Refuse every later call on the files (the first step of a queue's
        close; the stores still held go in :meth:`close` or on their last release)."""
        self._closed = True
        self.write_lock.close()

    def close(self, busy: bool) -> None:
        """Let go of every cached store (one still held by a call in flight is
        unmapped by its last :meth:`release`) and of ``metadata.cq4t``: at once
        unless ``busy`` (an appender or tailer has a call in flight) or this
        thread is inside a ``with`` of the write lock, else when it is garbage."""
        with self.lock:
            self.shut()
            if self._later:
                self._release_pending()
            for store in self._stores.values():
                store.close(now=store.refs <= 0)
                self._event("on_released", store)
            self._stores.clear()
            if self.meta is not None:
                # an append's lock word and notify slots and a named tailer's
                # index live in it: it goes at once only when nothing uses them
                now = not busy and not self.write_lock.held_here()
                self._meta_owed = now and self._meta_users > 0
                self.meta.close(now=now and not self._meta_owed)

    def use_meta(self) -> TableStore | None:
        """``metadata.cq4t`` for a call of the queue's own (a query, a
        metrics scrape of another thread): counted in use until
        :meth:`done_with_meta`, so a close meanwhile (another thread's, or a
        signal handler's on this one) leaves it mapped until then.

        Raises:
            QueueClosedError: the queue is closed.
        """
        with self.lock:
            self.check_open()
            self._meta_users += 1
            return self.meta

    def done_with_meta(self) -> None:
        """The end of a :meth:`use_meta`: the last user out after a close unmaps."""
        with self.lock:
            self._meta_users -= 1
            if self._meta_users or not self._meta_owed:
                return
            self._meta_owed = False
            if self.meta is not None:
                self.meta.close(now=True)

    def after_fork(self) -> None:
        """In a forked child: a fresh :attr:`lock` and fresh locks of the open
        files (a thread of the parent may have held one, and only the forking
        thread survives); each store counts as holders only the appenders and
        tailers that hold it (:attr:`holds`): the parent's threads' calls that
        held one are not here to let it go."""
        held = self.holds.after_fork()
        self.lock = threading.RLock()
        self._meta_users = 0
        self._meta_owed = False
        stores = {id(st): st for st in [*self._stores.values(), *held]}
        for st in stores.values():
            st.after_fork(sum(1 for h in held if h is st))
        if self.meta is not None:
            self.meta.file.after_fork()

    # -- names and the clock ----------------------------------------------
    def path_of(self, cycle: int) -> str:
        """The path of the file holding ``cycle``."""
        return os.path.join(self.path, self.namer.name(cycle) + SUFFIX)

    def current(self) -> int:
        """The cycle the clock is in now."""
        if self.zoned is not None:
            return self.zoned.cycle_at(self.time_provider.current_time_millis())
        return self.roll_cycle.current_cycle(self.time_provider.current_time_millis(),
                                             self.epoch)

    def span_ms(self, cycle: int) -> tuple[int, int]:
        """``(start, end)`` of ``cycle`` in ms since 1970 UTC (the end is the next
        cycle's start)."""
        if self.zoned is not None:
            return self.zoned.span_ms(cycle)
        start = self.epoch + cycle * self.roll_cycle.length_ms
        return start, start + self.roll_cycle.length_ms

    @property
    def roll_index(self) -> tuple[int, int]:
        """(index count, spacing) for cycle files without a header (libchronicle's)."""
        return self.roll_cycle.index_count, self.roll_cycle.index_spacing

    # -- the directory listing --------------------------------------------
    def listing(self) -> list[int]:
        """Every cycle with a file in the directory, in order (the list is
        shared: do not change it).  Listed again only when ``listing.modCount``
        moved, after :meth:`refresh`, or a minute after the last look."""
        meta = self.use_meta()
        try:
            mod = meta.get("listing.modCount") if meta is not None else None
        finally:
            self.done_with_meta()
        cached = self._listing_cache
        now = time.monotonic()
        if (cached is not None and mod is not None and cached[0] == mod
                and now - self._listing_time < LISTING_TTL):
            return cached[1]
        found = []
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            names = []
        # each name is parsed once per queue object: a rescan of a directory
        # of thousands of cycle files costs the listdir and dict lookups
        parsed = self._parsed_names
        if len(parsed) > 4 * len(names) + 1024:
            parsed.clear()
        for n in names:
            c = parsed.get(n, -1)
            if c == -1:
                c = None
                if n.endswith(SUFFIX):
                    stem = n[:-len(SUFFIX)]
                    if self.namer.matches(stem):
                        c = self.namer.parse(stem)
                parsed[n] = c
            if c is not None:
                found.append(c)
        found.sort()
        self._listing_cache = (mod if mod is not None else -1, found)
        self._listing_time = now
        return found

    def refresh(self) -> None:
        """Forget the cached listing: the next :meth:`listing` reads the directory."""
        self._listing_cache = None

    def store_listing(self) -> None:
        """Rewrite ``listing.*`` in the metadata from the files present (Java's
        ``refreshDirectoryListing``); nothing on a read-only queue."""
        self.refresh()
        cs = self.listing()
        if self.meta is not None and not self.read_only and cs:
            self.meta.set("listing.highestCycle", cs[-1])
            self.meta.set("listing.lowestCycle", cs[0])
            self.meta.add("listing.modCount", 1)

    def neighbour(self, cycle: int, step: int) -> int | None:
        """The next cycle with a file after ``cycle`` (``step`` > 0, listing
        the directory again before saying there is none) or before it."""
        cs = self.listing()
        if step > 0:
            later = [c for c in cs if c > cycle]
            if not later:
                self.refresh()
                later = [c for c in self.listing() if c > cycle]
            return later[0] if later else None
        earlier = [c for c in cs if c < cycle]
        return earlier[-1] if earlier else None

    def pending(self, cycle: int) -> bool:
        """``cycle``'s file is there without its header for less than
        ``timeout`` seconds: its creator may still write it (a reader waits for
        it rather than skip to a later cycle)."""
        age = unwritten_age(self.path_of(cycle))
        return age is not None and age < self.timeout

    def count(self, cycle: int) -> int:
        """How many excerpts ``cycle`` holds (0 if it has no readable file)."""
        st = self.acquire(cycle)
        if st is None:
            return 0
        try:
            return st.end()[1]
        finally:
            self.release(st)

    # -- the store cache ---------------------------------------------------
    def acquire(self, cycle: int, create: bool = False, wait: bool = False) -> CycleStore | None:
        """The open store of ``cycle`` (one more holder: :meth:`release` it),
        or None when the cycle has no file or its header is not written.
        Only ``create`` (an appender, under the write lock) and ``wait`` (an
        appender closing older cycles) wait for a creator still writing a
        header; reads never wait.

        Raises:
            QueueClosedError: the queue is closed.
        """
        with self.lock:
            self.check_open()
            if self._later:
                self._release_pending()
            st = self._stores.get(cycle)
            if st is None:
                path = self.path_of(cycle)
                if create:
                    st, created = create_or_open_store(
                        path, cycle, index_count=self.roll_cycle.index_count,
                        index_spacing=self.roll_cycle.index_spacing, chunk=self.block_size,
                        overlap=self.overlap, timeout=self.timeout,
                        roll_index=self.roll_index)
                    if created:
                        self._file_created(cycle)
                else:
                    if path in self._dead_files and _still_dead(path,
                                                                self._dead_files[path]):
                        return None
                    st = open_store(path, cycle, writable=not self.read_only,
                                    chunk=self.block_size, overlap=self.overlap,
                                    timeout=self.timeout, roll_index=self.roll_index,
                                    wait=wait)
                    if st is None:
                        # absent, not written yet (nothing to read yet), or its
                        # creator died before writing the header: remember the
                        # latter, so it is not opened again (an appender that
                        # needs the cycle moves the file aside and creates it anew)
                        if creator_gone(path, self.timeout):
                            with contextlib.suppress(OSError):
                                info = os.stat(path)
                                self._dead_files[path] = (info.st_dev, info.st_ino)
                        return None
                self._stores[cycle] = st
                self._event("on_acquired", st)
            st.refs += 1
            return st

    def hold(self, st: CycleStore) -> None:
        """One more holder of ``st``, which the caller holds already (a
        reading document's views pin its file so: :meth:`release_later`)."""
        with self.lock:
            st.refs += 1

    def release_later(self, st: CycleStore) -> None:
        """:meth:`release` ``st`` at the next :meth:`acquire`, :meth:`release`
        or :meth:`close`: for a garbage collector's finalizer, which may run
        in the middle of any code of this thread (even one holding
        :attr:`lock`), so it takes no lock and changes no table itself."""
        self._later.append(st)

    def _release_pending(self) -> None:
        """Under :attr:`lock`: the releases :meth:`release_later` put off."""
        later = self._later
        while later:
            self._release_now(later.popleft())

    def release(self, st: CycleStore | None) -> None:
        """One holder fewer of ``st`` (None: nothing); the last one closes it."""
        with self.lock:
            if self._later:
                self._release_pending()
            if st is not None:
                self._release_now(st)

    def _release_now(self, st: CycleStore) -> None:
        """:meth:`release`, under :attr:`lock`."""
        with self.lock:
            st.refs -= 1
            if st.refs > 0:
                return
            if self._stores.get(st.cycle) is st:
                del self._stores[st.cycle]
                st.close(now=True)
                self._event("on_released", st)
            elif self._closed:
                st.close(now=True)  # the queue closed while this was held

    def _event(self, what: str, st: CycleStore) -> None:
        for listener in list(self.listeners):
            listener(what, st.cycle, st.path)

    def _file_created(self, cycle: int) -> None:
        cached = self._listing_cache
        self._listing_cache = None
        if self.meta is not None:
            self.meta.set_max("listing.highestCycle", cycle)
            self.meta.set_min("listing.lowestCycle", cycle)
            mod = self.meta.add("listing.modCount", 1)
            if cached is not None and cached[0] == mod - 1:
                # nobody else changed the directory since our last look: add
                # the new cycle instead of listing the directory again
                cs = cached[1]
                if cycle not in cs:
                    cs = cs.copy()
                    bisect.insort(cs, cycle)
                self._listing_cache = (mod, cs)

    # -- rolling -----------------------------------------------------------
    def roll(self, current: int | None, want: int | None, after_eof: bool) -> CycleStore:
        """The store (held: :meth:`release` it) an appender now on cycle
        ``current`` moves to: the cycle the clock asks for (at least ``want``;
        past ``current`` when that was closed by an EOF), older cycles closed
        first.  Takes the write lock for it."""
        self.check_open()
        with self.write_lock:
            clock = self.current()
            # a zone's days are not all one length: the native appender's guess
            # of the cycle (from the current day's length) may overshoot
            target = clock if want is None or self.zoned is not None else max(want, clock)
            # the listing is fresh by listing.modCount, which every creator of a
            # cycle file bumps (Java too): no directory scan per roll
            cycles = self.listing()
            # never write behind a newer cycle that already holds data (another
            # writer's clock is ahead); an empty pre-created file does not count
            for newer in reversed(cycles[bisect.bisect_right(cycles, target):]):
                if self._has_content(newer):
                    target = newer
                    break
            if current is not None and after_eof and target <= current:
                target = current + 1
            while True:
                self._close_older(target, cycles)
                st = self.acquire(target, create=True)
                assert st is not None
                if not st.end()[2]:
                    return st
                self.release(st)
                target += 1
                cycles = self.listing()

    def store_at(self, cycle: int) -> CycleStore:
        """The store of ``cycle`` (held; created if needed) regardless of the
        clock, every older cycle that lacks an EOF closed first.  Takes the
        write lock for it."""
        self.check_open()
        with self.write_lock:
            self.refresh()
            self._close_older(cycle, self.listing())
            st = self.acquire(cycle, create=True)
            assert st is not None
            return st

    def create(self, cycle: int) -> CycleStore:
        """The store of ``cycle`` (held), its file created under the write lock
        if absent (a pretoucher's; no EOF is written anywhere)."""
        with self.write_lock:
            st = self.acquire(cycle, create=True)
        assert st is not None
        return st

    def _close_older(self, before: int, cycles: list[int]) -> None:
        """Close every cycle older than ``before`` that lacks its EOF marker,
        newest first, stopping at the first that has one.  The write lock must be
        held.  A damaged older cycle is left as it is, with one warning per queue."""
        for older in reversed(cycles[:bisect.bisect_left(cycles, before)]):
            st = self.acquire(older, wait=True)  # (a creator may be writing its header)
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
                if older not in self._unclosable:
                    self._unclosable.add(older)
                    warnings.warn(f"cycle {older} could not be closed with an end-of-file "
                                  f"marker: {exc}", RuntimeWarning, stacklevel=2)
            finally:
                self.release(st)

    # -- the end of a cycle without its EOF marker --------------------------
    def unmarked_end(self, st: CycleStore, pos: int, index: int) -> int | None:
        """The end-of-cycle rule for a forward reader of ``st`` stopped at the
        header at ``pos`` that is not ready (0, a claim, or an EOF marker a
        flipped bit damaged) while a later cycle is listed; ``index`` is the
        index it would read there.  Returns the next cycle to read when
        ``st``'s cycle provably ended there, None while it may still be
        written (read it as nothing yet and ask again later).

        It ended when a later cycle holds an excerpt or an EOF (a writer moved
        on: an empty file made ahead of time does not count), no writer can
        still be inside it (the write lock is free or its holder is dead, or
        nothing changed the file for ``timeout`` seconds), and nothing was
        written after ``pos`` (every byte after it is zero; in a file with a
        header, a writer's unfinished excerpt there is no loss either: the
        native read already checked that the ``writePosition`` and the index
        record nothing past it).  Java's tailer waits there for an appender's
        EOF; libchronicle's passes cycles three behind the newest.

        Raises:
            CorruptQueueError: the cycle ended there but bytes follow that
                nothing proves uncommitted (a headerless file's zeroed or
                damaged header): excerpts from ``index`` may be hidden.
        """
        later = self.listing()[bisect.bisect_right(self.listing(), st.cycle):]
        if not later:
            return None
        # the newest first (it is the one most likely written); a few looks at most
        if not any(self._written(c) for c in list(reversed(later))[:4]):
            return None
        if not self._writer_gone():
            try:
                idle = time.time() - os.stat(st.path).st_mtime
            except OSError:
                return None
            if idle < self.timeout:
                return None
        after = pos + 4
        if st.file.pread(after, 4) == _EOF_TRAILER:
            after += 4  # the text an EOF marker is written with (its word damaged)
        if st.layout.headerless and _written_after(st, after):
            raise CorruptQueueError(
                f"cycle {st.cycle} stops at a header word {st.file.pread(pos, 4).hex()} "
                f"that is neither an excerpt nor the EOF marker, later cycles exist, and "
                f"bytes follow it: excerpts from index {index:#x} may be hidden "
                "(see `aiochronicle check`)", st.path, pos)
        return later[0]

    def check_unwritten(self, cycle: int) -> None:
        """Before a reader passes ``cycle``'s file as one whose header was
        never written: its first word is 0, so bytes after it are excerpts
        whose first header was cleared (libchronicle's files start with data),
        never a creator's work (libchronicle writes nothing before the first
        header; Java claims the first word first).

        Raises:
            CorruptQueueError: bytes follow the cleared first word.
        """
        got = first_word(self.path_of(cycle))
        if got is None or got[1] != 0:
            return
        try:
            fd = os.open(self.path_of(cycle), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            written = _fd_written_after(fd, 4)
        finally:
            os.close(fd)
        if written:
            index = self.roll_cycle.to_index(cycle, 0)
            raise CorruptQueueError(
                f"cycle {cycle} starts with a cleared header word but bytes follow it: "
                f"excerpts from index {index:#x} are hidden (see `aiochronicle check`)",
                self.path_of(cycle), 0)

    def _written(self, cycle: int) -> bool:
        """:meth:`_has_content`, a damaged file counting as written (a writer
        was there; a reader that reaches it raises there)."""
        try:
            return self._has_content(cycle)
        except (CorruptQueueError, UnalignedCycleError):
            return True

    def _writer_gone(self) -> bool:
        """True when no live process holds ``chronicle.write.lock`` (or the
        queue has no metadata to hold one)."""
        value = self.meta.get(WRITE_LOCK) if self.meta is not None else None
        return value is None or value == UNLOCKED or not pid_alive(lock_holder(value))

    def _has_content(self, cycle: int) -> bool:
        """True if ``cycle``'s file holds an excerpt or is closed by an EOF."""
        st = self.acquire(cycle)
        if st is None:
            return False
        try:
            _, count, eof = st.end()
            return count > 0 or eof
        finally:
            self.release(st)


def _written_after(st: CycleStore, start: int) -> bool:
    """Whether any byte of ``st``'s file from ``start`` on is not zero."""
    return _fd_written_after(st.file.fd, start)


def _fd_written_after(fd: int, start: int) -> bool:
    """Whether any byte of the file ``fd`` from ``start`` on is not zero (read
    with ``pread``, holes passed by with ``SEEK_DATA``)."""
    try:
        end = os.fstat(fd).st_size
    except OSError:
        return True
    at = start
    while at < end:
        try:
            at = os.lseek(fd, at, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return False  # only holes from here
            if exc.errno != errno.EINVAL:
                return True
        chunk = os.pread(fd, min(1 << 20, end - at), at)
        if not chunk:
            return False
        if chunk.count(0) != len(chunk):
            return True
        at += len(chunk)
    return False
