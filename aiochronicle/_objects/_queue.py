"""The queue: a directory of cycle files and its ``metadata.cq4t``, opened
for appending and tailing (:func:`open_queue`); and the user objects as users
hold them.

The machinery of the appender, tailer, pretoucher and method reader lives in
their own modules, below this one, typed against what they need of the queue
(``_queueview.QueueView``) or of a tailer (``_methodreader.MethodSource``).
Here the public classes subclass them and name each other: an appender's,
tailer's or pretoucher's ``queue`` is a :class:`Queue`, a method reader's
``tailer`` a :class:`Tailer`, and the factories return these classes.  Each
variant (named, acknowledged, listened ...) is both its machinery's subclass
and the public class's, chosen when the object is made.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable, Iterable
from datetime import time, tzinfo
from typing import Any

from .._core._errors import (
    CorruptQueueError,
    NoSuchQueueError,
    NotAQueueError,
    QueueAccessError,
    ReadOnlyQueueError,
    RollCycleMismatchWarning,
)
from .._core._native import UNLOCKED
from .._format._clock import SetTimeProvider, SystemTimeProvider, TimeProvider
from .._format._mapped import list_dir
from .._format._rollcycles import (
    CycleNamer,
    RollCycle,
    RollCycles,
    candidate_roll_cycles,
    make_roll_cycle,
    misnamed_cycle_files,
)
from .._format._rolltime import (
    ZonedDays,
    day_length_ok,
    epoch_of,
    is_utc,
    parse_local_time,
    zone_name,
    zone_of,
)
from .._format._store import open_store
from .._format._tablestore import TableStore
from .._messages._codecs import Codec, Codecs, record_codec, recorded_codec
from .._messages._methodreader import MethodReader as MethodReaderParts
from .._storage._cycles import Cycles
from .._storage._diskspace import DiskSpace
from .._storage._diskspace import unwatch as unwatch_disk
from .._storage._diskspace import watch as watch_disk
from .._storage._excerpt import Excerpt, TailerDirection
from .._storage._resource import _Resource
from .._storage._settings import (
    INITIAL_KEYS,
    LEGACY_LISTING_FILE,
    METADATA_FILE,
    SUFFIX,
    QueueOptions,
    SyncMode,
    UnlockMode,
    metadata_header,
    options_from,
)
from .._storage._writelock import recover_dead_locks
from .._waiting._notify import close_notifier
from .._waiting._pauser import Pauser
from ._appender import Appender as AppenderParts
from ._appender import AppenderListener
from ._appender import _ClockedAppender as _ClockedParts
from ._appender import _ListenedAppender as _ListenedParts
from ._appender import _SyncedAppender as _SyncedParts
from ._pretoucher import Pretoucher as PretoucherParts
from ._tailer import Tailer as TailerParts
from ._tailer import _AckedNamedTailer as _AckedNamedParts
from ._tailer import _AckedTailer as _AckedParts
from ._tailer import _NamedTailer as _NamedParts

__all__ = ["Appender", "MethodReader", "Pretoucher", "Queue", "Tailer", "cycles_of",
           "is_queue_dir", "open_existing_queue", "open_queue", "set_queue_codec"]


# -- fork ----------------------------------------------------------------------
# A process forked while queues are open (multiprocessing's default on Linux)
# inherits them.  Only the forking thread survives, so locks other threads held
# would stay locked for good, and appenders would take the write lock with the
# parent's PID (so a crash of the child would look like a crash of the parent,
# and the parent's death would let others take a lock the child holds).

#: every queue object alive, with the owner of its files (whose registry of
#: holds reaches its appenders and tailers; also what :func:`cycles_of` gives)
_OPEN_QUEUES: weakref.WeakKeyDictionary[Queue, Cycles] = weakref.WeakKeyDictionary()


def _after_fork_in_child() -> None:
    for cycles in list(_OPEN_QUEUES.values()):
        cycles.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)



# -- the user objects as users hold them ----------------------------------------


class Appender(AppenderParts):
    """Writes excerpts to the end of a queue; safe with other appenders in any
    thread or process (they serialise on ``chronicle.write.lock`` as Java does).

    Payloads are copied into the mapped file under the lock; anything that has
    to be encoded is encoded before the lock is taken.

    One appender belongs to one thread at a time (as Java's, which are
    thread-local): give each writing thread its own from :meth:`Queue.appender`.
    Closing it, or its queue, is safe from any thread and from a signal
    handler: an append in progress finishes or raises
    :class:`QueueClosedError`, and the cycle file is let go when the last
    call leaves it.
    """

    #: the queue that made this appender
    queue: Queue


class _ClockedAppender(_ClockedParts, Appender):
    """An appender on a queue with a Python clock."""


class _SyncedAppender(_SyncedParts, Appender):
    """An appender on a queue with a sync mode."""


class _ListenedAppender(_ListenedParts, Appender):
    """An appender with listeners."""


class Tailer(TailerParts):
    """Reads excerpts in index order; never consumes them.

    ``read_nowait()`` returns the next :class:`Excerpt` or None when there is
    nothing new yet.  A tailer belongs to one thread (or one event loop) at a
    time; any number of tailers can read the same queue.  Closing it, or its
    queue, is safe from any thread and from a signal handler: a read in
    progress finishes or raises :class:`QueueClosedError`, the next one
    raises it, and the cycle file is let go when the last read leaves it.
    """

    #: the queue that made this tailer
    queue: Queue

    def method_reader(self, *handlers: object,
                      on_error: Callable[[Exception, Excerpt], None] | None = None,
                      ignore_first_arg: Callable[[str, Any], bool] | None = None,
                      history: bool | None = None,
                      interfaces: Iterable[type] = (),
                      batch: bool | None = None,
                      default_handler: Callable[[str | int, Any], Any] | None = None,
                      metadata_handlers: Iterable[object] = ()) -> MethodReader:
        """A reader dispatching the method calls in this tailer's excerpts to the
        handlers' methods of the same names (see :class:`MethodReader`).

        ``on_error(exc, excerpt)`` gets excerpts that cannot be decoded (default:
        log and go on); ``ignore_first_arg(method, first_arg)`` returning True
        skips a call before its other arguments are decoded; ``history`` tracks
        message history (default: when the message carries one or this queue's
        source_id is not 0).  ``interfaces`` lend their annotations and
        ``@method_id`` numbers to handler methods of the same names (handlers
        that subclass their interface get them anyway).  ``batch`` (default:
        for an unnamed tailer) reads excerpts ahead in batches, so this tailer's
        position may run ahead of the calls handled so far.
        ``default_handler(event, args)`` (Java's default parselet: routers,
        gateways) gets every event no handler has a method for, with its
        arguments decoded untyped (one as itself, none as None or ``""``,
        several as a list); it may be ``async def``.  ``metadata_handlers``
        get the calls in metadata excerpts (Java's ``metaDataHandler``); they
        need a tailer made with ``include_metadata=True``.

        Raises:
            ValueError: ``metadata_handlers`` on a tailer that skips metadata.
            TypeError: no handler (nor default handler), or unusable handlers.
        """
        metadata_handlers = tuple(metadata_handlers)
        return MethodReader(self._reader_source(bool(metadata_handlers)), *handlers,
                            on_error=on_error, ignore_first_arg=ignore_first_arg,
                            history=history, interfaces=interfaces, batch=batch,
                            default_handler=default_handler,
                            metadata_handlers=metadata_handlers)


class _NamedTailer(_NamedParts, Tailer):
    """A named tailer."""


class _AckedTailer(_AckedParts, Tailer):
    """A tailer that reads only what a replica acknowledged."""


class _AckedNamedTailer(_AckedNamedParts, _AckedTailer, _NamedTailer):
    """A named tailer that reads only what a replica acknowledged."""


class MethodReader(MethodReaderParts):
    """Reads excerpts from a tailer and calls the matching handler methods.

    Create one with :meth:`Tailer.method_reader`.  Every public method of every
    handler is a target; several handlers with the same method are called in
    order.  Argument types come from the handler's annotations, or from the
    interface it inherits.

    * :meth:`read_one` handles one excerpt (sync handlers only);
      :meth:`read_available` handles all there are now.
    * ``await`` :meth:`run` handles excerpts as they come, waiting with the
      tailer's pauser; ``async for call in reader`` does the same and yields a
      :class:`MethodCall` per dispatched call.  Handlers may be ``async def``.
    * An event no handler knows is skipped and counted; an excerpt that cannot
      be decoded goes to ``on_error(exc, excerpt)`` (default: log a warning)
      and reading goes on.  Exceptions raised by handlers propagate (the tailer
      has already moved past that excerpt).

    Calls written in msgpack, JSON and BinaryWire (including Java's) are all
    recognised by their first byte, whatever the queue records.

    Reading ahead: on an unnamed forward tailer (unless ``batch=False``) the
    reader takes excerpts from the tailer in batches (``read_many``) and hands
    them out one by one, so the tailer's position may be ahead of the calls
    handled so far; the excerpts in between stay with the reader (nothing is
    lost if a handler raises).  A named tailer is read one excerpt at a time, so
    the index it persists is always that of the last call handled.
    """

    __slots__ = ()

    #: the tailer this reader reads
    tailer: Tailer
    #: the reader of the metadata excerpts' calls (``metadata_handlers``), or None
    metadata_reader: MethodReader | None


class Pretoucher(PretoucherParts):
    """Faults in (and reserves disk for) the pages just ahead of the writers, and
    creates the next cycle's file shortly before the roll, so appenders meet
    neither page faults nor file creation on their hot path.

    Call :meth:`execute` periodically from a thread of your own, or
    :meth:`start` a background thread that does it every ``interval`` seconds.

    A full disk is the writers' error, not the pretoucher's: both ways it is
    counted in :attr:`errors` and the pass ends early (:meth:`execute`
    returns False), and the appender that needs the blocks raises
    :class:`DiskFullError` with nothing written.  Pretouching resumes once
    there is room again.
    """

    #: the queue that made this pretoucher
    queue: Queue


class Queue(_Resource):
    """A Chronicle Queue directory opened for appending and tailing.

    Use :func:`open_queue` to create one.  A queue is a context manager; closing
    it closes every appender and tailer made from it.
    """

    def __init__(self, path: str | os.PathLike[str], options: QueueOptions | None = None,
                 **settings: Any) -> None:
        """Open the queue at ``path`` with ``options`` (or the keywords of
        :func:`open_queue`, which is the documented way in)."""
        if options is None:
            options = options_from(settings)
        elif settings:
            raise TypeError("give QueueOptions or keywords, not both")
        o = self.options = options
        """The settings this queue was opened with (as given; the roll cycle in
        use may be the one the queue stores: see :attr:`roll_cycle`)."""
        roll_cycle, epoch, read_only = o.roll_cycle, o.epoch, o.read_only
        index_count, index_spacing, timeout = o.index_count, o.index_spacing, o.timeout
        source_id = o.source_id
        self._path = os.fspath(path)
        if not self._path:
            raise ValueError("the queue path is empty")
        if os.path.exists(self._path) and not os.path.isdir(self._path):
            raise NotAQueueError(f"{self._path} is a file, not a queue directory")
        self.sync_mode = o.sync
        """When appended excerpts are flushed to disk (``msync``)."""
        self.sync_every = o.sync_every
        """With ``SyncMode.SYNC``/``ASYNC``: flush every this many excerpts."""
        self.sync_interval = o.sync_interval
        """With ``SyncMode.SYNC``/``ASYNC``: flush at least every this many
        seconds (None: only by count)."""
        self._time_provider: TimeProvider = o.time_provider or SystemTimeProvider.INSTANCE
        self._block_size = o.block_size
        self._week_rule = o.week_rule
        self._source_id = source_id

        # QueueAccessError (not "no queue here") when the directory is unreadable
        names = list_dir(self._path) if os.path.isdir(self._path) else []
        meta_path = os.path.join(self.path, METADATA_FILE)
        legacy = (not os.path.exists(meta_path)
                  and os.path.exists(os.path.join(self.path, LEGACY_LISTING_FILE)))
        if legacy and not read_only:
            warnings.warn(f"{self.path} is a Chronicle Queue 4 directory: opened read-only",
                          RollCycleMismatchWarning, stacklevel=3)
            read_only = True
        if not read_only and os.path.isdir(self.path) and (
                not os.access(self.path, os.W_OK)
                or (os.path.exists(meta_path) and not os.access(meta_path, os.W_OK))):
            warnings.warn(f"no write permission on {self.path}: opened read-only",
                          RuntimeWarning, stacklevel=3)
            read_only = True
        self._read_only = read_only
        if not read_only:
            os.makedirs(self.path, exist_ok=True)
        elif not os.path.isdir(self.path):
            raise NoSuchQueueError(f"no queue directory at {self.path}")

        requested = roll_cycle
        rc = roll_cycle or RollCycles.DEFAULT
        ep = rc.resolve_epoch(epoch or 0) if epoch is not None else rc.default_epoch
        self._roll_time, zone = o.roll_time, o.roll_time_zone
        self._roll_time_zone = zone if isinstance(zone, tzinfo) else None
        if self._roll_time is not None:
            ep = epoch_of(self._roll_time)  # as Java's rollTime(time, zone) sets it
        if index_count is not None or index_spacing is not None:
            # Java's builder.indexCount/indexSpacing: the files' index layout, not
            # the numbering of indices (the roll cycle's own cycle shift)
            rc = rc.with_index(index_count, index_spacing)
        meta: TableStore | None = None
        if not read_only or os.path.exists(meta_path):
            try:
                if read_only:
                    meta = TableStore(meta_path, read_only=True, timeout=timeout)
                else:
                    # an existing but still empty store (another process, Java say, has
                    # just created the file): whoever takes its file lock first writes
                    # the header, as Java's table store builder does
                    first = rc

                    def header() -> bytes:
                        return metadata_header(first, ep, source_id, self._roll_time,
                                               self._roll_time_zone)

                    meta = TableStore(meta_path, read_only=False, timeout=timeout,
                                      header=header, initial_keys=INITIAL_KEYS)
                rc, ep = self._adopt_stored(meta, rc, ep, requested, index_count, index_spacing)
            except CorruptQueueError as exc:
                if not read_only or not any(n.endswith(SUFFIX) for n in names):
                    raise
                # a reader goes by what the cycle files say (their names must then
                # all fit, see _check_names); writers need the metadata repaired
                warnings.warn(f"{exc}: reading the queue by its cycle files (`aiochronicle "
                              "repair` rebuilds the metadata)", RuntimeWarning, stacklevel=3)
                if meta is not None:
                    meta.close()
                meta = None
        if meta is None and read_only:
            rc, ep = self._guess_from_files(rc, ep, requested)
        self._roll_cycle = rc
        self._epoch = ep
        zoned = None
        if self._roll_time is not None and not is_utc(self._roll_time_zone):
            assert self._roll_time_zone is not None
            if not day_length_ok(rc.length_ms):
                raise ValueError(f"a roll time in {zone_name(self._roll_time_zone)} needs a "
                                 f"daily roll cycle, not {rc.name}")
            zoned = ZonedDays(self._roll_time, self._roll_time_zone)
        namer = CycleNamer(rc, ep, o.week_rule)
        self._check_names(meta, namer, meta_path,
                          [n[:-len(SUFFIX)] for n in names if n.endswith(SUFFIX)])
        if meta is not None and not read_only:
            recover_dead_locks(meta)
        self._cycles = Cycles(
            self._path, meta, rc, ep, namer, time_provider=self._time_provider,
            read_only=read_only, block_size=o.block_size, timeout=timeout,
            lock_timeout=timeout * 1.5 if o.lock_timeout is None else o.lock_timeout,
            unlock_mode=o.unlock_mode, zoned=zoned)
        self._disk: DiskSpace | None = (
            None if o.disk_space_warning is None or read_only
            else watch_disk(self._path, o.disk_space_warning, o.disk_check_interval))
        _OPEN_QUEUES[self] = self._cycles


    # -- fixed settings --------------------------------------------------
    @property
    def path(self) -> str:
        """The queue directory."""
        return self._path

    @property
    def time_provider(self) -> TimeProvider:
        """The clock that chooses the cycle of each append."""
        return self._time_provider

    @property
    def block_size(self) -> int:
        """Bytes a cycle file grows by (files start at ``block_size * 5 // 4``, sparse)."""
        return self._block_size

    @property
    def week_rule(self) -> str:
        """``"US"`` or ``"ISO"``: how ``WEEKLY`` file names number weeks."""
        return self._week_rule

    @property
    def source_id(self) -> int:
        """This queue's id in message histories (0: no history is written)."""
        return self._source_id

    @property
    def timeout(self) -> float:
        """Seconds to wait for another process creating a cycle file before taking it over."""
        return self._cycles.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._cycles.timeout = value

    @property
    def lock_timeout(self) -> float:
        """Seconds an appender waits for a write lock held by a live process (1.5 x ``timeout``)."""
        return self._cycles.write_lock.lock_timeout

    @lock_timeout.setter
    def lock_timeout(self, value: float) -> None:
        self._cycles.write_lock.lock_timeout = value

    @property
    def unlock_mode(self) -> UnlockMode:
        """What an appender does when a live process holds the write lock past ``lock_timeout``."""
        return self._cycles.write_lock.unlock_mode

    @unlock_mode.setter
    def unlock_mode(self, value: UnlockMode) -> None:
        self._cycles.write_lock.unlock_mode = value

    @property
    def read_only(self) -> bool:
        """True if the queue was opened (or had to be opened) read-only."""
        return self._read_only

    @property
    def sync_interval_ms(self) -> float | None:
        """:attr:`sync_interval` in milliseconds (deprecated: read ``sync_interval``)."""
        warnings.warn("sync_interval_ms is deprecated: read sync_interval (seconds)",
                      DeprecationWarning, stacklevel=2)
        return None if self.sync_interval is None else self.sync_interval * 1000

    @property
    def roll_cycle(self) -> RollCycle:
        """The roll cycle in use: the one stored in ``metadata.cq4t`` if the queue existed."""
        return self._roll_cycle

    @property
    def epoch(self) -> int:
        """Milliseconds added to the Unix epoch before cycles are counted (stored one wins)."""
        return self._epoch

    @property
    def roll_time(self) -> time | None:
        """The local time of day the queue rolls at (Java's ``rollTime``; stored one
        wins), or None when it rolls at ``epoch`` alone."""
        return self._roll_time

    @property
    def roll_time_zone(self) -> tzinfo | None:
        """The zone of :attr:`roll_time` (``datetime.UTC`` or a ``ZoneInfo``)."""
        return self._roll_time_zone if self._roll_time is not None else None

    # -- opening ---------------------------------------------------------
    def _adopt_stored(self, store: TableStore, rc: RollCycle, ep: int,
                      requested: RollCycle | None, index_count: int | None,
                      index_spacing: int | None) -> tuple[RollCycle, int]:
        meta = store.header.get("metadata")
        if meta is None or not hasattr(meta.value, "get"):
            # no roll settings (a damaged key?): the cycle files say what they are
            return self._guess_from_files(rc, ep, requested)
        try:
            roll = meta.as_document()["roll"].as_document()
            fmt = roll["format"].as_str()
            length = roll["length"].as_int()
            ev = roll.get("epoch")
            stored_epoch = ev.as_int() if ev is not None else 0
            sv = meta.as_document().get("sourceId")
            if sv is not None and not self.source_id:
                self._source_id = sv.as_int()
            # the stored roll time wins, as in Java (none stored: none)
            rt, rz = roll.get("rollTime"), roll.get("rollTimeZone")
            self._roll_time = parse_local_time(rt.as_str()) if rt is not None else None
            self._roll_time_zone = (zone_of(rz.as_str() if rz is not None else "UTC")
                                    if rt is not None else None)
        except (KeyError, ValueError) as exc:
            raise CorruptQueueError(f"metadata roll settings are malformed: {exc}",
                                    store.path, 4) from None
        try:
            if requested is not None and (requested.format, requested.length_ms) == (fmt, length):
                stored = requested  # the cycle it was created with (a custom one keeps its name)
            else:
                stored = RollCycles.for_settings(fmt, length, rc.index_count, rc.index_spacing)
                if stored.name.startswith("custom:"):
                    # a cycle this process has not defined: its numbering comes
                    # from the index layout its cycle files were made with
                    lay = self._files_index_layout(rc)
                    if lay is not None:
                        stored = make_roll_cycle(stored.name, fmt, length, *lay)
            if index_count is not None or index_spacing is not None:
                stored = stored.with_index(index_count, index_spacing)
        except ValueError as exc:
            raise CorruptQueueError(f"metadata holds an unusable roll cycle "
                                    f"(format {fmt!r}, length {length}): {exc}",
                                    store.path, 4) from None
        if requested is not None and (requested.format != stored.format
                                      or requested.length_ms != stored.length_ms):
            warnings.warn(
                f"queue {self.path} was created with roll cycle {stored.name} "
                f"({stored.format!r}); using it instead of {requested.name}",
                RollCycleMismatchWarning, stacklevel=4)
        return stored, stored_epoch

    def _files_index_layout(self, rc: RollCycle) -> tuple[int, int] | None:
        """(index count, spacing) in the header of the first cycle file, if any."""
        names = sorted(n for n in os.listdir(self.path) if n.endswith(SUFFIX))
        if not names:
            return None
        try:
            probe = open_store(os.path.join(self.path, names[0]), 0, writable=False,
                               chunk=self.block_size, overlap=self.block_size // 4,
                               timeout=self.options.timeout,
                               roll_index=(rc.index_count, rc.index_spacing))
        except (CorruptQueueError, OSError):
            return None
        if probe is None:
            return None
        try:
            return probe.layout.index_count, probe.layout.index_spacing
        finally:
            probe.close()

    def _guess_from_files(self, rc: RollCycle, ep: int,
                          requested: RollCycle | None) -> tuple[RollCycle, int]:
        names = sorted(n[:-len(SUFFIX)] for n in os.listdir(self.path) if n.endswith(SUFFIX))
        if not names:
            return rc, ep
        # Chronicle 4 kept the roll settings in each cycle file's header
        probe = open_store(os.path.join(self.path, names[0] + SUFFIX), 0, writable=False,
                           chunk=self.block_size, overlap=self.block_size // 4,
                           timeout=self.options.timeout,
                           roll_index=(rc.index_count, rc.index_spacing))
        if probe is not None:
            try:
                lay = probe.layout
                if lay.roll_format is not None and lay.roll_length is not None:
                    try:
                        found = RollCycles.for_settings(lay.roll_format, lay.roll_length,
                                                        lay.index_count, lay.index_spacing)
                    except ValueError as exc:
                        raise CorruptQueueError(
                            f"cycle file header holds an unusable roll cycle: {exc}",
                            probe.path, 4) from None
                    return found, lay.roll_epoch or 0
            finally:
                probe.close()
        if requested is not None and CycleNamer(requested, ep, self.week_rule).matches(names[0]):
            return requested, ep
        candidates = candidate_roll_cycles(names[0])
        if not candidates:
            raise CorruptQueueError(f"cannot tell the roll cycle of {names[0]}{SUFFIX}",
                                    os.path.join(self.path, names[0] + SUFFIX))
        return candidates[0], candidates[0].default_epoch

    def _check_names(self, meta: TableStore | None, namer: CycleNamer, meta_path: str,
                     stems: list[str]) -> None:
        """Refuse roll settings that name none of the cycle files present, or
        name one of them otherwise: the queue would read as (partly) empty."""
        others = misnamed_cycle_files(namer, stems)
        if others:
            if meta is not None:
                meta.close()
            rc = self._roll_cycle
            raise CorruptQueueError(
                f"{len(others)} of the {len(stems)} cycle files (e.g. {others[0]}{SUFFIX}) are "
                f"not named by the roll cycle {rc.name} ({rc.format!r}, {rc.length_ms} ms, "
                f"epoch {self._epoch}) the queue holds: its metadata is damaged or belongs to "
                "other files (`aiochronicle repair` rebuilds it from the cycle files)",
                meta_path if os.path.exists(meta_path)
                else os.path.join(self.path, others[0] + SUFFIX))

    # -- context ---------------------------------------------------------
    def __repr__(self) -> str:
        state = "closed" if self.closed else ("read-only" if self.read_only else "open")
        return f"<Queue {self.path!r} {self.roll_cycle.name} {state}>"

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._cycles.closed

    @property
    def disk_space(self) -> DiskSpace | None:
        """What the disk-space monitor last saw of this queue's file system
        (free bytes, whether under the threshold), or None when the queue was
        opened without ``disk_space_warning``."""
        return self._disk

    def close(self) -> None:
        """Close every appender and tailer of this queue, then the files.

        Named tailers save their position first: what they handed out is done
        (a ``with`` block that ends with an exception leaves the excerpt in hand
        to be read again, as a crash does)."""
        self._close(True)

    def _close(self, clean: bool) -> None:
        cycles = self._cycles
        if self._disk is not None:
            unwatch_disk(self._disk)
        with cycles.lock:
            if cycles.closed:
                return
            if clean:
                cycles.holds.closing()
            cycles.shut()
            busy = cycles.holds.closed()
            if cycles.meta is not None:
                close_notifier(cycles.meta)  # asyncio: the notify helper thread (_notify)
            # still held stores (by a call in flight: an appender's or tailer's,
            # a pretoucher's, a tool's) are unmapped by their last release
            cycles.close(busy)

    async def aclose(self) -> None:
        """:meth:`close` for ``async`` code (idempotent)."""
        self.close()

    def _check_open(self) -> None:
        self._cycles.check_open()

    # -- user objects ----------------------------------------------------
    def appender(self, *, listener: AppenderListener | None = None) -> Appender:
        """A new appender (one per thread that writes).

        ``listener(index, payload)`` (and the queue's ``appender_listener``) is
        called after each excerpt this appender commits, in the appending
        thread, after the write lock is let go (Java's ``appenderListener``):
        for audit trails, secondary indexes or fan-out within the process.  An
        exception in one is logged on the ``aiochronicle`` logger; the excerpt
        stays written.  Appenders made without listeners pay nothing for them.
        """
        self._check_open()
        if self.read_only or self._cycles.meta is None:
            raise ReadOnlyQueueError(f"queue {self.path} is open read-only")
        listeners = tuple(fn for fn in (self.options.appender_listener, listener)
                          if fn is not None)
        if listeners:
            return _ListenedAppender(self._cycles, self, True, listeners)
        kind: type[Appender] = Appender
        if self.sync_mode is not SyncMode.NONE:
            kind = _SyncedAppender
        elif not isinstance(self.time_provider, SetTimeProvider | SystemTimeProvider):
            kind = _ClockedAppender
        return kind(self._cycles, self, notify=True)  # wakes parked Pauser.notify() tailers

    def tailer(self, name: str | None = None, *,
               direction: TailerDirection = TailerDirection.FORWARD,
               include_metadata: bool = False, pauser: Pauser | None = None,
               read_after_replica_acknowledged: bool = False) -> Tailer:
        """A new tailer at the start of the queue.

        A named tailer persists its position in ``metadata.cq4t`` under
        ``index.<name>`` (Java's key) and resumes there when created again.
        ``pauser`` says how ``await read()`` and ``read_blocking()`` wait
        (default ``Pauser.balanced()``).  ``read_after_replica_acknowledged``
        returns only excerpts a replication sink has acknowledged (see
        :attr:`Tailer.read_after_replica_acknowledged`).
        """
        self._check_open()
        kind: type[Tailer]
        if read_after_replica_acknowledged:
            kind = _AckedTailer if name is None else _AckedNamedTailer
        else:
            kind = Tailer if name is None else _NamedTailer
        t = kind(self._cycles, self, name, direction, include_metadata)
        if pauser is not None:
            t.pauser = pauser
        return t

    # -- cycles ----------------------------------------------------------
    def cycle_path(self, cycle: int) -> str:
        """The path of the file holding ``cycle``."""
        return self._cycles.path_of(cycle)

    def current_cycle(self) -> int:
        """The cycle the clock is in now."""
        return self._cycles.current()

    def cycles(self) -> list[int]:
        """Every cycle with a file in the directory, in order."""
        return self._cycles.listing()

    @property
    def first_cycle(self) -> int | None:
        """The lowest cycle present, or None for an empty queue."""
        c = self.cycles()
        return c[0] if c else None

    @property
    def last_cycle(self) -> int | None:
        """The highest cycle present, or None for an empty queue."""
        c = self.cycles()
        return c[-1] if c else None

    def refresh_directory_listing(self) -> None:
        """Rewrite ``listing.*`` in the metadata from the files present (as Java's
        ``refreshDirectoryListing``)."""
        self._cycles.store_listing()

    def pretoucher(self, headroom: int = 4 << 20, preroll: float = 2.0, *,
                   preroll_ms: int | None = None) -> Pretoucher:
        """A pretoucher for this queue (see :class:`Pretoucher`): it keeps
        ``headroom`` bytes ahead of the writers faulted in, and creates the next
        cycle's file ``preroll`` seconds before the roll (``preroll_ms``: the
        same in milliseconds, deprecated)."""
        self._check_open()
        if self.read_only:
            raise ReadOnlyQueueError(f"queue {self.path} is open read-only")
        if preroll_ms is not None:
            warnings.warn("preroll_ms is deprecated: give preroll in seconds",
                          DeprecationWarning, stacklevel=2)
            preroll = preroll_ms / 1000
        if not preroll >= 0 or headroom < 0:
            raise ValueError(f"headroom and preroll must be 0 or more, got {headroom}, {preroll}")
        return Pretoucher(self._cycles, self, headroom, preroll)

    # -- queue-wide queries -----------------------------------------------
    @property
    def first_index(self) -> int | None:
        """The index of the first excerpt in the queue, or None if it has none."""
        count = self._cycles.count
        for c in self.cycles():
            if count(c):
                return self.roll_cycle.to_index(c, 0)
        return None

    @property
    def last_index(self) -> int | None:
        """The index of the last excerpt in the queue, or None if it has none."""
        for c in reversed(self.cycles()):
            n = self._cycles.count(c)
            if n:
                return self.roll_cycle.to_index(c, n - 1)
        return None

    def excerpts_in_cycle(self, cycle: int) -> int:
        """How many excerpts ``cycle`` holds (0 if it has no file)."""
        return self._cycles.count(cycle)

    def count_excerpts(self, from_index: int, to_index: int) -> int:
        """The number of excerpts between two indices, ``from_index`` inclusive and
        ``to_index`` exclusive (swapped first if given the other way round, as
        Java does)."""
        if to_index < from_index:
            from_index, to_index = to_index, from_index
        if to_index == from_index:
            return 0
        rc = self.roll_cycle
        fc, fs = rc.to_cycle(from_index), rc.to_sequence(from_index)
        tc, ts = rc.to_cycle(to_index), rc.to_sequence(to_index)
        total = 0
        for c in self.cycles():
            if c < fc or c > tc:
                continue
            n = self._cycles.count(c)
            lo = fs if c == fc else 0
            hi = min(n, ts) if c == tc else n
            total += max(0, hi - lo)
        return total

    def entry_count(self) -> int:
        """The number of excerpts in the whole queue."""
        return sum(self._cycles.count(c) for c in self.cycles())

    # -- metadata values ---------------------------------------------------
    def table_store_get(self, key: str) -> int | None:
        """A named 64-bit value from ``metadata.cq4t`` (keys are case-insensitive)."""
        meta = self._cycles.use_meta()
        try:
            return None if meta is None else meta.get(key)
        finally:
            self._cycles.done_with_meta()

    def table_store_put(self, key: str, value: int) -> None:
        """Store a named 64-bit value in ``metadata.cq4t`` as Java's
        ``tableStorePut`` does: a new key takes ``value``; an existing one is
        only ever raised to it (``Long.MIN_VALUE`` resets it)."""
        meta = self._cycles.use_meta()
        try:
            if meta is None or self.read_only:
                raise ReadOnlyQueueError(f"queue {self.path} is open read-only")
            off = meta.acquire(key, value)
            if value == UNLOCKED:
                meta.file.store64(off, value)
            else:
                meta.file.max64(off, value)
        finally:
            self._cycles.done_with_meta()

    @property
    def codec(self) -> Codec:
        """The codec this queue's payloads carry: the one recorded in its
        metadata (``aiochronicle.codec``), else BinaryWire (e.g. a Java queue)."""
        meta = self._cycles.use_meta()
        try:
            return recorded_codec(meta) or Codecs.BINARY_WIRE
        finally:
            self._cycles.done_with_meta()


def cycles_of(queue: Queue) -> Cycles:
    """The object that owns ``queue``'s cycle files, ``metadata.cq4t``, the
    write lock and rolling: what this package's tools (dump, the operations,
    replication, services) are given to work on an open queue.  Not a member
    of :class:`Queue`: users never need it."""
    return _OPEN_QUEUES[queue]


def set_queue_codec(queue: Queue, codec: Codec | str) -> Codec:
    """Record ``codec`` in ``queue``'s metadata (creating the key); returns it.

    Raises:
        CodecMismatchError: the queue already records another codec.
        ReadOnlyQueueError: the queue is open read-only.
        QueueClosedError: the queue is closed.
    """
    files = cycles_of(queue)
    meta = files.use_meta()
    try:
        return record_codec(meta, codec, queue.path)
    finally:
        files.done_with_meta()


def open_queue(path: str | os.PathLike[str], *, roll_cycle: RollCycle | str | None = None,
               epoch: int | None = None, time_provider: TimeProvider | None = None,
               read_only: bool = False, block_size: int = 64 << 20,
               index_count: int | None = None, index_spacing: int | None = None,
               timeout: float = 10.0, week_rule: str = "US", source_id: int = 0,
               lock_timeout: float | None = None,
               unlock_mode: UnlockMode = UnlockMode.LOCKING_PROCESS_DEAD,
               sync: SyncMode = SyncMode.NONE, sync_every: int = 1,
               sync_interval: float | None = None,
               sync_interval_ms: float | None = None,
               appender_listener: AppenderListener | None = None,
               disk_space_warning: float | None = None,
               disk_check_interval: float = 1.0,
               roll_time: time | None = None,
               roll_time_zone: tzinfo | str | None = None) -> Queue:
    """Open (creating if needed) the Chronicle Queue directory at ``path``.

    Args:
        roll_cycle: how often a new cycle file starts (default FAST_DAILY): one
            of :class:`RollCycles` or its name (``"FAST_HOURLY"``).  An existing
            queue keeps the roll cycle stored in its metadata; a different one
            asked for here raises a RollCycleMismatchWarning.
        epoch: milliseconds added to the start of every cycle (default the roll
            cycle's own, 0 for all but WEEKLY).
        time_provider: the clock appenders use to pick their cycle.
        read_only: open without write access; tailers only.
        block_size: the mapping chunk; cycle files grow by this much (Java's
            ``blockSize``, default 64 MiB).
        timeout: seconds to wait for a file another process is creating.
        week_rule: "US" or "ISO" week numbering for WEEKLY file names.
        source_id: the queue's ``sourceId`` (used by message history).
        lock_timeout: seconds an appender waits for the write lock (default
            1.5 * ``timeout``, as Java) before ``unlock_mode`` applies.
        unlock_mode: what to do with a lock still held after ``lock_timeout``.
        sync: msync mode of appenders: NONE (the OS decides), SYNC or ASYNC.
        sync_every: with a sync mode, msync every this many excerpts ...
        sync_interval: ... or when this many seconds have passed.
        sync_interval_ms: ``sync_interval`` in milliseconds (deprecated).
        appender_listener: ``listener(index, payload)`` called after each
            commit of every appender of this queue object (see
            :meth:`Queue.appender`).
        disk_space_warning: warn (a warning on the ``aiochronicle`` logger,
            :attr:`Queue.disk_space`, a metric) when the free space of the
            queue's file system falls under this many bytes, or under this
            fraction of its size when below 1 (Java's ``DiskSpaceMonitor``);
            None (the default): not watched.
        disk_check_interval: seconds between two looks at the free space (one
            thread per process looks; nothing is added to appends).
        roll_time: roll at this local time of day (Java's ``rollTime``): the
            epoch becomes its milliseconds of the day.
        roll_time_zone: the zone of ``roll_time`` (a ``zoneinfo.ZoneInfo`` or an
            IANA name; default UTC). Outside UTC, cycles follow the zone's days,
            23 or 25 hours long on daylight-saving days; daily roll cycles only.

    Durations are seconds; ``epoch`` and the clock are milliseconds, as in
    Chronicle (and so are the Chronicle-named ``Pauser`` factories such as
    ``Pauser.sleepy(max_millis)``).

    Raises:
        ValueError: a setting out of range (a negative timeout, an index count
            or spacing below 1, a ``source_id`` outside 0..2**31-1...).
        UnknownRollCycleError: a roll cycle name that is not a built-in one.
        TypeError: a ``roll_cycle`` or ``time_provider`` of the wrong type.
        CorruptQueueError: the directory holds files that are not a queue's.
        NoSuchQueueError: ``read_only`` and no directory at ``path`` (a
            FileNotFoundError too).
    """
    settings: dict[str, Any] = dict(
        roll_cycle=roll_cycle, epoch=epoch, time_provider=time_provider, read_only=read_only,
        block_size=block_size, index_count=index_count, index_spacing=index_spacing,
        timeout=timeout, week_rule=week_rule, source_id=source_id, lock_timeout=lock_timeout,
        unlock_mode=unlock_mode, sync=sync, sync_every=sync_every, sync_interval=sync_interval,
        appender_listener=appender_listener, disk_space_warning=disk_space_warning,
        disk_check_interval=disk_check_interval,
        roll_time=roll_time, roll_time_zone=roll_time_zone)
    if sync_interval_ms is not None:
        settings["sync_interval_ms"] = sync_interval_ms
    return Queue(path, options_from(settings))


def is_queue_dir(path: str) -> bool:
    """Whether ``path`` looks like a Chronicle Queue directory."""
    try:
        names = list_dir(path)
    except (OSError, QueueAccessError):
        return False
    return any(n.endswith(".cq4") or n in (METADATA_FILE, LEGACY_LISTING_FILE) for n in names)


def open_existing_queue(path: str, *, writable: bool = False) -> Queue:
    """Open a queue that must already exist (read-only unless ``writable``).

    Raises:
        NoSuchQueueError: nothing at ``path`` (a FileNotFoundError too).
        NotAQueueError: ``path`` is not a queue directory.
    """
    if not os.path.exists(path):
        raise NoSuchQueueError(f"no such queue: {path}")
    if not os.path.isdir(path):
        raise NotAQueueError(f"not a queue directory: {path}")
    list_dir(path)  # QueueAccessError rather than "not a queue" when it is unreadable
    if not is_queue_dir(path):
        raise NotAQueueError(f"not a Chronicle queue: {path} (no metadata.cq4t or .cq4 files)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RollCycleMismatchWarning)
        return open_queue(path, read_only=not writable, timeout=1.0)
