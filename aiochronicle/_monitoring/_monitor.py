"""Figures of running queues, for watching them: what ``aiochronicle
metrics``, ``top`` and ``latency`` show, and what :mod:`aiochronicle.metrics`
exports to Prometheus.

Reading figures is cheap and safe.  A :class:`QueueWatch` takes its figures
from :func:`queue_stats` (so they are the numbers ``aiochronicle stats``
prints): it opens the queue read-only, never takes or touches the write
lock, finds each cycle's end from its write position and each named tailer's
position from the index, and remembers the cycles that have ended, so a look
costs a ``stat`` per cycle file and opens only the cycles still written.

Per-hop latency comes from the message histories method writers put in
excerpts (:func:`scan_latency`); it has to read every excerpt, streams them,
and keeps a bounded histogram per hop (:class:`LatencyHistogram`), whatever the
length of the queue.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .._core._errors import ChronicleError, NoSuchQueueError, WireError
from .._format._history import MessageHistory
from .._format._rollcycles import RollCycle
from .._messages._methods import call_history
from .._objects._queue import Queue, Tailer, open_existing_queue
from .._storage._excerpt import Batch
from .._storage._settings import METADATA_FILE
from .._storage._writelock import WRITE_LOCK
from .._tools._stats import QueueStats, SealedCycles, TailerStats, queue_stats

__all__ = [
    "PERCENTILES",
    "ExcerptTime",
    "HopLatency",
    "LatencyHistogram",
    "LatencyReport",
    "QueueFigures",
    "QueueWatch",
    "RateTracker",
    "hop_names",
    "scan_latency",
]


# --------------------------------------------------------------------------
# queue figures
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExcerptTime:
    """How long ago an excerpt was written, and how that was found.

    Attributes:
        age: seconds since it was written (0 or more).
        source: ``"history"`` when the excerpt carries a message history (its
            last timing, the write: ``CLOCK_MONOTONIC`` of this host, exact) or
            ``"cycle"`` when it does not (then the start of its cycle: an upper
            bound, off by at most one cycle's length).
    """

    age: float
    source: str


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One look at a queue (see :meth:`QueueWatch.figures`).

    Attributes:
        path: the queue's path as it was given.
        time: ``time.monotonic()`` when it was taken.
        stats: what :func:`queue_stats` found (cycles, counts, named tailers).
        write_lock_holder: the PID holding ``chronicle.write.lock``, None when free.
        write_lock_held: seconds this watch has seen the lock held by that
            holder with no excerpt written meanwhile (0 when free; a lower
            bound: the first look that finds it held counts from then).
        write_lock_alive: False when the holder is a process that no longer
            exists (a writer killed while writing: the lock is freed by the
            next writer that opens the queue); True otherwise.
        roll_cycle: the queue's roll cycle (to split indices in cycle and sequence).
        last_excerpt: when the last excerpt was written (None: no excerpt).
        tailer_lag_time: for each named tailer, when the oldest excerpt it
            has still to read was written (absent: nothing left to read).
        tailer_reads: for each named tailer, the excerpts this watch has
            seen it read (a count that only grows: the excerpts up to its
            position at the first look, then each move forward).
    """

    path: str
    time: float
    stats: QueueStats
    write_lock_holder: int | None
    write_lock_held: float
    write_lock_alive: bool = True
    roll_cycle: RollCycle | None = None
    last_excerpt: ExcerptTime | None = None
    tailer_lag_time: dict[str, ExcerptTime] = field(default_factory=dict)
    tailer_reads: dict[str, int] = field(default_factory=dict)

    @property
    def excerpts(self) -> int:
        """Excerpts in the queue's cycle files."""
        return self.stats.total_excerpts

    @property
    def tailers(self) -> list[TailerStats]:
        """The named tailers with their position and lag."""
        return self.stats.tailers


class QueueWatch:
    """Figures of one queue, taken again at each :meth:`figures` call.

    The queue stays open (read-only) between looks, and is opened again when
    its directory or its ``metadata.cq4t`` is no longer the one it was (a
    queue deleted and made again); the figures of ended cycles are kept.
    """

    def __init__(self, path: str, *, wait: bool = False) -> None:
        """Watch the queue at ``path``.  It must exist unless ``wait`` is
        true: then a missing queue is looked for again at each look (and
        :meth:`figures` raises :class:`NoSuchQueueError` until it appears).

        Raises:
            NoSuchQueueError: nothing at ``path`` (and ``wait`` false).
            NotAQueueError: ``path`` is not a queue directory.
            QueueAccessError: the queue may not be read.
        """
        self.path = path
        self._sealed: SealedCycles = {}
        # (lock value, bytes written then, monotonic time first seen so)
        self._held: tuple[int, int, float] | None = None
        self._queue: Queue | None = None
        self._reader: Tailer | None = None
        self._identity: tuple[tuple[int, int], tuple[int, int] | None] | None = None
        # named tailer -> (reads counted so far, its index at the last look)
        self._reads: dict[str, tuple[int, int]] = {}
        if not (wait and not os.path.lexists(path)):
            self._open()

    def _where(self) -> tuple[tuple[int, int], tuple[int, int] | None]:
        d = os.stat(self.path)
        try:
            m = os.stat(os.path.join(self.path, METADATA_FILE))
        except FileNotFoundError:
            return (d.st_dev, d.st_ino), None
        return (d.st_dev, d.st_ino), (m.st_dev, m.st_ino)

    def _open(self) -> Queue:
        self.close()
        self._sealed.clear()
        q = open_existing_queue(self.path)
        self._queue, self._identity = q, self._where()
        return q

    def figures(self) -> QueueFigures:
        """Look at the queue now.

        Raises:
            NoSuchQueueError, NotAQueueError, QueueAccessError: the queue is
                gone or unreadable now.
        """
        q = self._queue
        try:
            same = q is not None and self._where() == self._identity
        except FileNotFoundError:
            self.close()
            raise NoSuchQueueError(f"no such queue: {self.path}") from None
        if q is None or not same:
            q = self._open()
        try:
            stats = queue_stats(q, sealed=self._sealed)
        except BaseException:
            self.close()  # opened afresh at the next look
            raise
        now = time.monotonic()
        lock = next((lk for lk in stats.locks if lk.key == WRITE_LOCK), None)
        holder: int | None = None
        held = 0.0
        alive = True
        if lock is None or not lock.locked:
            self._held = None
        else:
            holder = lock.holder
            alive = lock.alive
            seen = self._held
            if seen is None or seen[0] != lock.value or seen[1] != stats.total_bytes:
                self._held = (lock.value, stats.total_bytes, now)
            else:
                held = now - seen[2]
        try:
            last = (None if stats.last_index is None
                    else self._written(q, stats.last_index))
            lag_time: dict[str, ExcerptTime] = {}
            reads: dict[str, int] = {}
            for t in stats.tailers:
                if t.lag_messages > 0:
                    oldest = _first_at_or_after(stats, t.index)
                    if oldest is not None:
                        lag_time[t.name] = self._written(q, oldest)
                reads[t.name] = self._count_reads(q, t.name, t.index, stats.first_index)
        except BaseException:
            self.close()
            raise
        return QueueFigures(self.path, now, stats, holder, held, alive, q.roll_cycle,
                            last, lag_time, reads)

    def _count_reads(self, q: Queue, name: str, index: int, first: int | None) -> int:
        seen = self._reads.get(name)
        if seen is None:
            total = q.count_excerpts(first, index) if index and first is not None else 0
        else:
            total, before = seen
            if index > before and before:
                total += q.count_excerpts(before, index)
            elif index > before and first is not None:  # started since
                total += q.count_excerpts(first, index)
        self._reads[name] = (total, index)
        return total

    def _written(self, q: Queue, index: int) -> ExcerptTime:
        """When the excerpt at ``index`` (or the next one) was written."""
        rc = q.roll_cycle
        payload: bytes | None = None
        r = self._reader
        if r is None:
            r = self._reader = q.tailer()
        try:
            if r.move_to_index(index):
                ex = r.read_nowait()
                if ex is not None:
                    payload = ex.payload
        except ChronicleError:
            payload = None
        if payload is not None:
            try:
                h = call_history(payload)
            except WireError:
                h = None
            if h is not None and h.timings:
                age = (time.monotonic_ns() - h.timings[-1]) / 1e9
                return ExcerptTime(max(0.0, age), "history")
        start_ms = rc.resolve_epoch(q.epoch) + (index >> rc.cycle_shift) * rc.length_ms
        return ExcerptTime(max(0.0, time.time() - start_ms / 1000.0), "cycle")

    def close(self) -> None:
        """Let go of the queue (a later look opens it again)."""
        r, self._reader = self._reader, None
        if r is not None:
            r.close()
        q, self._queue = self._queue, None
        if q is not None:
            q.close()


def _first_at_or_after(stats: QueueStats, index: int) -> int | None:
    """The index of the first excerpt at ``index`` or after (a tailer's next
    index may be one past the end of its cycle); None when there is none."""
    for c in stats.cycles:
        if c.last_index is None or c.first_index is None or c.last_index < index:
            continue
        return max(index, c.first_index)
    return None


class RateTracker:
    """Rates between two looks at the same queues: excerpts appended per
    second, and excerpts each named tailer read per second (the excerpts
    appended meanwhile less the growth of its lag)."""

    def __init__(self) -> None:
        """No look yet: the first rates are None."""
        self._prev: dict[str, QueueFigures] = {}

    def update(self, f: QueueFigures) -> tuple[float | None, dict[str, float | None]]:
        """(append rate, {named tailer: read rate}) since the last look at
        ``f.path``; None where there was no earlier look."""
        prev = self._prev.get(f.path)
        self._prev[f.path] = f
        if prev is None or f.time <= prev.time:
            return None, {t.name: None for t in f.tailers}
        dt = f.time - prev.time
        appended = max(0, f.excerpts - prev.excerpts)
        before = {t.name: t.lag_messages for t in prev.tailers}
        reads: dict[str, float | None] = {}
        for t in f.tailers:
            lag0 = before.get(t.name)
            reads[t.name] = (None if lag0 is None
                             else max(0, appended - (t.lag_messages - lag0)) / dt)
        return appended / dt, reads


# --------------------------------------------------------------------------
# latency from message histories
# --------------------------------------------------------------------------

#: the percentiles ``aiochronicle latency`` reports
PERCENTILES = (50.0, 90.0, 99.0, 99.9)

_SUB_BITS = 7
_SUB = 1 << _SUB_BITS  # buckets per power of two: 1/128 relative precision


class LatencyHistogram:
    """Nanosecond values in log-linear buckets: bounded memory (a few
    thousand buckets at most, whatever the count) and percentiles within
    1/128 (0.8 %) of the exact ones; count, min and max are exact.
    Negative values (clocks of other hosts) count as 0."""

    __slots__ = ("buckets", "count", "max", "min", "total")

    def __init__(self) -> None:
        """An empty histogram."""
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    @staticmethod
    def _bucket(v: int) -> int:
        shift = max(0, v.bit_length() - _SUB_BITS - 1)
        return (shift << _SUB_BITS) + (v >> shift)

    @staticmethod
    def _bounds(b: int) -> tuple[int, int]:
        """[low, high) of the values in bucket ``b``."""
        if b < 2 * _SUB:
            return b, b + 1
        shift = (b >> _SUB_BITS) - 1
        m = b - (shift << _SUB_BITS)
        return m << shift, (m + 1) << shift

    def add(self, ns: int) -> None:
        """Count one value."""
        v = ns if ns > 0 else 0
        b = self._bucket(v)
        self.buckets[b] = self.buckets.get(b, 0) + 1
        if not self.count or v < self.min:
            self.min = v
        if v > self.max:
            self.max = v
        self.count += 1
        self.total += v

    def percentile(self, p: float) -> float:
        """The value below which ``p`` percent of the values lie (nearest
        rank, the middle of its bucket, within [min, max]); 0 when empty."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(p / 100.0 * self.count))
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= rank:
                lo, hi = self._bounds(b)
                return float(min(self.max, max(self.min, (lo + hi - 1) / 2)))
        return float(self.max)

    def cumulative(self) -> Iterator[tuple[float, float]]:
        """(value, fraction of values at or below it) at each bucket, for plots."""
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            hi = self._bounds(b)[1]
            yield float(min(self.max, hi - 1)), seen / self.count


def hop_names(history: MessageHistory) -> list[str]:
    """A name for each hop of ``history`` (each gap between two timings).

    Method writers and readers record a write, then for each queue read on
    the way its source and the read time, then the next write: timings
    ``w0, r1, w1, r2, w2...`` for sources ``s1, s2...``.  The hops are then
    ``queue s1`` (w0 to r1, through the queue) and ``service after s1`` (r1
    to w1, the handler's time).  A history as a handler sees it (see
    :func:`current_history`) ends with a read.  Histories of another shape
    get ``hop 1``, ``hop 2``...
    """
    n = len(history.sources)
    hops = len(history.timings) - 1
    if 2 * n - 1 <= hops <= 2 * n:
        names = []
        for k, (source, _) in enumerate(history.sources):
            names.append(f"{2 * k + 1}: queue {source} (write -> read)")
            names.append(f"{2 * k + 2}: service after {source} (read -> write)")
        return names[:hops]
    return [f"hop {k + 1}" for k in range(hops)]


@dataclass(frozen=True, slots=True)
class HopLatency:
    """The latency of one hop over the excerpts that have it (nanoseconds)."""

    hop: str
    histogram: LatencyHistogram

    @property
    def count(self) -> int:
        """Excerpts that have this hop."""
        return self.histogram.count

    def percentiles(self) -> dict[str, float]:
        """``p50``, ``p90``, ``p99``, ``p99.9`` and ``max`` in nanoseconds."""
        out = {f"p{p:g}": self.histogram.percentile(p) for p in PERCENTILES}
        out["max"] = float(self.histogram.max)
        return out


@dataclass(frozen=True, slots=True)
class LatencyReport:
    """What :func:`scan_latency` found.

    Attributes:
        path: the queue.
        excerpts: excerpts read.
        with_history: excerpts that carry a message history.
        damaged: excerpts whose history could not be read.
        hops: each hop's latencies, in hop order.
    """

    path: str
    excerpts: int
    with_history: int
    damaged: int
    hops: list[HopLatency]

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON (times in nanoseconds)."""
        return {"path": self.path, "excerpts": self.excerpts,
                "with_history": self.with_history, "damaged": self.damaged,
                "hops": [{"hop": h.hop, "count": h.count, **h.percentiles()}
                         for h in self.hops]}


def _hop_order(name: str) -> tuple[int, str]:
    head = name.split(":", 1)[0].removeprefix("hop ")
    return (int(head) if head.isdigit() else 1 << 30), name


def scan_latency(path: str, *, progress: Callable[[int, int], None] | None = None,
                 batch: int = 4096) -> LatencyReport:
    """Read every excerpt of the queue at ``path`` (read-only) and gather the
    latency of each hop of their message histories.

    Memory stays bounded (one batch of excerpts and one histogram per hop
    name); ``progress(done, total)`` is called after each batch.
    """
    q = open_existing_queue(path)
    hops: dict[str, LatencyHistogram] = {}
    names: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    excerpts = with_history = damaged = 0
    try:
        total = q.entry_count()
        t = q.tailer()
        try:
            while True:
                got = t.read_many(batch)
                if not len(got):
                    break
                for payload in _payloads(got):
                    excerpts += 1
                    try:
                        h = call_history(payload)
                    except WireError:
                        damaged += 1
                        continue
                    if h is None or len(h.timings) < 2:
                        if h is not None:
                            with_history += 1
                        continue
                    with_history += 1
                    shape = (len(h.timings), tuple(s for s, _ in h.sources))
                    labels = names.get(shape)
                    if labels is None:
                        labels = names[shape] = hop_names(h)
                    for label, ns in zip(labels, h.latencies_ns(), strict=True):
                        hist = hops.get(label)
                        if hist is None:
                            hist = hops[label] = LatencyHistogram()
                        hist.add(ns)
                if progress is not None:
                    progress(excerpts, max(total, excerpts))
        finally:
            t.close()
    finally:
        q.close()
    return LatencyReport(path, excerpts, with_history, damaged,
                         [HopLatency(k, hops[k]) for k in sorted(hops, key=_hop_order)])


def _payloads(batch: Batch) -> Iterator[memoryview]:
    o, d = batch.offsets, batch.data
    for i in range(len(batch)):
        yield d[o[i]:o[i + 1]]

