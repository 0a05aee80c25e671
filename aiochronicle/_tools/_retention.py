"""Retention: delete (or move) a queue's old cycle files, by age or by the
disk space the newest ones may take, never one still needed::

    import aiochronicle as ac

    plan = ac.Retention("/data/md", max_age=7 * 86400).apply()

A :class:`Retention` is a store file listener: added to an open queue with
:func:`~aiochronicle.add_store_file_listener` it runs whenever a cycle is
released, so old cycles go as soon as the appender rolls past them.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .._format._tablestore import TableStore
from .._objects._queue import Queue, cycles_of, open_existing_queue
from .._storage._cycles import Cycles
from ._dump import Progress
from ._listeners import files_open_by_processes
from ._stats import allocated_bytes, named_tailer_keys

__all__ = ["Retention", "RetentionDecision", "human_size"]


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
            return self._plan(cycles_of(q), progress)
        finally:
            if own:
                q.close()

    def _plan(self, files: Cycles, progress: Progress | None) -> list[RetentionDecision]:
        files.refresh()
        cycles = files.listing()
        if not cycles:
            return []
        rc = files.roll_cycle
        now = files.time_provider.current_time_millis()
        current = {cycles[-1], files.current()}
        need_from: tuple[int, str] | None = None
        for name, _key, stored in named_tailer_keys(files.meta):
            tc = rc.to_cycle(stored) if stored else -1
            if need_from is None or tc < need_from[0]:
                need_from = (tc, name)
        info = []
        for c in cycles:
            p = files.path_of(c)
            try:
                info.append((c, p, allocated_bytes(os.stat(p))))
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
            end_ms = files.span_ms(c)[1]  # (a zone's days: 23 to 25 hours)
            age_s = (now - end_ms) / 1000.0
            reasons = []
            if self.max_age is not None and age_s > self.max_age:
                reasons.append(f"ended {_human_duration(age_s)} ago")
            if c in over_size:
                reasons.append(f"beyond the newest {human_size(self.max_size or 0)}")
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
                plan = self._plan(cycles_of(q), None)
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
                    self._update_listing(cycles_of(q))
                return out
            finally:
                if own:
                    q.close()

    @staticmethod
    def _update_listing(files: Cycles) -> None:
        files.refresh()
        remaining = files.listing()
        if files.meta is None or not remaining:
            return
        if files.read_only:
            meta = TableStore(files.meta.path, read_only=False, timeout=2.0)
            close = True
        else:
            meta, close = files.meta, False
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


def human_size(n: int) -> str:
    """``n`` bytes in words: ``512 B``, ``1.5 KiB``, ``2.0 GiB``."""
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"
