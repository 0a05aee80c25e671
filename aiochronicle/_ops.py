"""Queue operations: statistics, consistency check and repair, lock recovery,
retention, and file-lifecycle listeners.

Everything the ``aiochronicle`` command line does beyond reading and writing
excerpts is here as a library API, so a service can run it too::

    import aiochronicle as ac

    print(ac.queue_stats("/data/md").total_excerpts)
    for finding in ac.check_queue("/data/md"):
        print(finding)
    plan = ac.Retention("/data/md", max_age=7 * 86400).apply()

With a queue open in-process, :func:`add_store_file_listener` reports every
cycle file the queue opens and closes (Java's ``StoreFileListener``), and a
:class:`Retention` is such a listener: it runs whenever a cycle is released,
so old cycles go as soon as the appender rolls past them.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import queue as _queue_mod
import re
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ._dump import RawDocument
from ._errors import (
    ChronicleError,
    CorruptQueueError,
    NoSuchIndexError,
    NotAQueueError,
    QueueBusyError,
)
from ._headerless import HEADERLESS_LIMITATION
from ._mapped import list_dir, open_regular
from ._native import HDR_EOF, HDR_META, HDR_NOT_COMPLETE, UNLOCKED
from ._native import HDR_LENGTH_MASK as LENGTH_MASK
from ._queue import Queue, is_queue_dir, open_existing_queue
from ._rollcycles import (
    CycleNamer,
    RollCycle,
    RollCycles,
    candidate_roll_cycles,
    cycle_shift_for,
    make_roll_cycle,
    misnamed_cycle_files,
)
from ._settings import INITIAL_KEYS, METADATA_FILE, metadata_header
from ._store import CycleStore, open_store, store_image, unwritten_age
from ._tablestore import TableStore, salvage_table_store
from ._wire import Document, I64Array, WireError, parse_document
from ._writelock import APPEND_LOCK, WRITE_LOCK, pid_alive

__all__ = [
    "CheckFinding",
    "CycleStats",
    "LockState",
    "NoSuchIndexError",
    "NotAQueueError",
    "QueueBusyError",
    "QueueStats",
    "Retention",
    "RetentionDecision",
    "StoreFileListener",
    "TailerStats",
    "add_store_file_listener",
    "check_queue",
    "files_open_by_processes",
    "lock_states",
    "open_existing_queue",
    "parse_index",
    "queue_stats",
    "repair_queue",
    "unlock_queue",
]

LOCK_KEYS = (WRITE_LOCK, APPEND_LOCK)
_U64 = (1 << 64) - 1

Progress = Callable[[int, int], None]


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------


def parse_index(text: str) -> int:
    """A queue index written as hex (``0x4a0500000000``) or decimal.

    Raises:
        ValueError: the text is neither, or the index is negative.
    """
    s = text.strip().lower().replace("_", "")
    try:
        value = int(s, 16) if s.startswith(("0x", "-0x")) else int(s, 10)
    except ValueError:
        raise ValueError(
            f"bad index {text!r}: expected hex (0x4a0500000000) or decimal") from None
    if value < 0 or value >= 1 << 63:
        raise ValueError(f"bad index {text!r}: must be between 0 and 2**63-1")
    return value




def _disk_bytes(st: os.stat_result) -> int:
    return int(getattr(st, "st_blocks", 0)) * 512 or st.st_size


def _cycle_files(q: Queue) -> list[tuple[int, str]]:
    return [(c, q.cycle_path(c)) for c in q.cycles()]


# --------------------------------------------------------------------------
# stats
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CycleStats:
    """One cycle file."""

    cycle: int
    path: str
    excerpts: int
    bytes_used: int  # position after the last document
    file_size: int  # apparent size (sparse)
    disk_bytes: int  # allocated on disk
    first_index: int | None
    last_index: int | None
    eof: bool


@dataclass(frozen=True, slots=True)
class TailerStats:
    """A named tailer's position and how far behind the end it is."""

    name: str
    key: str
    index: int  # the next index it will read (0: not started)
    lag_messages: int
    lag_bytes: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What :func:`queue_stats` reports."""

    path: str
    roll_cycle: str
    epoch: int
    cycles: list[CycleStats]
    tailers: list[TailerStats]
    locks: list[LockState]
    first_index: int | None
    last_index: int | None

    @property
    def total_excerpts(self) -> int:
        """Excerpts in all cycles (index pages and other metadata not counted)."""
        return sum(c.excerpts for c in self.cycles)

    @property
    def total_bytes(self) -> int:
        """Bytes written in all cycle files (up to each file's write position)."""
        return sum(c.bytes_used for c in self.cycles)

    @property
    def disk_bytes(self) -> int:
        """Disk blocks the cycle files take (they are sparse: less than their size)."""
        return sum(c.disk_bytes for c in self.cycles)

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {
            "path": self.path, "roll_cycle": self.roll_cycle, "epoch": self.epoch,
            "first_index": self.first_index, "last_index": self.last_index,
            "total_excerpts": self.total_excerpts, "total_bytes": self.total_bytes,
            "disk_bytes": self.disk_bytes,
            "cycles": [
                {"cycle": c.cycle, "file": os.path.basename(c.path), "excerpts": c.excerpts,
                 "bytes": c.bytes_used, "file_size": c.file_size, "disk_bytes": c.disk_bytes,
                 "first_index": c.first_index, "last_index": c.last_index, "eof": c.eof}
                for c in self.cycles],
            "tailers": [
                {"name": t.name, "index": t.index, "lag_messages": t.lag_messages,
                 "lag_bytes": t.lag_bytes} for t in self.tailers],
            "locks": [
                {"key": lk.key, "holder": lk.holder, "alive": lk.alive} for lk in self.locks],
        }


def _named_tailer_keys(meta: TableStore | None) -> list[tuple[str, str, int]]:
    """(name, key, stored index) of every named tailer in the metadata."""
    if meta is None:
        return []
    out = []
    for key, value in meta.keys():  # noqa: SIM118
        if not key.startswith("index.") or key.endswith((".version", ".lock")):
            continue
        out.append((key[len("index."):], key, value))
    return out


#: what :func:`queue_stats` remembers of a cycle that has ended (EOF written):
#: cycle -> ((device, inode, size) of its file, its figures, where its first excerpt is)
SealedCycles = dict[int, tuple[tuple[int, int, int], CycleStats, int]]


def queue_stats(path: str | Queue, *, sealed: SealedCycles | None = None) -> QueueStats:
    """Cycles, excerpt counts, bytes, first/last index per cycle, locks, and each
    named tailer's lag in messages and bytes.

    The cost is O(cycles), never O(excerpts): each cycle's end is found from
    its write position, a named tailer's position from the index.  Nothing is
    locked or written.  ``sealed``, a dict kept from one call to the next (a
    monitor's), remembers the figures of cycles that have ended, so that only
    the cycles still written are opened again (the rest cost a ``stat``).
    """
    own = not isinstance(path, Queue)
    q = open_existing_queue(path) if isinstance(path, str) else path
    try:
        rc = q.roll_cycle
        cycles: list[CycleStats] = []
        ends: dict[int, tuple[int, int]] = {}  # cycle -> (end pos, first excerpt's pos)
        for cyc in q.cycles():
            known = sealed.get(cyc) if sealed is not None else None
            p = known[1].path if known is not None else q.cycle_path(cyc)
            try:
                fs = os.stat(p)
            except FileNotFoundError:
                continue
            key = (fs.st_dev, fs.st_ino, fs.st_size)
            if known is not None and known[0] == key:
                cycles.append(known[1])
                ends[cyc] = (known[1].bytes_used, known[2])
                continue
            st = q._acquire_store(cyc)
            if st is None:
                cycles.append(CycleStats(cyc, p, 0, 0, fs.st_size, _disk_bytes(fs), None, None,
                                         False))
                continue
            try:
                end, count, eof = st.end()
                # where its first excerpt starts (after the index pages)
                code, start_pos = st.seek(0) if count else (1, end)
                ends[cyc] = (end, start_pos if code == 0 else end)
            finally:
                q._release_store(st)
            cs = CycleStats(
                cyc, p, count, end, fs.st_size, _disk_bytes(fs),
                rc.to_index(cyc, 0) if count else None,
                rc.to_index(cyc, count - 1) if count else None, eof)
            cycles.append(cs)
            if sealed is not None and eof:
                sealed[cyc] = (key, cs, ends[cyc][1])
        if sealed is not None:
            for gone in set(sealed) - set(ends):
                del sealed[gone]
        counts = {c.cycle: c.excerpts for c in cycles}
        first = next((c.first_index for c in cycles if c.first_index is not None), None)
        last = next((c.last_index for c in reversed(cycles) if c.last_index is not None), None)
        tailers = []
        for name, key_, stored in _named_tailer_keys(q._meta):
            index = stored
            if last is None:
                tailers.append(TailerStats(name, key_, index, 0, 0))
                continue
            start = index if index else (first if first is not None else 0)
            try:
                tc, ts = rc.to_cycle(start), rc.to_sequence(start)
            except ValueError:
                tc, ts = -1, 0
            # as q.count_excerpts(start, last + 1), from the counts already found
            lag = sum(n if c > tc else max(0, n - ts) for c, n in counts.items() if c >= tc)
            lag_bytes = 0
            for cyc, (end, first_pos) in ends.items():
                if cyc > tc:
                    lag_bytes += max(0, end - first_pos)
                elif cyc == tc:
                    st = q._acquire_store(cyc)
                    if st is None:
                        continue
                    try:
                        code, pos = st.seek(ts)
                    finally:
                        q._release_store(st)
                    if code == 0:
                        lag_bytes += max(0, end - pos)
            tailers.append(TailerStats(name, key_, index, lag, lag_bytes))
        return QueueStats(q.path, rc.name, q.epoch, cycles, tailers, _lock_states(q._meta),
                          first, last)
    finally:
        if own:
            q.close()


# --------------------------------------------------------------------------
# locks
# --------------------------------------------------------------------------


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


def _lock_states(meta: TableStore | None) -> list[LockState]:
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


def _open_meta(path: str, *, writable: bool) -> TableStore:
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such queue: {path}")
    meta_path = os.path.join(path, METADATA_FILE)
    if not os.path.isfile(meta_path):
        if os.path.isdir(path) and is_queue_dir(path):
            raise NotAQueueError(f"{path} has no {METADATA_FILE} (a Chronicle Queue 4 "
                                 "directory?): it has no locks")
        raise NotAQueueError(f"not a Chronicle queue: {path} (no {METADATA_FILE})")
    return TableStore(meta_path, read_only=not writable, timeout=2.0)


def lock_states(path: str) -> list[LockState]:
    """The write and append locks of the queue at ``path``, with their holders."""
    meta = _open_meta(path, writable=False)
    try:
        return _lock_states(meta)
    finally:
        meta.close()


def unlock_queue(path: str, *, force: bool = False) -> list[tuple[LockState, bool]]:
    """Release ``chronicle.write.lock`` and ``chronicle.append.lock`` when their
    holder is dead (or, with ``force``, whoever holds them).

    Returns (state before, released) for every lock key present.

    Raises:
        QueueBusyError: a lock is held by a live process and ``force`` is False
            (nothing is changed then).
    """
    meta = _open_meta(path, writable=True)
    try:
        states = _lock_states(meta)
        live = [s for s in states if s.locked and s.alive]
        if live and not force:
            who = ", ".join(f"{s.key} by live process {s.holder}" for s in live)
            raise QueueBusyError(f"{who}; use --force to release it anyway")
        out = []
        for s in states:
            released = False
            if s.locked:
                released = meta.cas(s.key, s.value, UNLOCKED)
            out.append((s, released))
        return out
    finally:
        meta.close()


# --------------------------------------------------------------------------
# check and repair
# --------------------------------------------------------------------------


@dataclass(slots=True)
class CheckFinding:
    """One problem (or remark) found by :func:`check_queue`.

    ``kind`` is one of ``bad-file``, ``unfinished-file``, ``pending-file``,
    ``headerless-file``
    (written by libchronicle: readable, not appendable), ``incomplete-header``,
    ``corrupt-header``, ``missing-eof``, ``stale-write-position``,
    ``bad-write-position``, ``index-hole``, ``bad-index-entry``,
    ``missing-index-page``, ``listing-out-of-date``, ``stale-lock``,
    ``lock-held``, ``stray-file``, ``creating-file`` (a new cycle file a process
    is building, or died building), ``bad-metadata``, ``broken-chain``.
    """

    severity: str  # "error", "warning" or "info"
    kind: str
    path: str
    message: str
    offset: int | None = None
    fix: str | None = None  # what --repair would do; None: not repairable
    repaired: bool = False
    _apply: Callable[[_RepairContext], None] | None = field(default=None, repr=False)

    @property
    def repairable(self) -> bool:
        """True if :func:`repair_queue` knows how to fix this finding."""
        return self._apply is not None

    def __str__(self) -> str:
        where = os.path.basename(self.path)
        if self.offset is not None:
            where += f" @{self.offset:#x}"
        return f"{self.severity}: {self.kind}: {where}: {self.message}"


class _RepairContext:
    """Writable handles opened on demand while the write lock is held."""

    def __init__(self, q: Queue, meta: TableStore | None) -> None:
        self.q = q
        self.meta = meta
        self._stores: dict[str, CycleStore] = {}

    def store(self, path: str, cycle: int) -> CycleStore:
        st = self._stores.get(path)
        if st is None:
            st = open_store(path, cycle, writable=True, chunk=self.q.block_size,
                            overlap=self.q._overlap, timeout=1.0,
                            roll_index=self.q._roll_index())
            if st is None:
                raise ChronicleError(f"cannot open {path} for repair")
            self._stores[path] = st
        return st

    def close(self) -> None:
        for st in self._stores.values():
            st.file.sync(0, st.file.size)
            st.close()
        self._stores.clear()


def _is_data_header(st: CycleStore, pos: int) -> bool:
    mf = st.file
    if pos <= 0 or pos + 4 > mf.size:
        mf.refresh()
        if pos <= 0 or pos + 4 > mf.size:
            return False
    word = int.from_bytes(mf.read(pos, 4), "little")
    return word != 0 and not word & (HDR_META | HDR_NOT_COMPLETE)


def _read_doc(f: CycleStore, pos: int) -> tuple[int, bytes] | None:
    mf = f.file
    if pos <= 0 or pos + 4 > mf.size:
        return None
    word = int.from_bytes(mf.read(pos, 4), "little")
    n = word & LENGTH_MASK
    if not word & HDR_META or word & HDR_NOT_COMPLETE or pos + 4 + n > mf.size:
        return None
    return word, mf.read(pos + 4, n)


def _index_array(st: CycleStore, pos: int, name: str) -> I64Array | None:
    got = _read_doc(st, pos)
    if got is None:
        return None
    body = got[1]
    try:
        doc = parse_document(body, 0, len(body), base=pos + 4)
        v = doc.get(name)
        return v.as_array() if v is not None else None
    except WireError:
        return None


# --------------------------------------------------------------------------
# walking a damaged cycle file: past the damage to the next intact excerpt
# --------------------------------------------------------------------------

_CHAIN_DOCS = 8  # plausible documents in a row that make a resynchronisation point
SALVAGE_SECONDS = 20.0  # how long one cycle file's damage may be searched


class _GiveUp(Exception):
    """The search past a file's damage ran out of time."""


class _Pages:
    """A cycle file read in 4 KiB pages on demand, for walks that jump about
    (a 1 MiB window would be read again on every jump); bounded in time."""

    __slots__ = ("calls", "deadline", "fd", "pages", "patched", "size")

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.pages: dict[int, bytes] = {}
        self.deadline = deadline
        self.calls = 0
        #: header words as a repair would write them (read instead of the file's)
        self.patched: dict[int, int] = {}

    def u32(self, pos: int) -> int | None:
        """The little-endian word at ``pos``; None past the end of the file."""
        self.calls += 1
        if not self.calls & 0xFFF and time.monotonic() > self.deadline:
            raise _GiveUp
        if pos < 0 or pos + 4 > self.size:
            return None
        if pos in self.patched:
            return self.patched[pos]
        n, off = divmod(pos, 4096)
        if off > 4092:
            return int.from_bytes(os.pread(self.fd, 4, pos).ljust(4, b"\0"), "little")
        page = self.pages.get(n)
        if page is None:
            if len(self.pages) >= 512:
                self.pages.clear()
            page = self.pages[n] = os.pread(self.fd, 4096, n * 4096)
        return int.from_bytes(page[off:off + 4].ljust(4, b"\0"), "little")


def _up(n: int, align: int) -> int:
    return (n + align - 1) & ~(align - 1)


def _next_nonzero(fd: int, pos: int, size: int) -> int | None:
    """The offset of the first non-zero byte at or after ``pos`` (holes skipped)."""
    step = 4096  # most zero runs are short: a small read first
    while pos < size:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            return None  # only a hole is left
        chunk = os.pread(fd, min(step, size - pos), pos)
        if not chunk:
            return None
        rest = chunk.lstrip(b"\0")
        if rest:
            return pos + len(chunk) - len(rest)
        pos += len(chunk)
        step = 1 << 20
    return None


def _data_end(fd: int, pos: int, size: int) -> int:
    """The offset just past the last non-zero byte at or after ``pos`` (``pos`` if none)."""
    end = at = pos
    while (nz := _next_nonzero(fd, at, size)) is not None:
        chunk = os.pread(fd, min(1 << 20, size - nz), nz)
        end = nz + len(chunk.rstrip(b"\0"))
        at = nz + len(chunk)
    return end


def _chain_ok(fw: _Pages, pos: int, align: int, size: int, anchors: set[int]) -> bool:
    """Whether ``pos`` starts a plausible run of documents: ``_CHAIN_DOCS`` of them,
    or fewer that end at an EOF marker, at zeros up to the end of the file, or at a
    known excerpt position (an index entry or writePosition)."""
    for hop in range(_CHAIN_DOCS):
        if hop and pos in anchors:
            return True
        word = fw.u32(pos)
        if word is None:
            return False
        if word == 0:
            return hop > 0 and _next_nonzero(fw.fd, pos, size) is None
        if word == HDR_EOF:
            return True
        if word & HDR_NOT_COMPLETE or pos + 4 + (word & LENGTH_MASK) > size:
            return False
        pos = _up(pos + 4 + (word & LENGTH_MASK), align)
    return True


def _resync(fw: _Pages, start: int, align: int, size: int, anchors: set[int],
            stop: int | None = None) -> int | None:
    """The first position from ``start`` (and before ``stop``) where intact
    documents go on, or None."""
    pos = _up(start, align)
    limit = size if stop is None else min(stop, size)
    while pos + 4 <= limit:
        word = fw.u32(pos)
        if word is None:
            return None
        if word == 0:  # skip the zeros
            nz = _next_nonzero(fw.fd, pos, limit)
            if nz is None:
                return None
            pos = nz - nz % align
            continue
        if (word == HDR_EOF or not word & HDR_NOT_COMPLETE) \
                and _chain_ok(fw, pos, align, size, anchors):
            return _unswallow(fw, pos, align, size, anchors)
        pos += align
    return None


def _unswallow(fw: _Pages, pos: int, align: int, size: int, anchors: set[int]) -> int:
    """Damaged bytes can look like headers whose lengths happen to land on an
    intact one further on: where a document of the chain from ``pos`` holds a
    chain of its own leading to where it ends or to a known excerpt position,
    that is the intact chain, and it starts there instead."""
    for _ in range(64):
        at = pos
        for _ in range(_CHAIN_DOCS):
            word = fw.u32(at) or 0
            if not word or word & HDR_NOT_COMPLETE:
                return pos
            inner = _swallowed(fw, at, align, size, anchors)
            if inner is not None:
                pos = inner
                break
            at = _up(at + 4 + (word & LENGTH_MASK), align)
        else:
            return pos
    return pos


def _swallowed(fw: _Pages, pos: int, align: int, size: int,
               anchors: set[int]) -> int | None:
    """The first position inside the document at ``pos`` from which a chain of
    headers leads exactly to where that document ends, or to a known excerpt
    position inside it; None if there is none."""
    word = fw.u32(pos) or 0
    if word == HDR_EOF:
        return None
    end = _up(pos + 4 + (word & LENGTH_MASK), align)
    targets = {end} | {a for a in anchors if pos < a < end}  # no anchors: the end only
    last = max(targets)
    for start in range(pos + align, min(end, pos + (64 << 10)), align):
        at = start
        for _ in range(64):
            if at in targets and (at != start or at in anchors):
                return start
            w = fw.u32(at) or 0
            if not w or w & HDR_NOT_COMPLETE or at + 4 + (w & LENGTH_MASK) > size:
                break
            at = _up(at + 4 + (w & LENGTH_MASK), align)
            if at > last:
                break
    return None


def _restored_word(word: int, pos: int, target: int, align: int) -> int | None:
    """The header word ``word`` was before one bit of it flipped, if exactly one
    such word makes the document at ``pos`` end at ``target``."""
    found = set()
    for cand in [word & ~HDR_NOT_COMPLETE] + [word ^ (1 << b) for b in range(32)]:
        if cand and not cand & HDR_NOT_COMPLETE \
                and _up(pos + 4 + (cand & LENGTH_MASK), align) == target:
            found.add(cand)
    return found.pop() if len(found) == 1 else None


@dataclass(slots=True)
class _Salvaged:
    docs: list[RawDocument]
    end: RawDocument | None  # where reading stops: eof, end, incomplete or truncated
    fixes: list[tuple[int, int, int]]  # (position, header word now, header word to write)
    garbage_end: int = 0  # past the last non-zero byte after an unrecoverable end
    gave_up: bool = False  # the search ran out of time: nothing may be cleared


def _salvage_walk(fw: _Pages, start: int, align: int, anchors: set[int]) -> _Salvaged:
    """Walk a cycle file's documents as readers do, but where the chain of
    headers breaks (a damaged header word, a document that runs into the next
    ones or past the end of the file) find the next intact document and say how
    to join the two: restore a header word one flipped bit away, else cover the
    damaged bytes with a padding metadata document, which every reader skips."""
    out = _Salvaged([], None, [])
    try:
        _walk_into(out, fw, start, align, anchors)
    except _GiveUp:
        out.gave_up = True
        out.end = RawDocument(out.docs[-1].pos if out.docs else start, 0, "end")
    return out


def _walk_into(out: _Salvaged, fw: _Pages, start: int, align: int, anchors: set[int]) -> None:
    size = fw.size
    pos = start
    marks = sorted(a for a in anchors if a > start)
    while True:
        word = fw.u32(pos)
        if word is None or word == 0:
            kind = "end"
        elif word & HDR_EOF == HDR_EOF and not word & LENGTH_MASK:
            out.end = RawDocument(pos, word, "eof")
            return
        elif word & HDR_NOT_COMPLETE:
            kind = "incomplete"
        elif pos + 4 + (word & LENGTH_MASK) > size:
            kind = "truncated"
        else:
            nxt = _up(pos + 4 + (word & LENGTH_MASK), align)
            i = bisect.bisect_right(marks, pos)
            # a known excerpt inside it: its length is damaged, unless it ends
            # where plausible documents go on (then the index entry is what is wrong)
            if (i == len(marks) or marks[i] >= nxt
                    or (_chain_ok(fw, nxt, align, size, anchors)
                        and _swallowed(fw, pos, align, size, set()) is None)):
                out.docs.append(RawDocument(pos, word, "meta" if word & HDR_META else "data"))
                pos = nxt
                continue
            kind = "swallows"  # runs over a known excerpt: its length is damaged
        if kind != "swallows":
            # a metadata document (an index page) before the break may be what is
            # damaged: intact documents then start inside it.  An excerpt before it
            # is left as it reads: a readable excerpt is never changed
            prev = out.docs[-1] if out.docs else None
            if prev is not None and prev.kind == "meta":
                inner = _resync(fw, prev.pos + 4, align, size, anchors, stop=pos)
                if inner is not None and inner < pos and _restored_word(
                        prev.header, prev.pos, inner, align) is not None:
                    out.docs.pop()
                    _join(out, fw, prev.pos, prev.header, inner, align)
                    pos = inner
                    continue
            body_end = pos + 4
            if kind == "incomplete":
                body_end = _up(pos + 4 + ((word or 0) & LENGTH_MASK), align)  # mid-write
            if (kind in ("end", "incomplete") and not any(m >= pos for m in marks)
                    and _next_nonzero(fw.fd, body_end, size) is None):
                out.end = RawDocument(pos, word or 0, kind)
                return
        q = _resync(fw, pos + 4, align, size, anchors)
        if q is None:
            out.end = RawDocument(pos, word or 0, "end" if kind == "swallows" else kind)
            out.garbage_end = _data_end(fw.fd, pos, size)
            return
        _join(out, fw, pos, word or 0, q, align)
        pos = q


def _join(out: _Salvaged, fw: _Pages, pos: int, word: int, target: int, align: int) -> None:
    """Make the document at ``pos`` end at ``target``: its header word with one
    flipped bit restored, else a padding metadata document over the damage."""
    cand = _restored_word(word, pos, target, align) if word else None
    if cand is None:
        cand = HDR_META | (target - pos - 4)
    out.fixes.append((pos, word, cand))
    out.docs.append(RawDocument(pos, cand, "meta" if cand & HDR_META else "data"))


def _padding_zero(fw: _Pages, end: int) -> bool:
    """Whether the alignment padding after a document ending at ``end`` is zero."""
    if not end & 3:
        return True
    word = fw.u32(end & ~3)
    return word is None or not word >> 8 * (end & 3)


def _short_lengths(fw: _Pages, docs: list[RawDocument]
                   ) -> list[tuple[int, int, tuple[int, int] | None]]:
    """Excerpts whose alignment padding is not zero: (position, header word,
    the repair).  Either a flipped low bit shortened the length (the
    excerpt's last bytes then read as padding; repaired by the header word
    one flipped bit away that ends at the same place with zero padding) or a
    bit of the padding itself flipped (one byte with one bit set; repaired by
    zeroing it): the repair is (offset, word to write there), None when both,
    or neither, explain it."""
    out = []
    for doc in docs:
        end = doc.pos + 4 + doc.length
        if doc.kind != "data" or _padding_zero(fw, end):
            continue
        found = [(doc.pos, w) for w in (doc.header ^ 1, doc.header ^ 2)
                 if (w & LENGTH_MASK) > doc.length and _up(end, 4) == _up(
                     doc.pos + 4 + (w & LENGTH_MASK), 4)
                 and _padding_zero(fw, doc.pos + 4 + (w & LENGTH_MASK))]
        word = fw.u32(end & ~3) or 0
        pad = word >> 8 * (end & 3) << 8 * (end & 3)
        if pad and not pad & (pad - 1):  # one bit set
            found.append((end & ~3, word ^ pad))
        out.append((doc.pos, doc.header, found[0] if len(found) == 1 else None))
    return out


def _short_length_findings(path: str, cycle: int,
                           short: list[tuple[int, int, tuple[int, int] | None]]
                           ) -> list[CheckFinding]:
    out = []
    for pos, word, fix in short:
        def restore(ctx: _RepairContext, fix: tuple[int, int] | None = fix) -> None:
            assert fix is not None
            f = ctx.store(path, cycle).file
            if not f.cas32(fix[0], f.load32(fix[0]), fix[1]):
                raise ChronicleError(f"the word at {fix[0]:#x} of {path} changed")

        what = ("repair refuses: a shortened length and a flipped padding bit explain it "
                "alike (or neither does)" if fix is None else
                f"restore the header one flipped bit away ({fix[1]:#010x})" if fix[0] == pos
                else "clear the flipped bit of the padding")
        out.append(CheckFinding(
            "error", "broken-chain", path,
            f"excerpt header {word:#010x} is followed by padding that is not zero: its length "
            "or its padding is damaged" + (f"; {what}" if fix is None else ""), pos,
            None if fix is None else what, _apply=None if fix is None else restore))
    return out


def _anchor_seqs(st: CycleStore, size: int) -> dict[int, int]:
    """Known excerpt positions with their sequences: the index entries, and
    the writePosition where its packed sequence agrees with its position."""
    lay = st.layout
    out: dict[int, int] = {}
    if lay.i2i_off:
        count_bits = lay.index_count.bit_length() - 1
        spacing_bits = lay.index_spacing.bit_length() - 1
        i2i = _index_array(st, st.file.load64(lay.i2i_off), "index2index")
        for i2, page_pos in enumerate(i2i.values if i2i is not None else ()):
            page = _index_array(st, page_pos, "index") if page_pos > 0 else None
            for i3, v in enumerate(page.values if page is not None else ()):
                if v > 0:
                    out.setdefault(v, ((i2 << count_bits) + i3) << spacing_bits)
    if lay.wp_off and lay.wp_seq_off:
        shift = cycle_shift_for(lay.index_count, lay.index_spacing)
        wp = st.file.load64(lay.wp_off)
        packed = st.file.load64(lay.wp_seq_off) & _U64
        if wp > 0 and packed >> shift == wp & ((1 << (64 - shift)) - 1):
            out.setdefault(wp, packed & ((1 << shift) - 1))
    return {p: q for p, q in out.items()
            if lay.data_start <= p <= size - 4 and p % lay.align == 0}


def _contradicted(docs: list[RawDocument], anchors: dict[int, int]) -> list[int]:
    """The anchors that the documents of a (repaired) walk put elsewhere: no
    data excerpt at the anchor's position, or one of another sequence."""
    seqs: dict[int, int] = {}
    for d in docs:
        if d.kind == "data":
            seqs[d.pos] = len(seqs)
    return sorted(p for p, q in anchors.items() if seqs.get(p) != q)


def _lands(fw: _Pages, pos: int, word: int | None, seq: int, target: int, target_seq: int,
           align: int, hops: int) -> bool:
    """Whether the headers from ``pos`` (the first one read as ``word``, the
    document there being of sequence ``seq``) lead to data excerpt
    ``target_seq`` exactly at ``target``, every excerpt's padding zero."""
    for _ in range(hops):
        if not word or word & HDR_NOT_COMPLETE or pos > target:
            return False
        if pos == target:
            return seq == target_seq and not word & HDR_META
        end = pos + 4 + (word & LENGTH_MASK)
        if end > fw.size:
            return False
        if not word & HDR_META:
            if align == 4 and not _padding_zero(fw, end):
                return False
            seq += 1
        pos = _up(end, align)
        word = fw.u32(pos)
    return False


def _reaches(fw: _Pages, pos: int, target: int, align: int, hops: int) -> bool:
    """Whether the headers from ``pos`` lead to a data excerpt at ``target``
    (whatever its sequence), every excerpt's padding zero."""
    word = fw.u32(pos)
    for _ in range(hops):
        if not word or word & HDR_NOT_COMPLETE or pos > target:
            return False
        if pos == target:
            return not word & HDR_META
        end = pos + 4 + (word & LENGTH_MASK)
        if end > fw.size or (align == 4 and not word & HDR_META and not _padding_zero(fw, end)):
            return False
        pos = _up(end, align)
        word = fw.u32(pos)
    return False


def _broken_span(fw: _Pages, anchors: dict[int, int], start: int, align: int, hops: int
                 ) -> tuple[int, int, int, int] | None:
    """The first stretch between two anchors (from the start of the data)
    that the chain of headers does not join: (position, sequence) of both
    ends.  An anchor the chain passes by while it joins the one after is a
    damaged index entry, not a broken chain."""
    points = sorted(anchors.items())
    if not points or points[0][0] != start:
        points.insert(0, (start, 0))
    k = 0
    while k + 1 < len(points):
        p0, q0 = points[k]
        if _lands(fw, p0, fw.u32(p0), q0, *points[k + 1], align, hops):
            k += 1
        elif k + 2 < len(points) and _lands(fw, p0, fw.u32(p0), q0, *points[k + 2], align,
                                             hops):
            k += 2
        else:
            return p0, q0, *points[k + 1]
    return None


def _index_doc(fw: _Pages, pos: int) -> bool:
    """Whether the document at ``pos`` is an index page (its event name)."""
    head = b"".join((fw.u32(pos + 4 + k) or 0).to_bytes(4, "little") for k in (0, 4, 8, 12))
    return head.startswith((b"\xb9\x05index", b"\xb9\x0bindex2index"))


def _swallows(fw: _Pages, pos: int, word: int, align: int) -> bool:
    """Whether the document at ``pos``, read with header ``word``, holds
    documents of its own that end where it ends (a header restored over a
    lost one must not take in the documents after it)."""
    fw.patched[pos] = word
    try:
        return _swallowed(fw, pos, align, fw.size, set()) is not None
    finally:
        del fw.patched[pos]


def _single_flips(fw: _Pages, span: tuple[int, int, int, int], align: int, hops: int
                  ) -> list[tuple[int, int, int]]:
    """The header words on the walk across ``span`` that, with one bit
    flipped back, make the chain join both ends with the right number of
    excerpts: (position, word now, word restored), at most three (one is the
    repair; more, that the bytes cannot tell which).  An index page is never
    taken for an excerpt."""
    p0, q0, p1, q1 = span
    visited = []
    pos, seq, word = p0, q0, fw.u32(p0)
    for _ in range(hops):
        if word is None or pos > p1:
            break
        visited.append((pos, word, seq))
        if pos == p1 or not word or word & HDR_NOT_COMPLETE:
            break
        end = pos + 4 + (word & LENGTH_MASK)
        if end > fw.size:
            break
        seq += 0 if word & HDR_META else 1
        pos = _up(end, align)
        word = fw.u32(pos)
    found: list[tuple[int, int, int]] = []
    for pos, word, seq in visited:
        for bit in range(32):
            cand = word ^ (1 << bit)
            if not cand or cand & HDR_NOT_COMPLETE:
                continue
            if word & HDR_META and not cand & HDR_META and _index_doc(fw, pos):
                continue
            if _lands(fw, pos, cand, seq, p1, q1, align, hops) \
                    and not _swallows(fw, pos, cand, align):
                found.append((pos, word, cand))
                if len(found) > 2:
                    return found
    return found


def _index_page_restored(fw: _Pages, flips: list[tuple[int, int, int]]
                         ) -> list[tuple[int, int, int]]:
    """Of several flips that fit, the one that makes an index page a
    metadata document again (its event name says what it is), if exactly one."""
    found = [f for f in flips if f[2] & HDR_META and not f[1] & HDR_META
             and _index_doc(fw, f[0])]
    return found if len(found) == 1 else flips


def _keep_indices(fw: _Pages, walked: _Salvaged, anchors: dict[int, int], start: int,
                  align: int, spacing: int) -> tuple[_Salvaged, tuple[str, int] | None]:
    """A repair must keep every excerpt at its index.  Where the chain of
    headers does not join two anchors (index entries, writePosition), look
    for the one header whose flipped bit explains it and walk again with it
    restored; else the walk's own joins (padding) may stand only if they put
    every anchor where it says.  Returns the walk to repair by, and why there
    is none and where (the walk given back is then not to be repaired by)."""
    damaged_end = walked.end is not None and walked.end.kind in ("incomplete", "truncated")
    if not (walked.fixes or damaged_end or _contradicted(walked.docs, anchors)):
        return walked, None
    hops = 4 * spacing + 1024
    span = _broken_span(fw, anchors, start, align, hops)
    if span is None:
        # the chain joins every anchor: what contradicts it is an index entry
        return walked, None
    flips = _index_page_restored(fw, _single_flips(fw, span, align, hops))
    if len(flips) == 1:
        fix = flips[0]
        # one flipped bit explains the damage: restored, nothing else changes
        fw.patched[fix[0]] = fix[2]
        again = _salvage_walk(fw, start, align, set(anchors))
        fw.patched.clear()
        if not _contradicted(again.docs, anchors):
            again.fixes.insert(0, fix)
            return again, None
        flips = []  # it moves an anchor: no explanation
    if not flips and span[2] == max(anchors) and _reaches(fw, span[0], span[2], align, hops):
        # the chain is whole up to the writePosition, whose sequence no single
        # header explains: that sequence is what is damaged (its own finding)
        return walked, None
    # padding may stand only where no flipped bit explains the damage, every
    # anchor stays put and no excerpt it leaves ends in bytes that are not zero
    if not flips and not _contradicted(walked.docs, anchors) \
            and not _short_lengths(fw, walked.docs):
        return walked, None
    if not flips:
        what = "no header one flipped bit away joins"
    elif flips[0][0] != flips[1][0]:
        what = f"headers at {flips[0][0]:#x} and {flips[1][0]:#x} one flipped bit away both join"
    else:
        what = (f"two header words at {flips[0][0]:#x} one flipped bit away "
                f"({flips[0][2]:#010x}, {flips[1][2]:#010x}) both join")
    return walked, (f"{what} the excerpts at {span[0]:#x} (sequence {span[1]}) and "
                    f"{span[2]:#x} (sequence {span[3]}), and padding over the damage would "
                    "lose excerpts or move the ones after it to other indices: repair "
                    "refuses; restore "
                    "the file from a backup (move_to_index still reaches the excerpts past "
                    "the damage)", flips[0][0] if flips else span[0])


def _anchors(st: CycleStore, size: int, seqs: dict[int, int]) -> set[int]:
    """Known excerpt positions: the index entries (``seqs``, from
    :func:`_anchor_seqs`) and writePosition, whatever its sequence says."""
    lay = st.layout
    wp = st.file.load64(lay.wp_off) if lay.wp_off else 0
    return set(seqs) | ({wp} if lay.data_start <= wp <= size - 4 and wp % lay.align == 0
                        else set())


def _header_rebuild(q: Queue, path: str, same_length: bool = False
                    ) -> Callable[[_RepairContext], None] | None:
    """A repair writing a fresh header document over the damaged one of the
    cycle file at ``path``, if the file is laid out as a new file of the
    queue's roll cycle is (its index2index page where that puts it; with
    ``same_length`` its header word as well)."""
    rc = q.roll_cycle
    image, lay = store_image(rc.index_count, rc.index_spacing)
    header_end = 4 + (int.from_bytes(image[:4], "little") & LENGTH_MASK)
    i2i = int.from_bytes(image[lay.i2i_off:lay.i2i_off + 8], "little")
    try:
        fd = open_regular(path)
    except (OSError, CorruptQueueError):
        return None
    try:
        data = os.pread(fd, lay.data_start, 0)
    finally:
        os.close(fd)
    if (len(data) < lay.data_start or data[i2i:i2i + 4] != image[i2i:i2i + 4]
            or (same_length and data[:4] != image[:4])):
        return None

    def apply(ctx: _RepairContext) -> None:
        fd = open_regular(path, os.O_RDWR)
        try:
            # writePosition and lastIndex start at 0: the next pass sets them
            os.pwrite(fd, image[4:header_end], 4)
            os.pwrite(fd, image[:4], 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    return apply


def _unwritten_file(q: Queue, path: str, live: bool) -> list[CheckFinding]:
    """A cycle file without its header: being written (younger than the
    queue's ``timeout`` while writers may run: readers see nothing there yet)
    or left by a creator that died (readers pass it by; repair, which holds
    the write lock every creator takes, moves it aside as an appender would)."""
    age = unwritten_age(path)
    if age is None:
        return []  # gone, or written meanwhile
    if live and age < q.timeout:
        return [CheckFinding(
            "info", "pending-file", path,
            f"no header yet, made {age:.1f}s ago: its creator may still be writing it "
            f"(readers see nothing there yet; without one after {q.timeout:g}s it counts "
            "as left by a creator that died)", 0)]
    discard = f"{path}-{int(time.time() * 1000)}.discard"

    def rename(ctx: _RepairContext, path: str = path, discard: str = discard) -> None:
        if unwritten_age(path) is not None:  # (still without a header)
            os.rename(path, discard)
            ctx.q._invalidate_listing()  # the listing's range may change next

    return [CheckFinding(
        "warning", "unfinished-file", path,
        f"the file's header was never written ({age:.0f}s old: its creator died): readers "
        "pass the cycle by", 0, f"rename it to {os.path.basename(discard)} as Java does",
        _apply=rename)]


def _check_cycle(q: Queue, cycle: int, path: str, is_last: bool,
                 progress: Callable[[int], None] | None,
                 live: bool = False) -> list[CheckFinding]:

    out: list[CheckFinding] = []
    try:
        st = open_store(path, cycle, writable=False, chunk=q.block_size, overlap=q._overlap,
                        timeout=q.timeout, roll_index=q._roll_index(), wait=False)
    except CorruptQueueError as exc:
        rebuild = _header_rebuild(q, path)
        return [CheckFinding("error", "bad-file", path, f"unreadable cycle file: {exc}", 0,
                             None if rebuild is None else "write a fresh header document (the "
                             "index pages and excerpts after it are where a new file of the "
                             "queue's roll cycle has them)", _apply=rebuild)]
    if st is None:
        return _unwritten_file(q, path, live)
    if st.layout.headerless:
        out.append(CheckFinding("warning", "headerless-file", path, HEADERLESS_LIMITATION, 0))
    try:
        lay = st.layout
        if lay.align != 4:
            # a header as long as a new one, laid out as one, but without
            # dataFormat 1: a damaged field name (Java's older, shorter headers
            # have no dataFormat either, and stay as they are)
            rebuild = _header_rebuild(q, path, same_length=True)
            if rebuild is not None:
                return [CheckFinding("error", "corrupt-header", path, "the header document "
                                     "has lost its dataFormat field", 4, "write a fresh "
                                     "header document", _apply=rebuild)]
        positions: dict[int, int] = {}
        count = 0
        last_data = 0
        end_doc = None
        spacing = lay.index_spacing
        fd = open_regular(path)
        try:
            pages = _Pages(fd, time.monotonic() + SALVAGE_SECONDS)
            seqs = _anchor_seqs(st, pages.size)
            walked = _salvage_walk(pages, lay.data_start, lay.align,
                                   _anchors(st, pages.size, seqs))
            walked, refusal = _keep_indices(pages, walked, seqs, lay.data_start, lay.align,
                                            spacing)
            short = _short_lengths(pages, walked.docs) if lay.align == 4 else []
        finally:
            os.close(fd)
        if refusal is not None:
            return [*out, CheckFinding("error", "broken-chain", path, "damaged excerpt "
                                       f"headers hide excerpts from readers: {refusal[0]}",
                                       refusal[1])]
        out += _short_length_findings(path, cycle, short)
        end_doc = walked.end
        for doc in walked.docs:
            if progress is not None and count % 4096 == 0:
                progress(doc.pos)
            if doc.kind == "data":
                if count % spacing == 0:
                    positions[count] = doc.pos
                count += 1
                last_data = doc.pos
        if walked.gave_up:
            return [CheckFinding(
                "error", "broken-chain", path, "damaged excerpt headers: the search for the "
                f"intact excerpts after them took over {SALVAGE_SECONDS:.0f}s; restore the "
                "file from a backup", end_doc.pos if end_doc is not None else None)]
        if walked.fixes and lay.align == 4:
            def join(ctx: _RepairContext, path: str = path, cycle: int = cycle,
                     fixes: list[tuple[int, int, int]] = walked.fixes) -> None:
                s = ctx.store(path, cycle)
                for pos, now, word in fixes:
                    if not s.file.cas32(pos, now, word):
                        raise ChronicleError(f"the header at {pos:#x} of {path} changed")

            pads = sum(1 for _, now, w in walked.fixes if (now ^ w).bit_count() != 1)
            first = walked.fixes[0][0]
            out.append(CheckFinding(
                "error", "broken-chain", path,
                f"{len(walked.fixes)} damaged excerpt header(s) from {first:#x} hide the "
                "excerpts after them from readers", first,
                f"restore {len(walked.fixes) - pads} header(s) one flipped bit away and cover "
                f"{pads} damaged region(s) with padding metadata", _apply=join))
        if progress is not None:
            progress(end_doc.pos if end_doc is not None else last_data)
        eof = end_doc is not None and end_doc.kind == "eof"

        # 1. the end of the data
        if (end_doc is not None and end_doc.kind == "end" and not live
                and walked.garbage_end > end_doc.pos):
            # nothing readable follows the end, but bytes do: zero them (below)
            end_doc = RawDocument(end_doc.pos, 0, "truncated")
        if end_doc is not None and end_doc.kind in ("incomplete", "truncated"):
            bad_pos, bad_word = end_doc.pos, end_doc.header
            garbage = max(walked.garbage_end, bad_pos + 12)
            kind = "incomplete-header" if end_doc.kind == "incomplete" else "corrupt-header"
            what = ("an incomplete excerpt header (a writer died mid-excerpt)"
                    if kind == "incomplete-header" else
                    f"a header of {end_doc.length} bytes that runs past the end of the file")

            def clear(ctx: _RepairContext, path: str = path, cycle: int = cycle,
                      pos: int = bad_pos, word: int = bad_word) -> None:
                s = ctx.store(path, cycle)
                if not s.file.cas32(pos, word, 0) and s.file.load32(pos) != 0:
                    raise ChronicleError(f"the header at {pos:#x} of {path} changed")
                # no intact excerpt follows (the walk found none): clear what does
                end = min(garbage, s.file.size)
                for at in range(pos + 4, end, 1 << 20):
                    s.file.write(at, bytes(min(1 << 20, end - at)))

            out.append(CheckFinding(
                "error", kind, path, f"{what}, header word {bad_word:#010x}", bad_pos,
                "clear the header so appenders write there" if is_last
                else "clear the header and close the cycle with an EOF", _apply=clear))
        if not is_last and not eof:
            def close_eof(ctx: _RepairContext, path: str = path, cycle: int = cycle) -> None:
                ctx.store(path, cycle).write_eof()

            out.append(CheckFinding(
                "warning", "missing-eof", path,
                "the cycle is not the last one but has no EOF marker: tailers stop at its end",
                end_doc.pos if end_doc is not None else None, "write the EOF marker",
                _apply=close_eof))

        # 2. writePosition
        if lay.wp_off:
            wp = st.file.load64(lay.wp_off)
            expected = last_data if count else 0
            shift = cycle_shift_for(lay.index_count, lay.index_spacing)
            seq_expected = (((expected << shift) + (count - 1 if count else 0)) & _U64)
            wp_seq = st.file.load64(lay.wp_seq_off) & _U64 if lay.wp_seq_off else None
            problem = None
            if wp < expected:
                problem = ("warning", "stale-write-position",
                           f"writePosition {wp:#x} is behind the last excerpt at {expected:#x} "
                           "(readers scan forward from it)")
            elif wp > expected and live and _is_data_header(st, wp):
                pass  # committed after the walk passed: a live appender
            elif wp > expected:
                problem = ("error", "bad-write-position",
                           f"writePosition {wp:#x} points past the last excerpt at "
                           f"{expected:#x}")
            elif wp_seq is not None and count and wp_seq != seq_expected:
                problem = ("warning", "stale-write-position",
                           f"writePosition sequence {wp_seq:#x} does not match position "
                           f"{expected:#x} / sequence {count - 1}")
            if problem is not None:
                def set_wp(ctx: _RepairContext, path: str = path, cycle: int = cycle,
                           wp_off: int = lay.wp_off, seq_off: int = lay.wp_seq_off,
                           pos: int = expected, seqv: int = seq_expected) -> None:
                    s = ctx.store(path, cycle)
                    s.file.store64(wp_off, pos)
                    if seq_off:
                        s.file.store64(seq_off, seqv - (1 << 64) if seqv >= 1 << 63 else seqv)

                out.append(CheckFinding(problem[0], problem[1], path, problem[2], lay.wp_off,
                                        f"set writePosition to {expected:#x}", _apply=set_wp))

        # 3. the index
        out += _check_index(st, path, cycle, positions, count, spacing)
        return out
    finally:
        st.close()


def _check_index(st: CycleStore, path: str, cycle: int, positions: dict[int, int], count: int,
                 spacing: int) -> list[CheckFinding]:
    lay = st.layout
    out: list[CheckFinding] = []
    if not lay.i2i_off:
        return out
    i2i_pos = st.file.load64(lay.i2i_off)
    if not i2i_pos:
        if count:
            out.append(CheckFinding("warning", "missing-index-page", path,
                                    "the file has no index2index page: readers scan from the "
                                    "start", lay.i2i_off))
        return out
    i2i = _index_array(st, i2i_pos, "index2index")
    if i2i is None:
        out.append(CheckFinding("error", "bad-index-entry", path,
                                f"index2Index points at {i2i_pos:#x}, which is not an "
                                "index2index page", lay.i2i_off))
        return out
    count_bits = lay.index_count.bit_length() - 1
    spacing_bits = spacing.bit_length() - 1
    pages: dict[int, I64Array | None] = {}
    holes: list[tuple[int, int, int]] = []  # (seq, slot offset, expected position)
    bad: list[tuple[int, int, int, int]] = []
    missing: dict[int, list[int]] = {}
    for seq in range(0, count, spacing):
        i2 = seq >> (count_bits + spacing_bits)
        i3 = (seq >> spacing_bits) & (lay.index_count - 1)
        if i2 not in pages:
            ppos = i2i.values[i2] if i2 < i2i.capacity else 0
            pages[i2] = _index_array(st, ppos, "index") if ppos else None
        page = pages[i2]
        if page is None or i3 >= page.capacity:
            missing.setdefault(i2, []).append(seq)
            continue
        actual = page.values[i3]
        expected = positions.get(seq, 0)
        if actual == 0:
            holes.append((seq, page.value_offset(i3), expected))
        elif actual != expected:
            bad.append((seq, page.value_offset(i3), actual, expected))
    for i2, seqs in missing.items():
        out.append(CheckFinding(
            "warning", "missing-index-page", path,
            f"no index page {i2} for excerpts {seqs[0]}..{seqs[-1] + spacing - 1}: readers "
            "scan linearly there", None))
    # entries for excerpts that do not exist (a live writer may just have added one)
    for i2, page in pages.items():
        if page is None:
            continue
        for i3, v in enumerate(page.values):
            seq = ((i2 << count_bits) + i3) << spacing_bits
            if v and seq >= count:
                ok = 0 < v <= st.file.size - 4 and v % lay.align == 0
                word = int.from_bytes(st.file.read(v, 4), "little") if ok else 0
                if not ok or word == 0 or word & (HDR_META | HDR_NOT_COMPLETE):
                    bad.append((seq, page.value_offset(i3), v, 0))

    def write_slots(entries: list[tuple[int, int]]) -> Callable[[_RepairContext], None]:
        def apply(ctx: _RepairContext) -> None:
            s = ctx.store(path, cycle)
            for off, value in entries:
                s.file.store64(off, value)
        return apply

    if holes:
        some = ", ".join(str(s) for s, _, _ in holes[:5]) + (" ..." if len(holes) > 5 else "")
        out.append(CheckFinding(
            "warning", "index-hole", path,
            f"{len(holes)} index entr{'y is' if len(holes) == 1 else 'ies are'} missing "
            f"(sequence {some}): lookups scan linearly there", holes[0][1],
            "fill in the missing entries",
            _apply=write_slots([(off, exp) for _, off, exp in holes])))
    for seq, off, actual, expected in bad:
        msg = (f"index entry for sequence {seq} points at {actual:#x}, "
               + (f"the excerpt is at {expected:#x}" if expected
                  else "but that excerpt does not exist"))
        out.append(CheckFinding("error", "bad-index-entry", path, msg, off,
                                "correct the entry" if expected else "clear the entry",
                                _apply=write_slots([(off, expected)])))
    return out


# --------------------------------------------------------------------------
# rebuilding metadata.cq4t from the cycle files
# --------------------------------------------------------------------------

REPAIR_PASSES = 4
REBUILD_FIX = ("rebuild metadata.cq4t from the cycle files (roll cycle from their names and "
               "headers, listing from the directory, locks cleared, readable keys kept)")


def _cycle_stems(path: str) -> list[str]:
    return sorted(n[:-4] for n in list_dir(path)
                  if n.endswith(".cq4") and os.path.isfile(os.path.join(path, n)))


def _stored_roll(header: Document | None) -> tuple[RollCycle, int, int] | None:
    """(roll cycle, epoch, sourceId) held by a table store header, if usable."""
    if header is None:
        return None
    try:
        meta = header["metadata"].as_document()
        roll = meta["roll"].as_document()
        fmt, length = roll["format"].as_str(), roll["length"].as_int()
        ev, sv = roll.get("epoch"), meta.get("sourceId")
        rc = RollCycles.by_format(fmt)
        if rc is None or rc.length_ms != length:
            d = RollCycles.DEFAULT
            rc = make_roll_cycle("CUSTOM", fmt, length, d.index_count, d.index_spacing)
        CycleNamer(rc, ev.as_int() if ev is not None else 0)
        return (rc, ev.as_int() if ev is not None else 0, sv.as_int() if sv is not None else 0)
    except (KeyError, ValueError, AttributeError):
        return None


def _file_layout(path: str, stems: list[str]) -> tuple[int, int] | None:
    """(index count, index spacing) from the header of the first readable cycle file."""
    for stem in stems:
        with contextlib.suppress(CorruptQueueError, OSError):
            st = open_store(os.path.join(path, stem + ".cq4"), 0, writable=False,
                            chunk=64 << 10, overlap=0, timeout=0.05)
            if st is not None:
                try:
                    return st.layout.index_count, st.layout.index_spacing
                finally:
                    st.close()
    return None


def roll_cycle_of_files(path: str, hint: tuple[RollCycle, int] | None = None
                        ) -> tuple[RollCycle, int]:
    """The roll cycle and epoch that name the cycle files of the queue at ``path``:
    ``hint`` if it fits them, else the built-in roll cycle whose format names
    every file (its index layout chosen from a cycle file's header).

    Raises:
        CorruptQueueError: no built-in roll cycle names the files.
    """
    stems = _cycle_stems(path)
    if hint is not None and not misnamed_cycle_files(CycleNamer(hint[0], hint[1]), stems):
        return hint
    if not stems:
        return hint or (RollCycles.DEFAULT, RollCycles.DEFAULT.default_epoch)
    layout = _file_layout(path, stems)
    fits: list[tuple[RollCycle, int]] = []
    for rc in candidate_roll_cycles(stems[-1]):
        for ep in dict.fromkeys([rc.default_epoch] + ([hint[1]] if hint else [])):
            if not misnamed_cycle_files(CycleNamer(rc, ep), stems):
                fits.append((rc, ep))
                break
    same = [f for f in fits if layout == (f[0].index_count, f[0].index_spacing)]
    if same or fits:
        return (same or fits)[0]
    raise CorruptQueueError(f"no built-in roll cycle names the cycle files (e.g. "
                            f"{stems[-1]}.cq4): cannot tell the queue's roll cycle",
                            os.path.join(path, METADATA_FILE))


def rebuild_metadata(path: str) -> str:
    """Write a new ``metadata.cq4t`` for the queue at ``path`` from its cycle
    files: the roll settings the old file holds if they still name the files,
    else those the file names and headers show; ``listing.*`` from the
    directory; locks free; every other key still readable in the old file
    (named tailers, replication positions) kept.  The old file is kept as
    ``metadata.cq4t-<ms>.discard``.  Returns what was done, in words.

    Raises:
        QueueBusyError: another process has the metadata open.
        CorruptQueueError: the roll cycle of the files cannot be told.
    """
    meta_path = os.path.join(path, METADATA_FILE)
    busy = files_open_by_processes([meta_path], include_self=False).get(meta_path)
    if busy:
        raise QueueBusyError(f"{meta_path} is open in process {busy[0]}: stop it before "
                             "rebuilding the metadata")
    old = salvage_table_store(meta_path) if os.path.isfile(meta_path) else None
    stored = _stored_roll(old.header if old is not None else None)
    rc, ep = roll_cycle_of_files(path, stored[:2] if stored is not None else None)
    namer = CycleNamer(rc, ep)
    cycles = sorted(namer.parse(s) for s in _cycle_stems(path) if namer.matches(s))
    kept: dict[str, tuple[str, int]] = {}
    for key, value in old.keys if old is not None else []:
        low = key.lower()
        if low not in LOCK_KEYS and not low.startswith("listing."):
            kept.setdefault(low, (key, value))
    mod = next((v for k, v in (old.keys if old is not None else [])
                if k.lower() == "listing.modcount" and v >= 0), 0)
    listing = {"listing.modCount": mod + 1}
    if cycles:
        listing.update({"listing.highestCycle": cycles[-1], "listing.lowestCycle": cycles[0]})
    initial = tuple((k, listing.get(k, v)) for k, v in INITIAL_KEYS)
    tmp = f"{meta_path}.rebuild-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    source_id = stored[2] if stored is not None else 0
    ts = TableStore(tmp, read_only=False, timeout=2.0, initial_keys=initial,
                    header=lambda: metadata_header(rc, ep, source_id))
    try:
        for key, value in kept.values():
            ts.set(key, value)
        ts.file.sync(0, ts.file.size)
    finally:
        ts.close()
    if os.path.lexists(meta_path):
        os.rename(meta_path, f"{meta_path}-{int(time.time() * 1000)}.discard")
    os.replace(tmp, meta_path)
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return (f"roll cycle {rc.name} ({rc.format!r}), {len(cycles)} cycles, "
            f"{len(kept)} keys kept")


def _bad_metadata(path: str, message: str, offset: int | None) -> CheckFinding:
    def rebuild(ctx: _RepairContext, path: str = path) -> None:
        rebuild_metadata(path)

    return CheckFinding("error", "bad-metadata", os.path.join(path, METADATA_FILE), message,
                        offset, REBUILD_FIX, _apply=rebuild)


def _checked(path: str, run: Callable[[Queue], list[CheckFinding]]) -> list[CheckFinding]:
    """``run`` on the queue at ``path`` opened read-only; only a ``bad-metadata``
    finding when its metadata keeps it from opening."""
    try:
        q = _open_for_check(path)
    except CorruptQueueError as exc:
        if not _is_metadata_error(path, exc):
            raise
        return [_bad_metadata(path, f"unreadable: {exc}", exc.offset)]
    try:
        return run(q)
    finally:
        q.close()


def _metadata_findings(path: str) -> list[CheckFinding]:
    """A ``bad-metadata`` finding if the queue cannot be opened for its metadata,
    or the metadata lacks roll settings or has damaged key records."""
    return [f for f in _checked(path, lambda q: _check_metadata(q, []))
            if f.kind == "bad-metadata"]


def _rebuild_bad_metadata(path: str, backup_dir: str | None) -> list[CheckFinding]:
    """Rebuild damaged metadata before anything else (its write lock and keys are
    needed by the rest of a repair); the findings, marked repaired."""
    found = _metadata_findings(path)
    for f in found:
        if backup_dir is not None and os.path.isfile(f.path):
            backup_files([f.path], backup_dir)
        rebuild_metadata(path)
        f.repaired = True
    return found


def _is_metadata_error(path: str, exc: CorruptQueueError) -> bool:
    return exc.path is not None and os.path.abspath(exc.path) == os.path.abspath(
        os.path.join(path, METADATA_FILE))


def _check_metadata(q: Queue, cycles: list[int]) -> list[CheckFinding]:
    out: list[CheckFinding] = []
    meta = q._meta
    if meta is None:
        mpath = os.path.join(q.path, METADATA_FILE)
        if os.path.lexists(mpath):  # damaged: the queue was opened by its cycle files
            try:
                TableStore(mpath, read_only=True, timeout=0.05).close()
            except CorruptQueueError as exc:
                out.append(_bad_metadata(q.path, f"unreadable: {exc}", exc.offset))
            else:
                out.append(_bad_metadata(q.path, "its roll settings are unusable: the roll "
                                         "cycle was told from the cycle files", 4))
        return out
    mpath = meta.path
    if meta.header.get("metadata") is None:
        out.append(_bad_metadata(q.path, "the header has no roll settings: the roll cycle was "
                                 "told from the cycle files", 4))
    else:
        damage = meta.damage()
        if damage is not None:
            out.append(_bad_metadata(q.path, f"damaged key records: {damage[1]}", damage[0]))
    if cycles:
        lo, hi = meta.get("listing.lowestCycle"), meta.get("listing.highestCycle")
        if lo != cycles[0] or hi != cycles[-1]:
            def fix_listing(ctx: _RepairContext, lo: int = cycles[0], hi: int = cycles[-1]) -> None:
                assert ctx.meta is not None
                ctx.meta.set("listing.lowestCycle", lo)
                ctx.meta.set("listing.highestCycle", hi)
                ctx.meta.add("listing.modCount", 1)

            def show(v: int | None) -> str:
                return "unset" if v is None or v == UNLOCKED else str(v)

            out.append(CheckFinding(
                "warning", "listing-out-of-date", mpath,
                f"listing says cycles {show(lo)}..{show(hi)}, the files hold "
                f"{cycles[0]}..{cycles[-1]}: Java readers may miss cycles", None,
                "rewrite listing.lowestCycle/highestCycle and bump listing.modCount",
                _apply=fix_listing))
    for s in _lock_states(meta):
        if not s.locked:
            continue
        if s.alive:
            out.append(CheckFinding("info", "lock-held", mpath,
                                    f"{s.key} is held by live process {s.holder}"))
        else:
            def release(ctx: _RepairContext, key: str = s.key, value: int = s.value) -> None:
                assert ctx.meta is not None
                ctx.meta.cas(key, value, UNLOCKED)

            out.append(CheckFinding("warning", "stale-lock", mpath,
                                    f"{s.key} is held by process {s.holder}, which is dead",
                                    None, "release the lock", _apply=release))
    return out


def _stray_files(q: Queue) -> list[CheckFinding]:
    out = []
    for name in sorted(os.listdir(q.path)):
        p = os.path.join(q.path, name)
        if name.endswith(".discard"):
            out.append(CheckFinding("info", "stray-file", p,
                                    "a discarded cycle file (renamed by a writer after its "
                                    "creator died)"))
        elif name.endswith(".cq4") and not q._namer.matches(name[:-4]):
            out.append(CheckFinding("warning", "stray-file", p,
                                    f"the name does not follow the queue's roll cycle "
                                    f"{q.roll_cycle.name} ({q.roll_cycle.format}): ignored"))
    return out


#: ``.NAME.PID.creating``: a cycle file being built aside by process PID (``_store``)
_CREATING = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.creating$")


def _creating_files(q: Queue) -> list[CheckFinding]:
    """The new cycle files still being built aside: a live builder's are
    reported (info), a dead one's are leftovers ``repair`` removes."""
    out = []
    for name in sorted(list_dir(q.path)):
        m = _CREATING.match(name)
        if m is None:
            continue
        p, pid = os.path.join(q.path, name), int(m["pid"])
        if pid_alive(pid):
            out.append(CheckFinding("info", "creating-file", p,
                                    f"process {pid} is building {m['name']}"))
            continue

        def remove(ctx: _RepairContext, p: str = p, pid: int = pid) -> None:
            if not pid_alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)

        out.append(CheckFinding("warning", "creating-file", p,
                                f"process {pid} died building {m['name']}: nothing reads it, "
                                "it only takes disk space", None, "remove it", _apply=remove))
    return out


def _holds_nothing(q: Queue, cycle: int, path: str) -> bool:
    """True for a cycle file holding only the metadata documents it is made
    with: no excerpt and no EOF yet (the file a pretoucher makes for the next
    cycle shortly before the roll).  Read with pread: nothing is reserved."""
    try:
        st = open_store(path, cycle, writable=False, chunk=q.block_size, overlap=q._overlap,
                        timeout=0.05, roll_index=q._roll_index())
    except (CorruptQueueError, OSError):
        return False
    if st is None:
        return False
    try:
        pos, align = st.layout.data_start, st.layout.align
        for _ in range(64):  # a new file holds a handful of documents
            if pos + 4 > st.file.size:
                return False
            word = int.from_bytes(st.file.read(pos, 4), "little")
            if word == 0:
                return True
            if word == HDR_EOF or word & HDR_NOT_COMPLETE or not word & HDR_META:
                return False
            pos = _up(pos + 4 + (word & LENGTH_MASK), align)
        return False
    finally:
        st.close()


def _last_cycle(q: Queue, paths: list[tuple[int, str]]) -> int:
    """Where in ``paths`` the cycle now written to is: the newest whose file
    was completed (a creator may have died) and that is not an empty file made
    ahead of time.  It and the ones after it need no EOF."""
    last = len(paths) - 1
    while last > 0 and not _header_complete(paths[last][1]):
        last -= 1
    while last > 0 and _holds_nothing(q, *paths[last]):
        last -= 1
    return last


def _header_complete(path: str) -> bool:
    try:
        fd = open_regular(path)
    except (OSError, CorruptQueueError):
        return False
    try:
        raw = os.pread(fd, 4, 0)
    finally:
        os.close(fd)
    word = int.from_bytes(raw, "little") if len(raw) == 4 else 0
    return bool(word & HDR_META) and not word & HDR_NOT_COMPLETE


def _run_check(q: Queue, progress: Progress | None, live: bool = True) -> list[CheckFinding]:
    """Check every file; ``live``: writers may be appending (recheck the last cycle)."""
    cycles = q.cycles()
    paths = [(c, q.cycle_path(c)) for c in cycles]
    sizes = []
    for _, p in paths:
        try:
            sizes.append(os.path.getsize(p))
        except OSError:
            sizes.append(0)
    total = sum(sizes) or 1
    done = 0
    meta_findings = _check_metadata(q, cycles)
    if live and any(f.kind == "listing-out-of-date" for f in meta_findings):
        # a writer creates the file first and updates the listing right after
        time.sleep(0.02)
        q._invalidate_listing()
        meta_findings = _check_metadata(q, q.cycles())
    findings = _stray_files(q) + _creating_files(q) + meta_findings
    last = _last_cycle(q, paths)
    for n, (cyc, p) in enumerate(paths):
        base = done

        def prog(pos: int, base: int = base, size: int = sizes[n]) -> None:
            if progress is not None:
                progress(base + min(pos, size), total)

        found = _check_cycle(q, cyc, p, n >= last, prog, live)
        if found and n >= last and live:
            # a live appender may have been between its commit and its writePosition or
            # index update: keep only what is still there a moment later
            time.sleep(0.02)
            again = {(f.kind, f.offset, f.message)
                     for f in _check_cycle(q, cyc, p, True, None, live)}
            found = [f for f in found if (f.kind, f.offset, f.message) in again]
        findings += found
        done += sizes[n]
    if progress is not None:
        progress(total, total)
    return findings


def _open_for_check(path: str) -> Queue:
    try:
        return open_existing_queue(path)
    except CorruptQueueError:
        raise
    except WireError as exc:
        raise CorruptQueueError(f"metadata is not readable: {exc}", path) from None


def check_queue(path: str, *, progress: Progress | None = None) -> list[CheckFinding]:
    """Find incomplete headers, missing EOFs, index holes and bad entries, a stale
    writePosition, an out-of-date listing and stale locks; damaged excerpt
    headers and cycle-file headers, and damaged metadata.  Changes nothing."""
    return _checked(path, lambda q: _run_check(q, progress))


def _take_write_lock(meta: TableStore, timeout: float) -> None:
    pid = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        value = meta.get("chronicle.write.lock")
        if value is None:
            meta.acquire("chronicle.write.lock", UNLOCKED)
            continue
        if value == UNLOCKED:
            if meta.cas("chronicle.write.lock", UNLOCKED, pid):
                return
            continue
        holder = value & 0xFFFFFFFF
        if not pid_alive(holder):
            if meta.cas("chronicle.write.lock", value, pid):
                return
            continue
        if time.monotonic() >= deadline:
            raise QueueBusyError(f"chronicle.write.lock is held by live process {holder}: "
                                 "stop the writer before repairing")
        time.sleep(0.01)


def backup_files(paths: Iterable[str], dest: str) -> list[str]:
    """Copy files into ``dest`` (created), keeping holes sparse; returns the copies."""
    os.makedirs(dest, exist_ok=True)
    out = []
    for p in paths:
        target = os.path.join(dest, os.path.basename(p))
        sparse_copy(p, target)
        out.append(target)
    return out


def sparse_copy(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` writing only the data extents (holes stay holes)."""
    fi = open_regular(src)
    try:
        fo = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fi).st_size
            pos = 0
            while pos < size:
                try:
                    start = os.lseek(fi, pos, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:
                        break
                    raise
                end = os.lseek(fi, start, os.SEEK_HOLE)
                off = start
                while off < end:
                    chunk = os.pread(fi, min(1 << 20, end - off), off)
                    if not chunk:
                        break
                    if chunk.count(0) != len(chunk):
                        os.pwrite(fo, chunk, off)
                    off += len(chunk)
                pos = end
            os.ftruncate(fo, size)
        finally:
            os.close(fo)
    finally:
        os.close(fi)
    shutil.copystat(src, dst)


def files_to_repair(findings: Iterable[CheckFinding]) -> list[str]:
    """The files a repair of ``findings`` would change."""
    seen: dict[str, None] = {}
    for f in findings:
        if f.repairable:
            seen.setdefault(f.path, None)
    return list(seen)


def repair_queue(path: str, *, backup_dir: str | None = None, lock_timeout: float = 5.0,
                 progress: Progress | None = None) -> list[CheckFinding]:
    """Check the queue while holding its write lock, repair what can be repaired,
    then check again.  Returns the findings of the first check with ``repaired``
    set on the ones fixed; anything still wrong shows in a later
    :func:`check_queue`.  With ``backup_dir`` every file about to change is
    copied there first.

    Raises:
        QueueBusyError: a live process holds the write lock past ``lock_timeout``.
    """
    rebuilt = _rebuild_bad_metadata(path, backup_dir)
    q = _open_for_check(path)
    backed: set[str] = set()
    if backup_dir is not None:
        # before anything changes (taking the lock from a dead holder changes metadata)
        first = files_to_repair(_run_check(q, None))
        backup_files(first, backup_dir)
        backed.update(first)
    try:
        meta = None
        if q._meta is not None:
            meta = TableStore(q._meta.path, read_only=False, timeout=2.0)
        try:
            if meta is not None:
                # a dead holder's lock is taken over here; report it as repaired below
                before = _lock_states(meta)
                _take_write_lock(meta, lock_timeout)
            try:
                findings = _run_check(q, progress, live=False)
                if meta is not None:
                    for s in before:
                        if s.key == "chronicle.write.lock" and s.locked and not s.alive:
                            findings.append(CheckFinding(
                                "warning", "stale-lock", meta.path,
                                f"{s.key} was held by process {s.holder}, which is dead",
                                None, "release the lock", repaired=True))
                    findings = [f for f in findings
                                if not (f.kind == "lock-held"
                                        and f.message.endswith(f"process {os.getpid()}"))]
                todo = [f for f in findings if f.repairable]
                # one fix can uncover the next (a fresh header lets the excerpts be
                # walked, a joined chain moves the index entries): check again
                for _ in range(REPAIR_PASSES):
                    more = [p for p in files_to_repair(todo) if p not in backed]
                    if more and backup_dir is not None:
                        backup_files(more, backup_dir)
                        backed.update(more)
                    ctx = _RepairContext(q, meta)
                    try:
                        for f in todo:
                            assert f._apply is not None
                            f._apply(ctx)
                            f.repaired = True
                    finally:
                        ctx.close()
                    if not todo:
                        break
                    seen = {(f.kind, f.path, f.offset, f.message) for f in findings}
                    again = [f for f in _run_check(q, None, live=False) if f.repairable]
                    todo = [f for f in again
                            if (f.kind, f.path, f.offset, f.message) not in seen]
                    findings += todo
            finally:
                if meta is not None:
                    meta.cas("chronicle.write.lock", os.getpid(), UNLOCKED)
        finally:
            if meta is not None:
                meta.close()
        return rebuilt + findings
    finally:
        q.close()


# --------------------------------------------------------------------------
# file lifecycle
# --------------------------------------------------------------------------


@runtime_checkable
class StoreFileListener(Protocol):
    """Told when a queue object opens (acquires) or closes (releases) a cycle
    file, as Java's ``StoreFileListener``.  Calls come from a background thread
    unless the listener was added with ``background=False``."""

    def on_acquired(self, cycle: int, path: str) -> None:
        """Cycle ``cycle`` (file ``path``) was opened by a queue object."""
        ...

    def on_released(self, cycle: int, path: str) -> None:
        """Cycle ``cycle`` (file ``path``) is no longer used by any queue object
        in this process: a retention policy can move or delete it now."""
        ...


class _ListenerHub:
    """Fans a queue's cycle-file open/close events out to listeners."""

    def __init__(self, q: Queue) -> None:
        self.q = q
        self.listeners: list[tuple[StoreFileListener, bool]] = []
        self._events: _queue_mod.SimpleQueue[tuple[StoreFileListener, str, int, str] | None] = (
            _queue_mod.SimpleQueue())
        self._thread: threading.Thread | None = None
        q._store_hooks.append(self._emit)

    def _emit(self, what: str, cycle: int, path: str) -> None:
        for listener, background in list(self.listeners):
            if background:
                self._ensure_thread()
                self._events.put((listener, what, cycle, path))
            else:
                self._call(listener, what, cycle, path)

    @staticmethod
    def _call(listener: StoreFileListener, what: str, cycle: int, path: str) -> None:
        try:
            getattr(listener, what)(cycle, path)
        except Exception as exc:  # a listener must not break the queue
            warnings.warn(f"store file listener {listener!r} failed in {what}: {exc!r}",
                          RuntimeWarning, stacklevel=2)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="aiochronicle-store-files",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            self._call(*item)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until the background thread has delivered every queued event."""
        done = threading.Event()

        class _Marker:
            def on_acquired(self, cycle: int, path: str) -> None:
                done.set()

            def on_released(self, cycle: int, path: str) -> None:
                done.set()

        if self._thread is None:
            return
        self._events.put((_Marker(), "on_acquired", -1, ""))
        done.wait(timeout)

    def remove(self, listener: StoreFileListener) -> None:
        self.listeners = [(x, b) for x, b in self.listeners if x is not listener]
        if not self.listeners:
            with contextlib.suppress(ValueError):
                self.q._store_hooks.remove(self._emit)
            self._events.put(None)
            _HUBS.pop(id(self.q), None)


_HUBS: dict[int, _ListenerHub] = {}


def add_store_file_listener(q: Queue, listener: StoreFileListener, *,
                            background: bool = True) -> Callable[[], None]:
    """Report every cycle file ``q`` acquires and releases to ``listener``.

    ``on_acquired(cycle, path)`` runs when the queue object opens a cycle file
    (an appender or tailer moved onto it) and ``on_released(cycle, path)`` when
    the last user of it let go (an appender rolled past it, a tailer moved on).
    Closing the queue releases every file it still holds.  With
    ``background`` (the default, as in Java) the calls come from one daemon
    thread, in order; otherwise inline in the thread that acquired or released
    the file.  Returns a function that removes the listener (its ``flush()``
    waits for queued background calls).
    """
    hub = _HUBS.get(id(q))
    if hub is None or hub.q is not q:
        hub = _ListenerHub(q)
        _HUBS[id(q)] = hub
    hub.listeners.append((listener, background))

    def remove() -> None:
        hub.remove(listener)

    remove.flush = hub.flush  # type: ignore[attr-defined]
    return remove


# --------------------------------------------------------------------------
# retention
# --------------------------------------------------------------------------


def files_open_by_processes(paths: Iterable[str], *,
                            include_self: bool = True) -> dict[str, list[int]]:
    """Which of ``paths`` some process has open or mapped, scanning ``/proc``
    (Linux).  Processes whose ``/proc`` entries cannot be read are not seen."""
    wanted = {os.path.realpath(p): p for p in paths}
    found: dict[str, list[int]] = {}
    if not wanted or not os.path.isdir("/proc"):
        return found
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me and not include_self:
            continue
        hits: set[str] = set()
        with contextlib.suppress(OSError):
            fd_dir = f"/proc/{pid}/fd"
            for fd in os.listdir(fd_dir):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"{fd_dir}/{fd}")
                    if target.endswith(" (deleted)"):
                        continue
                    if target in wanted:
                        hits.add(target)
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", "rb") as fh:
            for raw in fh:
                if b".cq4" not in raw:
                    continue
                parts = raw.rstrip(b"\n").split(None, 5)
                if len(parts) == 6:
                    target = os.fsdecode(parts[5])
                    if target in wanted:
                        hits.add(target)
        for t in hits:
            found.setdefault(wanted[t], []).append(pid)
    return found


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """What retention does (or would do) with one cycle file."""

    cycle: int
    path: str
    disk_bytes: int
    action: str  # "delete", "move" or "keep"
    reason: str
    destination: str | None = None
    done: bool = False


def _parse_duration(value: float | str | None) -> float | None:
    if value is None or isinstance(value, int | float):
        return None if value is None else float(value)
    s = value.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    if s and s[-1] in units:
        return float(s[:-1]) * units[s[-1]]
    return float(s)


def _parse_size(value: int | str | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    s = value.strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if s and s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


class Retention:
    """Delete (or move) old cycle files of a queue.

    A cycle goes when it ended more than ``max_age`` seconds ago (also
    ``"7d"``, ``"12h"``...), or when it lies beyond the newest ``max_size``
    bytes on disk (also ``"10G"``...).  Never the current cycle (the clock's
    and the newest file's), never one a named tailer still needs (at or after
    the cycle of its ``index.<name>``; a named tailer that has not started
    needs everything), never one open or mapped in any process, and only from
    the oldest end, so the queue never gets a gap.

    A :class:`Retention` is a :class:`StoreFileListener`: added to an open
    queue with :func:`add_store_file_listener` it runs each time a cycle file
    is released (the appender rolled).
    """

    def __init__(self, queue: str | Queue, *, max_age: float | str | None = None,
                 max_size: int | str | None = None, move_to: str | None = None,
                 on_removed: Callable[[RetentionDecision], None] | None = None) -> None:
        self.queue = queue
        self.max_age = _parse_duration(max_age)
        self.max_size = _parse_size(max_size)
        if self.max_age is None and self.max_size is None:
            raise ValueError("retention needs max_age and/or max_size")
        self.move_to = move_to
        self.on_removed = on_removed
        self._lock = threading.Lock()

    # StoreFileListener
    def on_acquired(self, cycle: int, path: str) -> None:
        """Nothing to do when a cycle is opened."""

    def on_released(self, cycle: int, path: str) -> None:
        """A cycle was released: apply the policy (unless the queue is closing)."""
        if isinstance(self.queue, Queue) and self.queue.closed:
            return
        self.apply()

    def _open(self) -> tuple[Queue, bool]:
        if isinstance(self.queue, Queue):
            return self.queue, False
        return open_existing_queue(self.queue), True

    def plan(self, *, progress: Progress | None = None) -> list[RetentionDecision]:
        """What :meth:`apply` would do now, oldest file first."""
        q, own = self._open()
        try:
            return self._plan(q, progress)
        finally:
            if own:
                q.close()

    def _plan(self, q: Queue, progress: Progress | None) -> list[RetentionDecision]:
        q._invalidate_listing()
        cycles = q.cycles()
        if not cycles:
            return []
        rc = q.roll_cycle
        now = q.time_provider.current_time_millis()
        current = {cycles[-1], q.current_cycle()}
        need_from: tuple[int, str] | None = None
        for name, _key, stored in _named_tailer_keys(q._meta):
            tc = rc.to_cycle(stored) if stored else -1
            if need_from is None or tc < need_from[0]:
                need_from = (tc, name)
        info = []
        for c in cycles:
            p = q.cycle_path(c)
            try:
                info.append((c, p, _disk_bytes(os.stat(p))))
            except FileNotFoundError:
                continue
        # size: cumulative from the newest
        over_size: set[int] = set()
        if self.max_size is not None:
            total = 0
            for c, _p, size in reversed(info):
                total += size
                if total > self.max_size:
                    over_size.add(c)
        open_by = files_open_by_processes([p for _, p, _ in info])
        decisions = []
        for n, (c, p, size) in enumerate(info):
            if progress is not None:
                progress(n, len(info))
            end_ms = q.epoch + (c + 1) * rc.length_ms
            age_s = (now - end_ms) / 1000.0
            reasons = []
            if self.max_age is not None and age_s > self.max_age:
                reasons.append(f"ended {_human_duration(age_s)} ago")
            if c in over_size:
                reasons.append(f"beyond the newest {_human_size(self.max_size or 0)}")
            keep = None
            if not reasons:
                keep = "within the limits"
            elif c in current:
                keep = "the current cycle"
            elif need_from is not None and c >= need_from[0]:
                keep = (f"named tailer {need_from[1]!r} still needs it" if need_from[0] >= 0
                        else f"named tailer {need_from[1]!r} has not started reading")
            elif p in open_by:
                keep = "open in process " + ", ".join(str(x) for x in open_by[p])
            if keep is not None:
                decisions.append(RetentionDecision(c, p, size, "keep", keep))
                continue
            dest = (os.path.join(self.move_to, os.path.basename(p))
                    if self.move_to is not None else None)
            decisions.append(RetentionDecision(c, p, size, "move" if dest else "delete",
                                               "; ".join(reasons), dest))
        # only a prefix of the queue goes: fix up the wording of what follows a kept one
        out = []
        blocked = False
        for d in decisions:
            if d.action == "keep":
                blocked = True
                out.append(d)
            elif blocked:
                out.append(RetentionDecision(d.cycle, d.path, d.disk_bytes, "keep",
                                             f"{d.reason}, but an older cycle is kept "
                                             "(files only go from the oldest end)"))
            else:
                out.append(d)
        if progress is not None:
            progress(len(info), len(info))
        return out

    def apply(self, *, dry_run: bool = False,
              progress: Progress | None = None) -> list[RetentionDecision]:
        """Delete or move the files the policy selects; with ``dry_run`` only
        report.  Returns every decision (``done`` set on the files handled)."""
        with self._lock:
            q, own = self._open()
            try:
                plan = self._plan(q, None)
                if dry_run:
                    return plan
                go = [d for d in plan if d.action != "keep"]
                out = []
                for n, d in enumerate(plan):
                    if d.action == "keep":
                        out.append(d)
                        continue
                    # check again just before: a process may have opened it meanwhile
                    if files_open_by_processes([d.path]):
                        out.append(RetentionDecision(d.cycle, d.path, d.disk_bytes, "keep",
                                                     "opened by a process meanwhile"))
                        break
                    if d.destination is not None:
                        os.makedirs(os.path.dirname(d.destination), exist_ok=True)
                        shutil.move(d.path, d.destination)
                    else:
                        os.unlink(d.path)
                    done = RetentionDecision(d.cycle, d.path, d.disk_bytes, d.action, d.reason,
                                             d.destination, True)
                    out.append(done)
                    if progress is not None:
                        progress(n + 1, len(go))
                    if self.on_removed is not None:
                        self.on_removed(done)
                out += plan[len(out):]
                if any(d.done for d in out):
                    self._update_listing(q)
                return out
            finally:
                if own:
                    q.close()

    @staticmethod
    def _update_listing(q: Queue) -> None:
        q._invalidate_listing()
        remaining = q.cycles()
        if q._meta is None or not remaining:
            return
        if q.read_only:
            meta = TableStore(q._meta.path, read_only=False, timeout=2.0)
            close = True
        else:
            meta, close = q._meta, False
        try:
            meta.set("listing.lowestCycle", remaining[0])
            meta.add("listing.modCount", 1)
        finally:
            if close:
                meta.close()


def _human_duration(s: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{s / n:.1f}{unit}"
    return f"{s:.0f}s"


def _human_size(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def start_of_last(q: Queue, n: int) -> int | None:
    """The index of the first of the last ``n`` excerpts of ``q`` (None if empty)."""
    rc = q.roll_cycle
    start = None
    left = n
    for c in reversed(q.cycles()):
        count = q.excerpts_in_cycle(c)
        if not count:
            continue
        if count >= left:
            return rc.to_index(c, count - left)
        left -= count
        start = rc.to_index(c, 0)
    return start
