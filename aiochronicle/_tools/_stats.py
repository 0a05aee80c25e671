"""Queue statistics: cycles, excerpt counts, bytes on disk, first and last
index per cycle, locks, and each named tailer's lag (``aiochronicle stats``,
the figures of the monitor).  O(cycles), never O(excerpts)::

    import aiochronicle as ac

    print(ac.queue_stats("/data/md").total_excerpts)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .._format._tablestore import TableStore
from .._objects._queue import Queue, cycles_of, open_existing_queue
from .._storage._writelock import LockState, lock_states_in

__all__ = ["CycleStats", "QueueStats", "SealedCycles", "TailerStats", "allocated_bytes",
           "named_tailer_keys", "queue_stats"]


def allocated_bytes(st: os.stat_result) -> int:
    """The disk blocks a file takes, in bytes (``st_blocks * 512``: a sparse
    file's holes take none, an all-zero one made by ``truncate`` none at
    all); its apparent size only where the system reports no blocks."""
    blocks = getattr(st, "st_blocks", None)
    return st.st_size if blocks is None else int(blocks) * 512


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
        """Disk blocks the cycle files take, in bytes (allocated: they are
        sparse, so less than :attr:`file_bytes`)."""
        return sum(c.disk_bytes for c in self.cycles)

    @property
    def file_bytes(self) -> int:
        """The cycle files' apparent sizes added up (holes counted)."""
        return sum(c.file_size for c in self.cycles)

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {
            "path": self.path, "roll_cycle": self.roll_cycle, "epoch": self.epoch,
            "first_index": self.first_index, "last_index": self.last_index,
            "total_excerpts": self.total_excerpts, "total_bytes": self.total_bytes,
            "disk_bytes": self.disk_bytes, "file_bytes": self.file_bytes,
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


def named_tailer_keys(meta: TableStore | None) -> list[tuple[str, str, int]]:
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
    files = cycles_of(q)
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
            st = files.acquire(cyc)
            if st is None:
                cycles.append(CycleStats(cyc, p, 0, 0, fs.st_size, allocated_bytes(fs), None, None,
                                         False))
                continue
            try:
                end, count, eof = st.end()
                # where its first excerpt starts (after the index pages)
                code, start_pos = st.seek(0) if count else (1, end)
                ends[cyc] = (end, start_pos if code == 0 else end)
            finally:
                files.release(st)
            cs = CycleStats(
                cyc, p, count, end, fs.st_size, allocated_bytes(fs),
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
        meta = files.use_meta()  # mapped until done, whoever closes the queue meanwhile
        try:
            keys = named_tailer_keys(meta)
            locks = lock_states_in(meta)
        finally:
            files.done_with_meta()
        for name, key_, stored in keys:
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
                    st = files.acquire(cyc)
                    if st is None:
                        continue
                    try:
                        code, pos = st.seek(ts)
                    finally:
                        files.release(st)
                    if code == 0:
                        lag_bytes += max(0, end - pos)
            tailers.append(TailerStats(name, key_, index, lag, lag_bytes))
        return QueueStats(q.path, rc.name, q.epoch, cycles, tailers, locks, first, last)
    finally:
        if own:
            q.close()
