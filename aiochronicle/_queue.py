"""Queue, Appender and Tailer: the user objects over the native core."""

from __future__ import annotations

import bisect
import contextlib
import enum
import os
import threading
import time
import warnings
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ._aio import AsyncTailerMixin
from ._aio import _sleep as _loop_turn
from ._clock import SetTimeProvider, SystemTimeProvider, TimeProvider
from ._errors import (
    AppendLockedError,
    ChronicleError,
    CorruptQueueError,
    HeaderlessCycleError,
    IllegalIndexError,
    IndexFullError,
    MessageTooLargeError,
    NotAQueueError,
    QueueClosedError,
    ReadOnlyQueueError,
    RollCycleMismatchWarning,
    WriteLockLostError,
    WriteLockTimeoutError,
)
from ._headerless import headerless_append_message
from ._mapped import list_dir
from ._native import UNLOCKED, HotAppender, HotTailer, ffi, lib, set_excerpt_type
from ._notify import attach_appender, close_notifier
from ._pauser import Pauser
from ._rollcycles import (
    CycleNamer,
    RollCycle,
    RollCycles,
    candidate_roll_cycles,
    make_roll_cycle,
    misnamed_cycle_files,
)
from ._store import CycleStore, create_or_open_store, open_store
from ._tablestore import TableStore
from ._wire import WireWriter, payload_text

if TYPE_CHECKING:
    from ._codecs import Codec
    from ._methods import MethodReader

_T = TypeVar("_T")

__all__ = [
    "Appender",
    "Batch",
    "DocumentContext",
    "Excerpt",
    "Queue",
    "SyncMode",
    "Tailer",
    "TailerDirection",
    "UnlockMode",
    "open_queue",
]

METADATA_FILE = "metadata.cq4t"
LEGACY_LISTING_FILE = "directory-listing.cq4t"
SUFFIX = ".cq4"
MAX_PAYLOAD = (1 << 30) - 1
INT_MAX = (1 << 31) - 1

_cq_append = lib.cq_append
#: native codes after which an appender rolls (a sink's append lock is checked first)
_ROLL_CODES = (lib.CQ_BAD_STATE, lib.CQ_ROLL, lib.CQ_EOF)
_cq_read = lib.cq_read
SCRATCH = 4096
RESERVE_STEP = 1 << 20
_unpack = ffi.unpack
_tuple_new = tuple.__new__


def _lock_holder(value: int) -> int:
    """The PID in a lock value, as Java reads it: its low 32 bits, signed."""
    low = value & 0xFFFFFFFF
    return low - (1 << 32) if low >= 1 << 31 else low


def _pid_alive(pid: int) -> bool:
    if pid <= 0 or pid >= 1 << 31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class UnlockMode(enum.Enum):
    """What an appender does when the write lock stays held past its timeout
    (Java's ``queue.force.unlock.mode``)."""

    #: take the lock over only if its holder's PID is dead, else raise (default)
    LOCKING_PROCESS_DEAD = "locking-process-dead"
    #: take the lock over regardless (a stuck live holder loses it)
    ALWAYS = "always"
    #: never take it over: raise WriteLockTimeoutError
    NEVER = "never"


class SyncMode(enum.Enum):
    """When appenders msync what they wrote (the OS writes back eventually anyway)."""

    #: leave write-back to the OS (default)
    NONE = "none"
    #: msync(MS_SYNC): wait until the pages reach the device
    SYNC = "sync"
    #: msync(MS_ASYNC): schedule the write-back and return
    ASYNC = "async"


_Self = TypeVar("_Self", bound="_Resource")


class _Resource:
    """``with`` and ``async with`` for the user objects: both close on exit."""

    def close(self) -> None:
        raise NotImplementedError

    def _close(self, clean: bool) -> None:
        """Close; ``clean`` is False when a ``with`` block ends with an exception
        (then named tailers keep the excerpt in hand as not done)."""
        self.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._close(et is None)

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._close(et is None)


class TailerDirection(enum.IntEnum):
    """Which way a tailer moves after each read."""

    BACKWARD = -1
    NONE = 0
    FORWARD = 1


class Excerpt(NamedTuple):
    """One message read from a queue: its 64-bit index and a copy of its payload."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose
    payload: bytes

    @property
    def text(self) -> str:
        """The payload as text.  ``append_text`` and Java's ``writeText`` store
        a BinaryWire string, whose first byte is a length prefix (``b"\\xe5hello"``
        holds ``"hello"``: 0xE0 + 5 bytes; from 32 bytes on, 0xB8 and a
        stop-bit length); this drops the prefix.  A payload without one is
        decoded as UTF-8.  Raises WireError when it is not text."""
        return payload_text(self.payload)


set_excerpt_type(Excerpt)


def text_bytes(text: str) -> bytes:
    """``text`` encoded as BinaryWire text, as Java's ``writeText`` writes it."""
    return WireWriter().text(text).getvalue()


def _still_dead(path: str, dead: tuple[int, int]) -> bool:
    """True if ``path`` is still the file found half-created earlier, its header
    still unfinished (a cheap look, not another wait of ``timeout``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != dead:
            return False
        word = int.from_bytes(os.pread(fd, 4, 0).ljust(4, b"\0"), "little")
        return word == 0 or bool(word & 0x80000000)
    finally:
        os.close(fd)


def _check_settings(roll_cycle: RollCycle | str | None, epoch: int | None,
                    time_provider: TimeProvider | None, index_count: int | None,
                    index_spacing: int | None, timeout: float, source_id: int,
                    lock_timeout: float | None, sync_interval_ms: float | None,
                    week_rule: str) -> RollCycle | None:
    """Reject settings that would fail later, or silently misbehave, with a clear
    error now; returns the roll cycle (a name looked up)."""
    if isinstance(roll_cycle, str):
        roll_cycle = RollCycles.by_name(roll_cycle.upper())
    elif roll_cycle is not None and not isinstance(roll_cycle, RollCycle):
        raise TypeError(f"roll_cycle must be a RollCycle (ac.RollCycles.X) or its name, "
                        f"not {type(roll_cycle).__name__}")
    if time_provider is not None and not callable(
            getattr(time_provider, "current_time_millis", None)):
        raise TypeError(f"time_provider needs a current_time_millis() method "
                        f"({type(time_provider).__name__} has none)")
    for name, value in (("index_count", index_count), ("index_spacing", index_spacing)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if epoch is not None and epoch < 0:
        raise ValueError(f"epoch must be 0 or more milliseconds, got {epoch}")
    if week_rule not in ("US", "ISO"):
        raise ValueError(f"week_rule must be one of ['ISO', 'US'], got {week_rule!r}")
    if not 0 <= source_id < 1 << 31:
        raise ValueError(f"source_id must be in 0..2**31-1 (a Java int), got {source_id}")
    for name, limit in (("timeout", timeout), ("lock_timeout", lock_timeout),
                        ("sync_interval_ms", sync_interval_ms)):
        if limit is not None and not limit >= 0:  # NaN fails too
            raise ValueError(f"{name} must be 0 or more, got {limit}")
    return roll_cycle


# -- fork ----------------------------------------------------------------------
# A process forked while queues are open (multiprocessing's default on Linux)
# inherits them.  Only the forking thread survives, so locks other threads held
# would stay locked for good, and appenders would take the write lock with the
# parent's PID (so a crash of the child would look like a crash of the parent,
# and the parent's death would let others take a lock the child holds).

_OPEN_QUEUES: weakref.WeakSet[Queue] = weakref.WeakSet()


def _single_threaded() -> bool:
    """No other Python thread runs: no native call of ours can be in flight
    while this one closes something."""
    return threading.active_count() == 1


def _keep_if_threaded(obj: Appender | Tailer, st: CycleStore | None) -> None:
    """On close: when another thread could be inside a native call on ``st``
    (closing from another thread is allowed), keep it mapped until ``obj``
    is garbage; alone, let it go at once (closing releases the file)."""
    if st is not None and not _single_threaded():
        obj._kept = st  # what the native struct still points at
        st.kept += 1


def _after_fork_in_child() -> None:
    pid = os.getpid()
    for q in list(_OPEN_QUEUES):
        q._lock = threading.RLock()
        for child in list(q._children):
            if isinstance(child, Appender):
                child._c.pid = pid
            else:
                child._wait_guard = None


os.register_at_fork(after_in_child=_after_fork_in_child)


class Queue(_Resource):
    """A Chronicle Queue directory opened for appending and tailing.

    Use :func:`open_queue` to create one.  A queue is a context manager; closing
    it closes every appender and tailer made from it.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 roll_cycle: RollCycle | str | None = None,
                 epoch: int | None = None, time_provider: TimeProvider | None = None,
                 read_only: bool = False, block_size: int = 64 << 20,
                 index_count: int | None = None, index_spacing: int | None = None,
                 timeout: float = 10.0, week_rule: str = "US", source_id: int = 0,
                 lock_timeout: float | None = None,
                 unlock_mode: UnlockMode = UnlockMode.LOCKING_PROCESS_DEAD,
                 sync: SyncMode = SyncMode.NONE, sync_every: int = 1,
                 sync_interval_ms: float | None = None) -> None:
        roll_cycle = _check_settings(roll_cycle, epoch, time_provider, index_count,
                                     index_spacing, timeout, source_id, lock_timeout,
                                     sync_interval_ms, week_rule)
        self._path = os.fspath(path)
        if not self._path:
            raise ValueError("the queue path is empty")
        if os.path.exists(self._path) and not os.path.isdir(self._path):
            raise NotAQueueError(f"{self._path} is a file, not a queue directory")
        self.unlock_mode = UnlockMode(unlock_mode)
        """What an appender does when a live process holds the write lock past ``lock_timeout``."""
        self.sync_mode = SyncMode(sync)
        """When appended excerpts are flushed to disk (``msync``)."""
        if sync_every < 1:
            raise ValueError("sync_every must be at least 1")
        self.sync_every = sync_every
        """With ``SyncMode.SYNC``/``ASYNC``: flush every this many excerpts."""
        self.sync_interval_ms = sync_interval_ms
        """With ``SyncMode.SYNC``/``ASYNC``: flush at least this often (None: only by count)."""
        self._time_provider: TimeProvider = time_provider or SystemTimeProvider.INSTANCE
        self.timeout = timeout
        """Seconds to wait for another process creating a cycle file before taking it over."""
        self.lock_timeout = timeout * 1.5 if lock_timeout is None else lock_timeout
        """Seconds an appender waits for a write lock held by a live process (1.5 x ``timeout``)."""
        if block_size < 64 << 10 or block_size & 4095:
            raise ValueError("block_size must be a multiple of 4096 and at least 64 KiB")
        self._block_size = block_size
        self._overlap = block_size // 4
        self._week_rule = week_rule
        self._source_id = source_id
        self._closed = False
        self._lock = threading.RLock()
        self._stores: dict[int, CycleStore] = {}
        self._children: weakref.WeakSet[Appender | Tailer] = weakref.WeakSet()
        self._listing_cache: tuple[int, list[int]] | None = None
        self._parsed_names: dict[str, int | None] = {}  # file name -> cycle (None: not one)
        #: called with ("on_acquired" | "on_released", cycle, path) when this queue
        #: object opens or closes a cycle file (see add_store_file_listener)
        self._store_hooks: list[Callable[[str, int, str], None]] = []
        self._listing_time = 0.0
        self._meta: TableStore | None = None
        self._write_lock_cell: Any = None
        self._dead_files: dict[str, tuple[int, int]] = {}
        self._unclosable: set[int] = set()  # damaged older cycles already warned about
        _OPEN_QUEUES.add(self)

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
            raise FileNotFoundError(f"no queue directory at {self.path}")

        requested = roll_cycle
        rc = roll_cycle or RollCycles.DEFAULT
        ep = rc.resolve_epoch(epoch or 0) if epoch is not None else rc.default_epoch
        if index_count is not None or index_spacing is not None:
            rc = make_roll_cycle(rc.name, rc.format, rc.length_ms,
                                 index_count or rc.index_count,
                                 index_spacing or rc.index_spacing, rc.default_epoch)
        if not read_only or os.path.exists(meta_path):
            try:
                if read_only:
                    self._meta = TableStore(meta_path, read_only=True, timeout=timeout)
                else:
                    # an existing but still empty store (another process, Java say, has
                    # just created the file): whoever takes its file lock first writes
                    # the header, as Java's table store builder does
                    first = rc

                    def header() -> bytes:
                        return _metadata_header(first, ep, source_id)

                    self._meta = TableStore(meta_path, read_only=False, timeout=timeout,
                                           header=header, initial_keys=_INITIAL_KEYS)
                rc, ep = self._adopt_stored(rc, ep, requested, index_count, index_spacing)
            except CorruptQueueError as exc:
                if not read_only or not any(n.endswith(SUFFIX) for n in names):
                    raise
                # a reader goes by what the cycle files say (their names must then
                # all fit, see _check_names); writers need the metadata repaired
                warnings.warn(f"{exc}: reading the queue by its cycle files (`aiochronicle "
                              "repair` rebuilds the metadata)", RuntimeWarning, stacklevel=3)
                if self._meta is not None:
                    self._meta.close()
                self._meta = None
        if self._meta is None and read_only:
            rc, ep = self._guess_from_files(rc, ep, requested)
        self._roll_cycle = rc
        self._epoch = ep
        self._namer = CycleNamer(rc, ep, week_rule)
        self._check_names(meta_path, [n[:-len(SUFFIX)] for n in names if n.endswith(SUFFIX)])
        if self._meta is not None and not read_only:
            self._recover_dead_locks()


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
    def read_only(self) -> bool:
        """True if the queue was opened (or had to be opened) read-only."""
        return self._read_only

    @property
    def roll_cycle(self) -> RollCycle:
        """The roll cycle in use: the one stored in ``metadata.cq4t`` if the queue existed."""
        return self._roll_cycle

    @property
    def epoch(self) -> int:
        """Milliseconds added to the Unix epoch before cycles are counted (stored one wins)."""
        return self._epoch

    # -- opening ---------------------------------------------------------
    def _adopt_stored(self, rc: RollCycle, ep: int, requested: RollCycle | None,
                      index_count: int | None,
                      index_spacing: int | None) -> tuple[RollCycle, int]:
        assert self._meta is not None
        meta = self._meta.header.get("metadata")
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
        except (KeyError, ValueError) as exc:
            raise CorruptQueueError(f"metadata roll settings are malformed: {exc}",
                                    self._meta.path, 4) from None
        stored = RollCycles.by_format(fmt)
        try:
            if stored is None or stored.length_ms != length:
                stored = make_roll_cycle("CUSTOM", fmt, length, index_count or rc.index_count,
                                         index_spacing or rc.index_spacing)
            elif index_count is not None or index_spacing is not None:
                stored = make_roll_cycle(stored.name, stored.format, stored.length_ms,
                                         index_count or stored.index_count,
                                         index_spacing or stored.index_spacing,
                                         stored.default_epoch)
        except ValueError as exc:
            raise CorruptQueueError(f"metadata holds an unusable roll cycle "
                                    f"(format {fmt!r}, length {length}): {exc}",
                                    self._meta.path, 4) from None
        if requested is not None and (requested.format != stored.format
                                      or requested.length_ms != stored.length_ms):
            warnings.warn(
                f"queue {self.path} was created with roll cycle {stored.name} "
                f"({stored.format!r}); using it instead of {requested.name}",
                RollCycleMismatchWarning, stacklevel=4)
        return stored, stored_epoch

    def _guess_from_files(self, rc: RollCycle, ep: int,
                          requested: RollCycle | None) -> tuple[RollCycle, int]:
        names = sorted(n[:-len(SUFFIX)] for n in os.listdir(self.path) if n.endswith(SUFFIX))
        if not names:
            return rc, ep
        # Chronicle 4 kept the roll settings in each cycle file's header
        probe = open_store(os.path.join(self.path, names[0] + SUFFIX), 0, writable=False,
                           chunk=self.block_size, overlap=self._overlap, timeout=self.timeout,
                           roll_index=(rc.index_count, rc.index_spacing))
        if probe is not None:
            try:
                lay = probe.layout
                if lay.roll_format is not None and lay.roll_length is not None:
                    found = RollCycles.by_format(lay.roll_format)
                    if found is None or found.length_ms != lay.roll_length:
                        try:
                            found = make_roll_cycle("CUSTOM", lay.roll_format,
                                                    lay.roll_length, lay.index_count,
                                                    lay.index_spacing)
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

    def _check_names(self, meta_path: str, stems: list[str]) -> None:
        """Refuse roll settings that name none of the cycle files present, or
        name one of them otherwise: the queue would read as (partly) empty."""
        others = misnamed_cycle_files(self._namer, stems)
        if others:
            if self._meta is not None:
                self._meta.close()
            rc = self._roll_cycle
            raise CorruptQueueError(
                f"{len(others)} of the {len(stems)} cycle files (e.g. {others[0]}{SUFFIX}) are "
                f"not named by the roll cycle {rc.name} ({rc.format!r}, {rc.length_ms} ms, "
                f"epoch {self._epoch}) the queue holds: its metadata is damaged or belongs to "
                "other files (`aiochronicle repair` rebuilds it from the cycle files)",
                meta_path if os.path.exists(meta_path)
                else os.path.join(self.path, others[0] + SUFFIX))

    def _recover_dead_locks(self) -> None:
        assert self._meta is not None
        for key in ("chronicle.write.lock", "chronicle.append.lock"):
            value = self._meta.get(key)
            if value is None or value == UNLOCKED:
                continue
            holder = _lock_holder(value)
            if holder != os.getpid() and not _pid_alive(holder):
                self._meta.cas(key, value, UNLOCKED)

    # -- context ---------------------------------------------------------
    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self.read_only else "open")
        return f"<Queue {self.path!r} {self.roll_cycle.name} {state}>"

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed

    def close(self) -> None:
        """Close every appender and tailer of this queue, then the files.

        Named tailers save their position first: what they handed out is done
        (a ``with`` block that ends with an exception leaves the excerpt in hand
        to be read again, as a crash does)."""
        self._close(True)

    def _close(self, clean: bool) -> None:
        with self._lock:
            if self._closed:
                return
            if clean:
                for child in list(self._children):
                    if isinstance(child, Tailer) and not child._closed:
                        child._save()
            self._closed = True
            for child in list(self._children):
                child._detach()
            close_notifier(self)  # asyncio: the notify helper thread (_notify)
            alone = _single_threaded()
            for store in self._stores.values():
                # with no other thread, no native call can be using the files:
                # unmap and close them now, not when the objects are garbage
                store.close(now=alone)
                self._store_event("on_released", store)
            self._stores.clear()
            if self._meta is not None:
                self._meta.close()

    async def aclose(self) -> None:
        """:meth:`close` for ``async`` code (idempotent)."""
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"queue {self.path} is closed")

    # -- user objects ----------------------------------------------------
    def appender(self) -> Appender:
        """A new appender (one per thread that writes)."""
        self._check_open()
        if self.read_only or self._meta is None:
            raise ReadOnlyQueueError(f"queue {self.path} is open read-only")
        kind: type[Appender] = Appender
        if self.sync_mode is not SyncMode.NONE:
            kind = _SyncedAppender
        elif not isinstance(self.time_provider, SetTimeProvider | SystemTimeProvider):
            kind = _ClockedAppender
        a = kind(self)
        attach_appender(a)  # wakes parked Pauser.notify() tailers (_notify)
        self._children.add(a)
        return a

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
        t = (Tailer if name is None else _NamedTailer)(self, name, direction, include_metadata)
        if pauser is not None:
            t.pauser = pauser
        if read_after_replica_acknowledged:
            t.read_after_replica_acknowledged = True
        self._children.add(t)
        return t

    # -- cycles ----------------------------------------------------------
    def cycle_path(self, cycle: int) -> str:
        """The path of the file holding ``cycle``."""
        return os.path.join(self.path, self._namer.name(cycle) + SUFFIX)

    def current_cycle(self) -> int:
        """The cycle the clock is in now."""
        return self.roll_cycle.current_cycle(self.time_provider.current_time_millis(), self.epoch)

    def cycles(self) -> list[int]:
        """Every cycle with a file in the directory, in order."""
        self._check_open()
        mod = self._meta.get("listing.modCount") if self._meta is not None else None
        cached = self._listing_cache
        now = time.monotonic()
        if (cached is not None and mod is not None and cached[0] == mod
                and now - self._listing_time < 60.0):
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
                    if self._namer.matches(stem):
                        c = self._namer.parse(stem)
                parsed[n] = c
            if c is not None:
                found.append(c)
        found.sort()
        self._listing_cache = (mod if mod is not None else -1, found)
        self._listing_time = now
        return found

    def _invalidate_listing(self) -> None:
        self._listing_cache = None

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

    def _next_cycle(self, cycle: int, step: int) -> int | None:
        cs = self.cycles()
        if step > 0:
            later = [c for c in cs if c > cycle]
            if not later:
                self._invalidate_listing()
                later = [c for c in self.cycles() if c > cycle]
            return later[0] if later else None
        earlier = [c for c in cs if c < cycle]
        return earlier[-1] if earlier else None

    def _acquire_store(self, cycle: int, create: bool = False) -> CycleStore | None:
        with self._lock:
            self._check_open()
            st = self._stores.get(cycle)
            if st is None:
                path = self.cycle_path(cycle)
                writable = not self.read_only
                if create:
                    st, created = create_or_open_store(
                        path, cycle, index_count=self.roll_cycle.index_count,
                        index_spacing=self.roll_cycle.index_spacing, chunk=self.block_size,
                        overlap=self._overlap, timeout=self.timeout,
                        roll_index=self._roll_index())
                    if created:
                        self._on_file_created(cycle)
                else:
                    if path in self._dead_files and _still_dead(path,
                                                                self._dead_files[path]):
                        return None
                    st = open_store(path, cycle, writable=writable, chunk=self.block_size,
                                    overlap=self._overlap, timeout=self.timeout,
                                    roll_index=self._roll_index())
                    if st is None:
                        # absent, or its creator died before finishing the header
                        # (open_store waited `timeout`): remember the latter, so
                        # tailers do not wait for it again (an appender that needs
                        # the cycle moves the file aside and creates it anew)
                        with contextlib.suppress(OSError):
                            info = os.stat(path)
                            self._dead_files[path] = (info.st_dev, info.st_ino)
                        return None
                self._stores[cycle] = st
                self._store_event("on_acquired", st)
            st.refs += 1
            return st

    def _roll_index(self) -> tuple[int, int]:
        """(index count, spacing) for cycle files without a header (libchronicle's)."""
        return self.roll_cycle.index_count, self.roll_cycle.index_spacing

    def _store_event(self, what: str, st: CycleStore) -> None:
        for hook in list(self._store_hooks):
            hook(what, st.cycle, st.path)

    def _release_store(self, st: CycleStore | None) -> None:
        if st is None:
            return
        with self._lock:
            st.refs -= 1
            if st.refs <= 0 and self._stores.get(st.cycle) is st:
                del self._stores[st.cycle]
                st.close(now=True)
                self._store_event("on_released", st)

    def _on_file_created(self, cycle: int) -> None:
        cached = self._listing_cache
        self._listing_cache = None
        if self._meta is not None:
            self._meta.set_max("listing.highestCycle", cycle)
            self._meta.set_min("listing.lowestCycle", cycle)
            mod = self._meta.add("listing.modCount", 1)
            if cached is not None and cached[0] == mod - 1:
                # nobody else changed the directory since our last look: add
                # the new cycle instead of listing the directory again
                cs = cached[1]
                if cycle not in cs:
                    cs = cs.copy()
                    bisect.insort(cs, cycle)
                self._listing_cache = (mod, cs)

    def refresh_directory_listing(self) -> None:
        """Rewrite ``listing.*`` in the metadata from the files present (as Java's
        ``refreshDirectoryListing``)."""
        self._invalidate_listing()
        cs = self.cycles()
        if self._meta is not None and not self.read_only and cs:
            self._meta.set("listing.highestCycle", cs[-1])
            self._meta.set("listing.lowestCycle", cs[0])
            self._meta.add("listing.modCount", 1)

    def _normalise_eofs(self, before: int, cycles: list[int]) -> None:
        """Close every cycle older than ``before`` that lacks its EOF marker,
        newest first, stopping at the first that has one (Java's EOF
        normalisation).  The write lock must be held."""
        for older in reversed(cycles[:bisect.bisect_left(cycles, before)]):
            st = self._acquire_store(older)
            if st is None:
                continue
            try:
                if st.end()[2]:
                    return
                st.write_eof()
            except CorruptQueueError as exc:
                # a damaged older cycle must not make the queue unwritable:
                # leave it as it is (readers stop there with this error, and
                # `aiochronicle repair` recovers it) and go on
                if older not in self._unclosable:
                    self._unclosable.add(older)
                    warnings.warn(f"cycle {older} could not be closed with an end-of-file "
                                  f"marker: {exc}", RuntimeWarning, stacklevel=2)
            finally:
                self._release_store(st)

    # -- the write lock (chronicle.write.lock) ----------------------------
    def _write_lock_ptr(self) -> Any:
        # looked up once, while the queue is open; kept so that a lock taken
        # just before another thread closes the queue can still be released
        # (the table store stays mapped until the queue is garbage)
        p = self._write_lock_cell
        if p is None:
            assert self._meta is not None
            p = self._write_lock_cell = self._meta.ptr("chronicle.write.lock", UNLOCKED)
        return p

    def _wait_write_lock(self) -> None:
        """Wait for the write lock to come free; take it over from a dead holder
        (or after ``lock_timeout`` with UnlockMode.ALWAYS)."""
        meta = self._meta
        assert meta is not None
        lock = self._write_lock_ptr()
        deadline = 0.0
        delay = 20e-6
        mode = self.unlock_mode
        last = UNLOCKED
        while True:
            value = int(lock[0])
            if value == UNLOCKED:
                return
            if self._closed:
                raise QueueClosedError(f"queue {self.path} is closed")
            if value != last:
                # the timeout is how long one holder keeps the lock: it starts
                # again whenever the lock changes hands
                last = value
                deadline = time.monotonic() + self.lock_timeout
            holder = _lock_holder(value)
            if (mode is not UnlockMode.NEVER and holder != os.getpid()
                    and not _pid_alive(holder)):
                meta.cas("chronicle.write.lock", value, UNLOCKED)
                return
            if time.monotonic() >= deadline:
                if mode is UnlockMode.ALWAYS:
                    warnings.warn(f"forcing chronicle.write.lock of {self.path} away from "
                                  f"process {holder} after {self.lock_timeout}s",
                                  RuntimeWarning, stacklevel=4)
                    meta.cas("chronicle.write.lock", value, UNLOCKED)
                    return
                raise WriteLockTimeoutError(
                    f"chronicle.write.lock of {self.path} is held by "
                    f"{'live ' if _pid_alive(holder) else ''}process "
                    f"{holder} for more than {self.lock_timeout}s")
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    def _lock_write(self) -> None:
        lock = self._write_lock_ptr()
        while lib.cq_lock(lock, os.getpid(), 100_000) != 0:
            self._wait_write_lock()

    def _unlock_write(self) -> None:
        lib.cq_unlock(self._write_lock_ptr(), os.getpid())

    def pretoucher(self, headroom: int = 4 << 20, preroll_ms: int = 2000) -> Pretoucher:
        """A pretoucher for this queue (see :class:`Pretoucher`)."""
        self._check_open()
        if self.read_only:
            raise ReadOnlyQueueError(f"queue {self.path} is open read-only")
        return Pretoucher(self, headroom, preroll_ms)

    # -- queue-wide queries -----------------------------------------------
    def _cycle_count(self, cycle: int) -> int:
        st = self._acquire_store(cycle)
        if st is None:
            return 0
        try:
            return st.end()[1]
        finally:
            self._release_store(st)

    @property
    def first_index(self) -> int | None:
        """The index of the first excerpt in the queue, or None if it has none."""
        for c in self.cycles():
            if self._cycle_count(c):
                return self.roll_cycle.to_index(c, 0)
        return None

    @property
    def last_index(self) -> int | None:
        """The index of the last excerpt in the queue, or None if it has none."""
        for c in reversed(self.cycles()):
            n = self._cycle_count(c)
            if n:
                return self.roll_cycle.to_index(c, n - 1)
        return None

    def excerpts_in_cycle(self, cycle: int) -> int:
        """How many excerpts ``cycle`` holds (0 if it has no file)."""
        return self._cycle_count(cycle)

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
            n = self._cycle_count(c)
            lo = fs if c == fc else 0
            hi = min(n, ts) if c == tc else n
            total += max(0, hi - lo)
        return total

    def entry_count(self) -> int:
        """The number of excerpts in the whole queue."""
        return sum(self._cycle_count(c) for c in self.cycles())

    # -- metadata values ---------------------------------------------------
    def table_store_get(self, key: str) -> int | None:
        """A named 64-bit value from ``metadata.cq4t`` (keys are case-insensitive)."""
        self._check_open()
        return None if self._meta is None else self._meta.get(key)

    def table_store_put(self, key: str, value: int) -> None:
        """Store a named 64-bit value in ``metadata.cq4t`` as Java's
        ``tableStorePut`` does: a new key takes ``value``; an existing one is
        only ever raised to it (``Long.MIN_VALUE`` resets it)."""
        self._check_open()
        if self._meta is None or self.read_only:
            raise ReadOnlyQueueError(f"queue {self.path} is open read-only")
        off = self._meta.acquire(key, value)
        if value == UNLOCKED:
            self._meta.file.store64(off, value)
        else:
            lib.cq_max64(self._meta.file.ptr(off), value)

    @property
    def codec(self) -> Codec:
        """The codec this queue's payloads carry: the one recorded in its
        metadata (``aiochronicle.codec``), else BinaryWire (e.g. a Java queue)."""
        from ._codecs import queue_codec

        return queue_codec(self)


_INITIAL_KEYS = (
    ("listing.highestCycle", UNLOCKED),
    ("listing.lowestCycle", INT_MAX),
    ("listing.modCount", 0),
    ("chronicle.write.lock", UNLOCKED),
    ("chronicle.lastIndexReplicated", -1),
    ("chronicle.lastAcknowledgedIndexReplicated", -1),
)


def _metadata_header(rc: RollCycle, epoch: int, source_id: int) -> bytes:
    w = WireWriter(4)
    w.event_name("header")
    w.type_prefix("STStore")
    outer = w.begin_length32()
    w.field("wireType")
    w.type_prefix("WireType")
    w.text("BINARY_LIGHT")
    w.field("metadata")
    w.type_prefix("SCQMeta")
    meta = w.begin_length32()
    w.field("roll")
    w.type_prefix("SCQSRoll")
    roll = w.begin_length32()
    w.field("length")
    w.int_compact(rc.length_ms)
    w.field("format")
    w.text(rc.format)
    w.field("epoch")
    w.int_compact(epoch)
    w.end_length32(roll)
    w.field("deltaCheckpointInterval")
    w.int_compact(64)
    w.field("sourceId")
    w.int_compact(source_id)
    w.end_length32(meta)
    w.align_to(4)  # inside the STStore body, as Java pads it
    w.end_length32(outer)
    return w.getvalue()


class Pretoucher:
    """Faults in (and reserves disk for) the pages just ahead of the writers, and
    creates the next cycle's file shortly before the roll, so appenders meet
    neither page faults nor file creation on their hot path.

    Call :meth:`execute` periodically from a thread of your own, or
    :meth:`start` a background thread that does it every ``interval`` seconds.
    """

    def __init__(self, queue: Queue, headroom: int, preroll_ms: int) -> None:
        self.queue = queue
        """The queue this object belongs to."""
        self.headroom = headroom
        self.preroll_ms = preroll_ms
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._touched: tuple[int, int] = (-1, 0)
        self.errors = 0

    def __repr__(self) -> str:
        running = self._thread is not None and self._thread.is_alive()
        return (f"<Pretoucher {self.queue.path!r} headroom={self.headroom} "
                f"{'running' if running else 'stopped'}>")

    def execute(self) -> None:
        """One pass: touch ahead of the write position; pre-create the next cycle."""
        q = self.queue
        cycle = q.current_cycle()
        st = q._acquire_store(cycle)
        if st is None:
            # files are only ever created under the write lock (see _discard)
            q._lock_write()
            try:
                st = q._acquire_store(cycle, create=True)
            finally:
                q._unlock_write()
            if st is None:
                return
        try:
            end = st.end()[0]
            start = self._touched[1] if self._touched[0] == cycle else end
            start = max(start, end)
            stop = end + self.headroom
            if stop > start:
                st.file.ensure(stop)
                st.file.reserve(start, stop)
                lib.cq_populate(st.file.c.base, start, stop)
                self._touched = (cycle, stop)
        finally:
            q._release_store(st)
        now = q.time_provider.current_time_millis()
        rc = q.roll_cycle
        next_start = (cycle + 1) * rc.length_ms + q.epoch
        if next_start - now <= self.preroll_ms and cycle + 1 not in q.cycles():
            q._lock_write()
            try:
                nxt = q._acquire_store(cycle + 1, create=True)
            finally:
                q._unlock_write()
            q._release_store(nxt)

    def start(self, interval: float = 0.05) -> Pretoucher:
        """Run :meth:`execute` every ``interval`` seconds on a daemon thread."""
        if self._thread is not None:
            return self

        def run() -> None:
            while not self._stop.wait(interval):
                try:
                    self.execute()
                except QueueClosedError:
                    return
                except Exception:
                    self.errors += 1

        self._thread = threading.Thread(target=run, name="aiochronicle-pretoucher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background thread (if started) and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Pretoucher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class DocumentContext:
    """An excerpt being written in place while the write lock is held.

    Created by :meth:`Appender.writing_document`; commits on a clean exit and
    rolls back (zeroes what was written) when the block raises.
    """

    __slots__ = ("_appender", "_done", "_len", "_rollback", "index", "metadata")

    def __init__(self, appender: Appender, metadata: bool) -> None:
        self._appender = appender
        self._len = 0
        self._done = False
        self._rollback = False
        self.metadata = metadata
        self.index: int | None = None

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        if not self._done:
            state = "open"
        elif self._rollback:
            state = "rolled back"
        else:
            state = "committed" + (f" at {self.index:#x}" if self.index is not None else "")
        kind = " metadata" if self.metadata else ""
        return f"<DocumentContext{kind} {self._len} bytes {state}>"

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        """Append bytes (``str`` as UTF-8) to the excerpt."""
        if self._done:
            raise ChronicleError("the document is already closed")
        if self._appender._closed:
            raise QueueClosedError("the appender is closed")
        raw = data.encode() if isinstance(data, str) else data
        n = len(raw)
        a = self._appender
        end = self._len + n
        if end > MAX_PAYLOAD:
            raise MessageTooLargeError(f"an excerpt holds at most {MAX_PAYLOAD} bytes")
        a._doc_ensure(end)
        c = a._c
        ffi.memmove(c.store.base + c.doc_pos + 4 + self._len, raw, n)
        self._len = end

    def write_text(self, text: str) -> None:
        """Append ``text`` as BinaryWire text (Java's ``writeText``)."""
        self.write(text_bytes(text))

    def rollback_on_close(self) -> None:
        """Discard the excerpt instead of committing it when the block ends."""
        self._rollback = True

    def __enter__(self) -> DocumentContext:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(rollback=et is not None)

    def close(self, rollback: bool = False) -> None:
        """Commit the excerpt (or roll it back)."""
        if self._done:
            return
        self._done = True
        a = self._appender
        if rollback or self._rollback:
            self._rollback = True
            lib.cq_doc_rollback(a._c, self._len)
            return
        self.index = a._doc_commit(self._len, self.metadata)


class Appender(HotAppender, _Resource):
    """Writes excerpts to the end of a queue; safe with other appenders in any
    thread or process (they serialise on ``chronicle.write.lock`` as Java does).

    Payloads are copied into the mapped file under the lock; anything that has
    to be encoded is encoded before the lock is taken.

    One appender belongs to one thread at a time (as Java's, which are
    thread-local): give each writing thread its own from :meth:`Queue.appender`.
    Closing it, or its queue, is safe from any thread.
    """

    def __init__(self, queue: Queue) -> None:
        assert queue._meta is not None
        self.queue = queue
        """The queue this object belongs to."""
        self._store: CycleStore | None = None
        self._kept: CycleStore | None = None  # after close: keeps the mapping alive
        c = ffi.new("cq_appender *")
        self._c: Any = c
        self._keep: list[Any] = []
        c.write_lock = queue._write_lock_ptr()
        self._refresh_append_lock()
        c.pid = os.getpid()
        tp = queue.time_provider
        self._py_clock: TimeProvider | None = None
        if isinstance(tp, SetTimeProvider):
            c.clock_cell = tp._cell
            self._keep.append(tp._cell)
        elif isinstance(tp, SystemTimeProvider):
            c.clock_cell = ffi.NULL
        else:
            cell = ffi.new("int64_t *", tp.current_time_millis())
            self._keep.append(cell)
            c.clock_cell = cell
            self._py_clock = tp
        c.epoch = queue.epoch
        c.length_ms = queue.roll_cycle.length_ms
        c.queue_shift = queue.roll_cycle.cycle_shift
        c.check_cycle = 1
        c.lock_spin_ns = 100_000
        c.populate_step = 1 << 20
        c.last_index = -1
        self._closed = False
        self._synced_pos = 0
        self._synced_store: CycleStore | None = None
        self._since_sync = 0
        self._last_sync = time.monotonic()
        self._bind_native(int(ffi.cast("uintptr_t", c)))

    def _refresh_append_lock(self) -> None:
        meta = self.queue._meta
        assert meta is not None
        off = meta.offset("chronicle.append.lock")
        self._c.append_lock = (ffi.NULL if off is None
                               else ffi.cast("int64_t *", meta.file.ptr(off)))

    def __repr__(self) -> str:
        return f"<Appender {self.queue.path!r} cycle={self.cycle}>"

    # -- lifecycle -------------------------------------------------------
    def close(self) -> None:
        """Release this appender's cycle file."""
        self._detach()

    async def aclose(self) -> None:
        """:meth:`close` for ``async`` code (idempotent)."""
        self.close()

    def _detach(self) -> None:
        # May run on another thread than one appending right now (Queue.close):
        # the native struct keeps its pointers (a call in flight goes on using
        # them) and this object keeps its store, so the mapping stays until this
        # appender is garbage; the closed flag turns every later call away.
        if self._closed:
            return
        self._closed = True
        c = self._c
        c.closed = 1
        if c.doc_open:
            # the owner may still be copying into the document: its slot
            # becomes padding, so those bytes land where nobody reads
            lib.cq_doc_abandon(c)
        st, self._store = self._store, None
        _keep_if_threaded(self, st)
        if st is not None and not self.queue.closed:
            self.queue._release_store(st)

    # -- properties ------------------------------------------------------
    @property
    def cycle(self) -> int | None:
        """The cycle this appender writes to, once it has written."""
        return None if self._store is None else self._store.cycle

    @property
    def last_index_appended(self) -> int:
        """The index of the last excerpt this appender wrote (-1 before any)."""
        return int(self._c.last_index)

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
                      record_history: bool | None = None) -> _T:
        """A proxy of the interface ``iface`` whose every method call appends one
        excerpt holding the method and its encoded arguments (see ``_methods``).

        ``codec`` defaults to the one the queue records, else msgpack for an
        empty queue (recorded then) and BinaryWire for one holding excerpts.
        ``record_history`` (default: when the queue's ``source_id`` is not 0,
        as Java) writes the message history first in each excerpt.

        Raises:
            CodecMismatchError: the queue records another codec.
            ValueError: ``record_history=True`` on a queue whose source_id is 0.
            TypeError: ``iface`` is not a usable interface.
        """
        from ._methods import make_method_writer

        return make_method_writer(self, iface, codec=codec, record_history=record_history)

    def append_metadata(self, data: bytes | bytearray | memoryview | str) -> None:
        """Append a metadata excerpt (skipped by tailers unless asked for; no index)."""
        if type(data) is not bytes:
            data = self._coerce(data)
        if self._py_clock is not None:
            self._c.clock_cell[0] = self._py_clock.current_time_millis()
        rc = _cq_append(self._c, data, len(data), 1)
        if rc < 0:
            self._append_slow(rc, data, 1)

    @staticmethod
    def _coerce(data: object) -> Any:
        if isinstance(data, str):
            return data.encode()
        if isinstance(data, bytearray | memoryview):
            return ffi.from_buffer(data)
        raise TypeError(f"cannot append {type(data).__name__}; expected bytes or str")

    def _append_slow(self, rc: int, data: Any, meta: int) -> int:
        c = self._c
        for _ in range(10_000):
            self._handle(rc, len(data), bool(meta))
            rc = _cq_append(c, data, len(data), meta)
            if rc >= 0:
                return int(rc) if not meta else -1
        raise ChronicleError(f"append did not settle (last code {rc})")

    def _handle(self, rc: int, size: int, meta: bool = False) -> None:
        """Deal with a non-OK code of the native append; raise if it cannot be."""
        c = self._c
        if self._closed:
            raise QueueClosedError("the appender is closed")
        if not meta and rc in _ROLL_CODES:
            self._refuse_if_sink()
        if rc == lib.CQ_BAD_STATE:
            if c.doc_open:
                raise ChronicleError("a writing_document() of this appender is still open")
            self._roll(None)
        elif rc == lib.CQ_ROLL:
            self._roll(int(c.want_cycle))
        elif rc == lib.CQ_EOF:
            self._roll(None, after_eof=True)
        elif rc == lib.CQ_NEED_MAP:
            assert self._store is not None
            self._store.file.ensure(int(c.need))
        elif rc == lib.CQ_NO_SPACE:
            self._reserve(int(c.need))
        elif rc == lib.CQ_LOCKED:
            self._wait_lock()
        elif rc == lib.CQ_NOT_REACHED:
            pass  # a long walk to the end of the data let the lock go: call again
        elif rc == lib.CQ_LOCK_LOST:
            raise WriteLockLostError(
                f"the write lock of {self.queue.path} was forced away from this appender "
                "before it committed: the excerpt was not written")
        elif rc == lib.CQ_APPEND_LOCKED:
            self._check_append_lock()
        elif rc == lib.CQ_TOO_LARGE:
            raise MessageTooLargeError(
                f"an excerpt holds at most {MAX_PAYLOAD} bytes, got {size}")
        elif rc == lib.CQ_INDEX_FULL:
            raise IndexFullError(
                f"cycle {self.cycle} holds as many excerpts as "
                f"{self.queue.roll_cycle.name} can index")
        elif rc == lib.CQ_CORRUPT:
            path = self._store.path if self._store else self.queue.path
            raise CorruptQueueError("found bytes where the next excerpt should go", path,
                                    int(c.err_pos))
        else:
            raise ChronicleError(f"native append failed with code {rc}")

    def _reserve(self, need: int) -> None:
        """Reserve disk blocks up to ``need`` (and a step beyond) before writing."""
        st = self._store
        assert st is not None
        c = self._c
        start = int(c.allocated)
        end = max(need, min(start + RESERVE_STEP, st.file.size))
        if not st.file.reserve(start, end):
            end = 1 << 62  # the file system cannot reserve: stop asking
        c.allocated = end

    def _check_append_lock(self) -> None:
        meta = self.queue._meta
        assert meta is not None
        value = meta.get("chronicle.append.lock")
        if value is None or value == UNLOCKED:
            return
        holder = _lock_holder(value)
        if not _pid_alive(holder):
            meta.cas("chronicle.append.lock", value, UNLOCKED)
            return
        raise AppendLockedError(
            f"queue {self.queue.path} is a replication sink: chronicle.append.lock is held "
            f"by process {holder}")

    def _refuse_if_sink(self) -> None:
        """Refuse (AppendLockedError) before a roll creates a file or writes an
        EOF when another live process holds ``chronicle.append.lock`` (a
        replication sink), as Java checks it before rolling."""
        meta = self.queue._meta
        value = meta.get("chronicle.append.lock") if meta is not None else None
        if value is not None and value != UNLOCKED and _lock_holder(value) != os.getpid():
            self._check_append_lock()

    def _wait_lock(self) -> None:
        self.queue._wait_write_lock()

    def _lock(self) -> None:
        self.queue._lock_write()

    def _unlock(self) -> None:
        self.queue._unlock_write()

    def _roll(self, want: int | None, after_eof: bool = False) -> None:
        """Move to the cycle the clock asks for, closing older cycles with EOF."""
        q = self.queue
        q._check_open()
        self._lock()
        try:
            clock = q.current_cycle()
            target = clock if want is None else max(want, clock)
            # the listing is fresh by listing.modCount, which every creator of a
            # cycle file bumps (Java too): no directory scan per roll
            cycles = q.cycles()
            # never write behind a newer cycle that already holds data (another
            # writer's clock is ahead); an empty pre-created file does not count
            for newer in reversed(cycles[bisect.bisect_right(cycles, target):]):
                if self._cycle_has_content(newer):
                    target = newer
                    break
            cur = self._store
            if cur is not None and after_eof and target <= cur.cycle:
                target = cur.cycle + 1
            while True:
                q._normalise_eofs(target, cycles)
                st = q._acquire_store(target, create=True)
                assert st is not None
                if not st.end()[2]:
                    break
                q._release_store(st)
                target += 1
                cycles = q.cycles()
            self._set_store(st)
        finally:
            self._unlock()

    def _cycle_has_content(self, cycle: int) -> bool:
        st = self.queue._acquire_store(cycle)
        if st is None:
            return False
        try:
            _, count, eof = st.end()
            return count > 0 or eof
        finally:
            self.queue._release_store(st)

    def _set_store(self, st: CycleStore) -> None:
        if st.layout.headerless:
            self.queue._release_store(st)
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
        self._refresh_append_lock()
        if old is not None:
            self.queue._release_store(old)

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
        rc_ = self.queue.roll_cycle
        cycle, seq = rc_.to_cycle(index), rc_.to_sequence(index)
        if type(data) is not bytes:
            data = self._coerce(data)
        c = self._c
        for _ in range(10_000):
            st = self._store
            if st is None or st.cycle < cycle:
                self._roll_to(cycle)
                continue
            if st.cycle > cycle:
                older = self.queue._acquire_store(cycle)
                count = 0
                if older is not None:
                    try:
                        count = older.end()[1]
                    finally:
                        self.queue._release_store(older)
                if seq < count:
                    return False
                raise IllegalIndexError(
                    f"cannot write {index:#x}: cycle {cycle} is closed (this queue writes "
                    f"cycle {st.cycle})")
            r = lib.cq_append_at(c, data, len(data), seq)
            if r >= 0:
                return True
            if r == lib.CQ_DUPLICATE:
                return False
            if r == lib.CQ_GAP:
                raise IllegalIndexError(
                    f"cannot write {index:#x}: earlier excerpts of cycle {cycle} are missing "
                    f"(next is {rc_.to_index(cycle, st.end()[1]):#x})")
            if r == lib.CQ_EOF:
                older = self.queue._acquire_store(cycle)
                try:
                    count = older.end()[1] if older is not None else 0
                finally:
                    self.queue._release_store(older)
                if seq < count:
                    return False
                raise IllegalIndexError(f"cannot write {index:#x}: cycle {cycle} is closed")
            self._handle(int(r), len(data))
        raise ChronicleError("positioned write did not settle")

    def _roll_to(self, cycle: int) -> None:
        """Move to ``cycle`` (creating it) regardless of the clock, closing every
        older cycle that lacks an EOF."""
        q = self.queue
        q._check_open()
        self._refuse_if_sink()
        self._lock()
        try:
            q._invalidate_listing()
            q._normalise_eofs(cycle, q.cycles())
            st = q._acquire_store(cycle, create=True)
            assert st is not None
            self._set_store(st)
        finally:
            self._unlock()

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
        c = self._c
        buf = data if type(data) is bytes else ffi.from_buffer(data)
        offs = ffi.from_buffer("int64_t[]", offsets)
        done = ffi.new("uint64_t *")
        start = 0
        batch = 4096
        guard = 0
        while start < n:
            k = min(batch, n - start)
            if self._py_clock is not None:
                c.clock_cell[0] = self._py_clock.current_time_millis()
            rc = lib.cq_append_batch(c, buf, offs + start, k, done)
            start += int(done[0])
            if rc != 0:
                guard += 1
                if guard > 10_000:
                    raise ChronicleError(f"append did not settle (last code {rc})")
                self._handle(rc, int(offsets[start + 1] - offsets[start]) if start < n else 0)
        return int(c.last_index)

    def writing_document(self, metadata: bool = False) -> DocumentContext:
        """Write one excerpt in place: holds the write lock until the block ends;
        commits on a clean exit, rolls back when the block raises."""
        c = self._c
        for _ in range(10_000):
            if self._py_clock is not None:
                c.clock_cell[0] = self._py_clock.current_time_millis()
            rc = lib.cq_doc_begin(c, 0, 1 if metadata else 0)
            if rc == 0:
                return DocumentContext(self, metadata)
            self._handle(rc, 0, metadata)
        raise ChronicleError("could not open a document")

    def _doc_ensure(self, length: int) -> None:
        c = self._c
        while True:
            rc = lib.cq_doc_ensure(c, length)
            if rc == 0:
                return
            if rc == lib.CQ_NEED_MAP:
                assert self._store is not None
                self._store.file.ensure(int(c.need))
                continue
            self._handle(rc, length)

    def _doc_commit(self, length: int, metadata: bool) -> int | None:
        c = self._c
        self._doc_ensure(length)
        rc = lib.cq_doc_commit(c, length)
        if rc != 0:
            self._handle(rc, length)
        return None if metadata else int(c.last_index)

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
        meta = self.queue._meta
        if last >= 0 and meta is not None:
            lib.cq_max64(meta.file.ptr(meta.acquire("chronicle.lastIndexMSynced", -1)), last)

    def _count_synced(self, index: int) -> int:
        """After an append with a sync mode: msync when ``sync_every`` or
        ``sync_interval_ms`` says so."""
        self._since_sync += 1
        q = self.queue
        if (self._since_sync >= q.sync_every
                or (q.sync_interval_ms is not None
                    and (time.monotonic() - self._last_sync) * 1000 >= q.sync_interval_ms)):
            self.sync(wait=q.sync_mode is SyncMode.SYNC)
        return index

    # -- replication acknowledgements -------------------------------------
    def _acked_target(self, index: int | None) -> tuple[Any, int]:
        meta = self.queue._meta
        self.queue._check_open()
        assert meta is not None
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
        import asyncio

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
            self.queue._check_open()
            value = int(cell[0])
            if value >= target:
                return value
            now = loop.time()
            if deadline is not None and now >= deadline:
                _raise_replication_timeout(self.queue, target, value, timeout)
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
                _raise_replication_timeout(self.queue, target, value, timeout)
            time.sleep(delay if deadline is None else min(delay, deadline - now))
            delay = min(delay * 2, 1e-3)
            self.queue._check_open()


ACK_KEY = "chronicle.lastAcknowledgedIndexReplicated"


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


def _raise_replication_timeout(queue: Queue, target: int, value: int,
                               timeout: float | None) -> None:
    from ._replication import ReplicationTimeoutError

    raise ReplicationTimeoutError(
        f"no replica of {queue.path} acknowledged {target:#x} within {timeout}s "
        f"(last acknowledged: {value:#x})" if value >= 0 else
        f"no replica of {queue.path} acknowledged {target:#x} within {timeout}s "
        f"(none acknowledged yet)")


class Batch:
    """Excerpts read in one native call: payloads packed back to back.

    ``offsets`` has ``len(batch) + 1`` entries (Arrow's binary layout) and
    ``indices`` one per excerpt.
    """

    __slots__ = ("data", "indices", "offsets")

    def __init__(self, data: memoryview, offsets: array[int], indices: array[int]) -> None:
        self.data = data
        self.offsets = offsets
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Excerpt:
        o = self.offsets
        return Excerpt(self.indices[i], bytes(self.data[o[i]:o[i + 1]]))

    def __iter__(self) -> Iterator[Excerpt]:
        for i in range(len(self.indices)):
            yield self[i]

    def __repr__(self) -> str:
        n = len(self.indices)
        if not n:
            return "<Batch empty>"
        size = self.offsets[n] - self.offsets[0]
        return (f"<Batch {n} excerpts, {size} bytes, "
                f"{self.indices[0]:#x}..{self.indices[n - 1]:#x}>")

    def payloads(self) -> list[bytes]:
        """Every payload as bytes."""
        o, d = self.offsets, self.data
        return [bytes(d[o[i]:o[i + 1]]) for i in range(len(self.indices))]


class Tailer(HotTailer, AsyncTailerMixin, _Resource):
    """Reads excerpts in index order; never consumes them.

    ``read_nowait()`` returns the next :class:`Excerpt` or None when there is
    nothing new yet.  A tailer belongs to one thread (or one event loop) at a
    time; any number of tailers can read the same queue.  Closing it, or its
    queue, is safe from any thread: a read in progress finishes, the next one
    raises :class:`QueueClosedError`.
    """

    def __init__(self, queue: Queue, name: str | None, direction: TailerDirection,
                 include_metadata: bool) -> None:
        self.queue = queue
        """The queue this object belongs to."""
        self.name = name
        """The named tailer's name (its position is kept as ``index.<name>``), or None."""
        self._store: CycleStore | None = None
        self._kept: CycleStore | None = None  # after close: keeps the mapping alive
        c = ffi.new("cq_tailer *")
        self._c: Any = c
        self._scratch: Any = ffi.new("char[]", SCRATCH)
        c.scratch = self._scratch
        c.scratch_cap = SCRATCH
        # struct fields read on the hot path go through a memoryview: far
        # cheaper than cffi attribute access
        self._out = memoryview(ffi.buffer(c)).cast("q")
        c.queue_shift = queue.roll_cycle.cycle_shift
        c.include_meta = 1 if include_metadata else 0
        self._direction = TailerDirection(direction)
        self._bind_native(int(ffi.cast("uintptr_t", c)), self._direction == 1)
        self._cycle: int | None = None  # cycle of the position when no store is held
        self._closed = False
        self._batch_buf: bytearray | None = None
        self._named_off: int | None = None
        self._saved = 0  # the value of index.<name> as this tailer last wrote it
        self._last_mod = -2
        self._before_start = False
        if name is not None:
            meta = queue._meta
            if meta is None or queue.read_only:
                raise ReadOnlyQueueError("a named tailer needs a writable metadata.cq4t")
            self._named_off = meta.acquire(f"index.{name}", 0)
            stored = meta.file.load64(self._named_off)
            self._saved = stored
            if stored:
                if not self.move_to_index(stored):
                    self._position_at(queue.roll_cycle.to_cycle(stored),
                                      queue.roll_cycle.to_sequence(stored))
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
        if clean and not self._closed and not self.queue.closed:
            self._save()
        self._detach()

    def _detach(self) -> None:
        if self._closed:
            return
        self._closed = True
        # as Appender._detach: the native struct and this object keep the store
        # (a read in flight on another thread goes on safely); the flag turns
        # every later native call away with CQ_BAD_STATE
        self._c.closed = 1
        self._abort_wait()  # end a spin/park in progress first (_aio)
        st, self._store = self._store, None
        _keep_if_threaded(self, st)
        if st is not None and not self.queue.closed:
            self.queue._release_store(st)

    def _check(self) -> None:
        if self._closed:
            raise QueueClosedError("the tailer is closed")
        self.queue._check_open()

    # -- position --------------------------------------------------------
    @property
    def direction(self) -> TailerDirection:
        """FORWARD, BACKWARD or NONE."""
        return self._direction

    @direction.setter
    def direction(self, value: TailerDirection) -> None:
        value = TailerDirection(value)
        if value != self._direction and self._store is not None:
            self._before_start = False
            # re-seek so the cursor's byte position matches its sequence
            self._position_at(self._store.cycle, int(self._c.seq))
        self._direction = value
        self._bind_native(int(ffi.cast("uintptr_t", self._c)), value == 1)

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
        return self.queue.roll_cycle.to_index(cyc, int(self._c.seq))

    def _use_store(self, st: CycleStore | None, cycle: int | None) -> None:
        old = self._store
        self._store = st
        self._cycle = cycle
        c = self._c
        c.store = st.file.c if st is not None else ffi.NULL
        c.dropped = 0
        if old is not None and old is not st:
            self.queue._release_store(old)

    def _position_at(self, cycle: int, seq: int, pos: int = 0) -> None:
        """Hold ``cycle``'s store (if it exists) with the cursor at (pos, seq)."""
        self._before_start = False
        if self._store is not None and self._store.cycle == cycle:
            st: CycleStore | None = self._store
        else:
            st = self.queue._acquire_store(cycle)
            self._use_store(st, cycle)
        self._cycle = cycle
        c = self._c
        c.pos = pos
        c.seq = seq
        if st is not None and pos == 0 and seq:
            code, p = st.seek(seq)
            if code in (lib.CQ_OK, lib.CQ_NOT_REACHED):
                c.pos = p

    def _save(self, index: int | None = None) -> None:
        """Named tailers: persist ``index`` (default: the current position) as
        ``index.<name>``, the index a restarted tailer reads first."""
        if self._named_off is not None:
            value = self.index if index is None else index
            if value != self._saved:
                meta = self.queue._meta
                assert meta is not None
                meta.file.store64(self._named_off, value)
                self._saved = value

    def _handed(self, ex: Excerpt | None) -> None:
        """Named tailers, at-least-once: while an excerpt is handed out the saved
        position stays *at* it (a restart after a crash mid-processing reads it
        again); the next read, by asking for more, marks it done."""
        if self._named_off is not None:
            self._save(ex.index if ex is not None else None)

    def to_start(self) -> Tailer:
        """Move to the first excerpt of the queue."""
        self._check()
        first = self.queue.first_cycle
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

    def to_end(self) -> Tailer:
        """FORWARD: move past the last excerpt (the next read returns the next one
        written).  BACKWARD: move to the last excerpt."""
        self._check()
        q = self.queue
        cycles = q.cycles()
        if not cycles:
            self._use_store(None, None)
            self._c.seq = 0
            self._c.pos = 0
            return self
        if self._direction == TailerDirection.BACKWARD:
            for cyc in reversed(cycles):
                n = q._cycle_count(cyc)
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

    def move_to_index(self, index: int) -> bool:
        """Position at ``index``; True if an excerpt exists there.

        When ``index`` is exactly the next one to be written the tailer is left
        there and False is returned, so the next read returns it once written.
        """
        self._check()
        rc = self.queue.roll_cycle
        try:
            cycle, seq = rc.to_cycle(index), rc.to_sequence(index)
        except ValueError:
            return False
        st = self.queue._acquire_store(cycle)
        if st is None:
            return False
        code, pos = st.seek(seq)
        if code not in (lib.CQ_OK, lib.CQ_NOT_REACHED):
            self.queue._release_store(st)
            return False
        if self._store is st:
            self.queue._release_store(st)
        else:
            self._use_store(st, cycle)
        self._c.pos = pos
        self._c.seq = seq
        self._before_start = False
        self._save()
        return bool(code == lib.CQ_OK)

    def move_to_cycle(self, cycle: int) -> bool:
        """Position at the first excerpt of ``cycle``; False if it has no file."""
        self._check()
        st = self.queue._acquire_store(cycle)
        if st is None:
            return False
        if self._store is st:
            self.queue._release_store(st)
        else:
            self._use_store(st, cycle)
        self._c.pos = 0
        self._c.seq = 0
        self._before_start = False
        self._save()
        return True

    # -- reading ---------------------------------------------------------
    if TYPE_CHECKING:
        def read_nowait(self) -> Excerpt | None:
            """The next excerpt, or None if none has been written yet.

            Forward reads run in C (``native/hot.c``); a roll, a remap, other
            directions and errors come back to Python.
            """


    def _read_slow(self, n: int) -> Excerpt | None:
        c = self._c
        for _ in range(1000):
            if n >= 0:
                return _tuple_new(Excerpt, (int(c.index), _unpack(c.data, n)))
            if n == lib.CQ_NONE:
                return None
            if n == lib.CQ_BAD_STATE:
                self._check()
                if not self._find_first_store():
                    return None
            elif n == lib.CQ_EOF:
                if not self._next_cycle():
                    return None
            elif n == lib.CQ_NEED_MAP:
                st = self._store
                assert st is not None
                need = int(c.need)
                if not st.file.ensure(need, grow=False):
                    if need == int(c.err_pos) + 4:
                        return None
                    raise CorruptQueueError("an excerpt runs past the end of the file",
                                            st.path, int(c.err_pos))
            elif n == lib.CQ_CORRUPT:
                st = self._store
                raise CorruptQueueError("corrupt excerpt header",
                                        st.path if st else self.queue.path, int(c.err_pos))
            else:
                raise ChronicleError(f"native read failed with code {n}")
            n = _cq_read(c)
        return None

    def _find_first_store(self) -> bool:
        """With no store held (empty queue, or a cycle without a file): find one."""
        q = self.queue
        cyc = self._cycle
        if cyc is None:
            first = q.first_cycle
            if first is None:
                return False
            self._position_at(first, 0)
            return self._store is not None
        st = q._acquire_store(cyc)
        if st is not None:
            seq = int(self._c.seq)
            self._use_store(st, cyc)
            self._position_at(cyc, seq)
            return True
        nxt = q._next_cycle(cyc, 1)
        if nxt is None:
            return False
        self._position_at(nxt, 0)
        return self._store is not None

    def _next_cycle(self) -> bool:
        """At an EOF: move to the next cycle that has a file."""
        st = self._store
        assert st is not None
        q = self.queue
        mod = q._meta.get("listing.modCount") if q._meta is not None else None
        nxt = q._next_cycle(st.cycle, 1)
        if nxt is None:
            if mod is not None and mod == self._last_mod:
                return False
            self._last_mod = mod if mod is not None else -2
            return False
        self._position_at(nxt, 0)
        self._save()
        return self._store is not None

    def _read_other(self) -> Excerpt | None:
        if self._direction == TailerDirection.NONE:
            return self._peek()
        return self._read_backward()

    def _read_at(self, st: CycleStore, seq: int, pos: int) -> Excerpt:
        """Read the data excerpt whose header is at ``pos``."""
        c = self._c
        c.pos = pos
        c.seq = seq
        n = _cq_read(c)
        while n == lib.CQ_NEED_MAP and st.file.ensure(int(c.need), grow=False):
            c.pos = pos
            c.seq = seq
            n = _cq_read(c)
        if n < 0:
            raise CorruptQueueError("cannot read an indexed excerpt", st.path, pos)
        return Excerpt(int(c.index), _unpack(c.data, n))

    def _peek(self) -> Excerpt | None:
        """Direction NONE: the excerpt at the current index, without moving."""
        self._check()
        st = self._store
        if st is None:
            return None
        seq = int(self._c.seq)
        code, pos = st.seek(seq)
        if code != lib.CQ_OK:
            return None
        ex = self._read_at(st, seq, pos)
        self._c.pos = pos
        self._c.seq = seq
        return ex

    def _read_backward(self) -> Excerpt | None:
        self._check()
        q = self.queue
        c = self._c
        while True:
            st = self._store
            if st is None or self._before_start:
                return None
            seq = int(c.seq)
            code, pos = st.seek(seq)
            if code == lib.CQ_OK:
                ex = self._read_at(st, seq, pos)
                self._step_back(seq)
                return ex
            count = st.end()[1]
            if 0 < count <= seq:
                # past the end (e.g. after to_end()): start from the last excerpt
                c.seq = count - 1
                continue
            # before the start of this cycle: go to the end of the previous one
            prev = q._next_cycle(st.cycle, -1)
            while prev is not None and q._cycle_count(prev) == 0:
                prev = q._next_cycle(prev, -1)
            if prev is None:
                return None
            self._position_at(prev, q._cycle_count(prev) - 1)

    def _step_back(self, seq: int) -> None:
        c = self._c
        if seq > 0:
            c.seq = seq - 1
            c.pos = 0
            self._save()
            return
        # moving before sequence 0: remember it by pointing at the previous cycle
        q = self.queue
        st = self._store
        assert st is not None
        prev = q._next_cycle(st.cycle, -1)
        while prev is not None and q._cycle_count(prev) == 0:
            prev = q._next_cycle(prev, -1)
        if prev is None:
            self._before_start = True
            return
        self._position_at(prev, q._cycle_count(prev) - 1)
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
            return _batch_of(items)
        c = self._c
        sc = self._batch_scratch
        if sc is None or sc.max_bytes < max_bytes or sc.max_count < max_count:
            if sc is not None:
                sc.release()
            sc = self._batch_scratch = _BatchScratch(max(max_bytes, 1), max(max_count, 1))
        n_out = sc.n_out
        rc = lib.cq_read_batch(c, sc.pdata, max_bytes, sc.poffsets, sc.pindices, max_count,
                               n_out)
        n = int(n_out[0])
        if n:
            if self._named_off is not None:
                self._save(int(sc.pindices[0]))
            return sc.take(n, self)
        if rc == lib.CQ_NONE:
            self._handed(None)
            return _batch_of([])
        # too large for the buffer, a roll, a remap or an error: one single read
        ex = Tailer.read_nowait(self) if rc == lib.CQ_TOO_LARGE else self._read_slow(int(rc))
        self._handed(ex)
        return _batch_of([ex] if ex is not None else [])

    _batch_scratch: _BatchScratch | None = None

    # -- replication: only what a replica acknowledged ---------------------
    _ack_cell: Any = None
    _ungated_read: Callable[[], Excerpt | None] | None = None

    @property
    def read_after_replica_acknowledged(self) -> bool:
        """When True, reads return only excerpts whose index is at most
        ``chronicle.lastAcknowledgedIndexReplicated``, the highest index a
        replication sink has acknowledged (Java's
        ``readAfterReplicaAcknowledged``; Java's default check is ``index ==
        lastAck`` within a cycle, this one is ``index <= lastAck``).  Until
        then the excerpt reads as not written yet; ``await read()`` and
        ``read_blocking()`` wait for the acknowledgement with the pauser.

        Setting it swaps this tailer's read methods for checked ones, so
        tailers without it pay nothing.
        """
        return self._ack_cell is not None

    @read_after_replica_acknowledged.setter
    def read_after_replica_acknowledged(self, value: bool) -> None:
        self._check()
        if bool(value) == (self._ack_cell is not None):
            return
        d = self.__dict__
        if value:
            meta = self.queue._meta
            if meta is None or (self.queue.read_only and meta.offset(ACK_KEY) is None):
                raise ReadOnlyQueueError(f"queue {self.queue.path} has no {ACK_KEY} value")
            self._ack_cell = meta.ptr(ACK_KEY, -1)
            self._ungated_read = d.get("read_nowait")
            d["read_nowait"] = self._read_acked
            d["read_many"] = self._read_many_acked
            d["read"] = self._read_acked_async
            d["read_blocking"] = self._read_blocking_acked
        else:
            self._ack_cell = None
            inner = self._ungated_read
            self._ungated_read = None
            if inner is not None:
                d["read_nowait"] = inner
            else:
                d.pop("read_nowait", None)
            for attr in ("read_many", "read", "read_blocking"):
                d.pop(attr, None)

    def _acked_limit(self) -> int | None:
        """The highest readable index, or None when nothing may be read now."""
        if self._closed or self.queue._closed:
            self._check()
        ack = int(self._ack_cell[0])
        if ack < 0 or (self._direction == TailerDirection.FORWARD and self.index > ack):
            return None
        return ack

    def _read_acked(self) -> Excerpt | None:
        ack = self._acked_limit()
        if ack is None:
            return None
        inner = self._ungated_read
        ex = inner() if inner is not None else type(self).read_nowait(self)
        if ex is not None and ex.index > ack:
            self.move_to_index(ex.index)  # not acknowledged yet: read it again later
            return None
        return ex

    def _read_many_acked(self, max_count: int = 65536, max_bytes: int = 1 << 20) -> Batch:
        ack = self._acked_limit()
        if ack is None:
            return _batch_of([])
        rc = self.queue.roll_cycle
        if self._direction == TailerDirection.FORWARD and self.cycle == rc.to_cycle(ack):
            max_count = max(1, min(max_count, ack - self.index + 1))
        b = Tailer.read_many(self, max_count, max_bytes)
        idx = b.indices
        if len(idx) and idx[-1] > ack:
            k = next(i for i, x in enumerate(idx) if x > ack)
            self.move_to_index(idx[k])
            o = b.offsets
            return Batch(b.data[:o[k]], o[:k + 1], idx[:k])
        return b

    async def _read_acked_async(self) -> Excerpt:
        if self._unyielded >= self.checkpoint_every:
            self._unyielded = 0
            await _loop_turn(0)
        ex = self.read_nowait()
        if ex is not None:
            self._unyielded += 1
            return ex
        pauser = self.pauser
        pauser.reset()
        while True:
            await pauser.apause()
            ex = self.read_nowait()
            if ex is not None:
                self._unyielded = 1
                return ex

    def _read_blocking_acked(self, timeout: float | None = None) -> Excerpt | None:
        ex = self.read_nowait()
        if ex is not None:
            return ex
        pauser = self.pauser
        pauser.reset()
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:
            pauser.pause()
            ex = self.read_nowait()
            if ex is not None:
                return ex
        return None

    def method_reader(self, *handlers: object,
                      on_error: Callable[[Exception, Excerpt], None] | None = None,
                      ignore_first_arg: Callable[[str, Any], bool] | None = None,
                      history: bool | None = None,
                      interfaces: Iterable[type] = (),
                      batch: bool | None = None) -> MethodReader:
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
        """
        from ._methods import MethodReader

        return MethodReader(self, *handlers, on_error=on_error,
                            ignore_first_arg=ignore_first_arg, history=history,
                            interfaces=interfaces, batch=batch)

    def __iter__(self) -> Iterator[Excerpt]:
        """Iterate over the excerpts available now (stops at the current end)."""
        while True:
            ex = self.read_nowait()
            if ex is None:
                return
            yield ex


class _NamedTailer(Tailer):
    """A named tailer (``Queue.tailer(name)``): its position persists in
    ``metadata.cq4t`` as ``index.<name>``, at least once (see :meth:`Tailer._handed`)."""

    def read_nowait(self) -> Excerpt | None:
        """The next excerpt, or None if none has been written yet."""
        ex = Tailer.read_nowait(self)
        self._handed(ex)
        return ex


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
        self.n_out = ffi.new("uint64_t *")
        self.pdata = ffi.from_buffer(self.data)
        self.poffsets = ffi.from_buffer("int64_t[]", self.offsets)
        self.pindices = ffi.from_buffer("int64_t[]", self.indices)

    def release(self) -> None:
        for p in (self.pdata, self.poffsets, self.pindices):
            ffi.release(p)

    def take(self, n: int, tailer: Tailer) -> Batch:
        """The first ``n`` excerpts read, as a Batch the caller owns."""
        used = self.offsets[n]
        if used >= self.HAND_OFF or n >= 4096:
            # the buffers themselves (no copy); the tailer makes new ones next time
            self.release()
            tailer._batch_scratch = None
            offsets, indices = self.offsets, self.indices
            del offsets[n + 1:]
            del indices[n:]
            return Batch(memoryview(self.data)[:used], offsets, indices)
        return Batch(memoryview(bytes(memoryview(self.data)[:used])), self.offsets[:n + 1],
                     self.indices[:n])


def _batch_of(items: list[Excerpt]) -> Batch:
    offsets = array("q", [0])
    total = 0
    for ex in items:
        total += len(ex.payload)
        offsets.append(total)
    data = memoryview(b"".join(ex.payload for ex in items))
    return Batch(data, offsets, array("q", [ex.index for ex in items]))


def open_queue(path: str | os.PathLike[str], *, roll_cycle: RollCycle | str | None = None,
               epoch: int | None = None, time_provider: TimeProvider | None = None,
               read_only: bool = False, block_size: int = 64 << 20,
               index_count: int | None = None, index_spacing: int | None = None,
               timeout: float = 10.0, week_rule: str = "US", source_id: int = 0,
               lock_timeout: float | None = None,
               unlock_mode: UnlockMode = UnlockMode.LOCKING_PROCESS_DEAD,
               sync: SyncMode = SyncMode.NONE, sync_every: int = 1,
               sync_interval_ms: float | None = None) -> Queue:
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
        sync_interval_ms: ... or when this many milliseconds have passed.

    Raises:
        ValueError: a setting out of range (a negative timeout, an index count
            or spacing below 1, a ``source_id`` outside 0..2**31-1...).
        UnknownRollCycleError: a roll cycle name that is not a built-in one.
        TypeError: a ``roll_cycle`` or ``time_provider`` of the wrong type.
        CorruptQueueError: the directory holds files that are not a queue's.
    """
    return Queue(path, roll_cycle=roll_cycle, epoch=epoch, time_provider=time_provider,
                 read_only=read_only, block_size=block_size, index_count=index_count,
                 index_spacing=index_spacing, timeout=timeout, week_rule=week_rule,
                 source_id=source_id, lock_timeout=lock_timeout, unlock_mode=unlock_mode,
                 sync=sync, sync_every=sync_every, sync_interval_ms=sync_interval_ms)
