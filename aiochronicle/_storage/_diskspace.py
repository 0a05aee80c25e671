"""The disk-space monitor (Java's ``DiskSpaceMonitor``): warns before a
queue's disk fills.

One daemon thread per process looks at the free space of every watched
queue's file system (``statvfs``) at most every ``interval`` seconds, off the
append path (appending costs nothing more).  When the free space falls under
the threshold it logs a warning on the ``aiochronicle`` logger (once per fall;
an info record when it rises above again) and the queue's
:class:`DiskSpace` says so (``low``), which ``aiochronicle.metrics`` exports.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

__all__ = ["DiskSpace", "unwatch", "watch"]

_log = logging.getLogger("aiochronicle")


@dataclass
class DiskSpace:
    """What the disk-space monitor last saw of a queue's file system
    (:attr:`Queue.disk_space`).

    Attributes:
        path: the queue directory.
        threshold: the free space under which the monitor warns: bytes, or
            (below 1) a fraction of the file system's size.
        interval: seconds between looks.
        free_bytes: bytes free for unprivileged writers at the last look.
        total_bytes: the file system's size.
        low: whether ``free_bytes`` was under the threshold at the last look.
        checks: how many looks so far.
        watching: False once the queue is closed (no more looks).
    """

    path: str
    threshold: float
    interval: float
    free_bytes: int = -1
    total_bytes: int = -1
    low: bool = False
    checks: int = 0
    watching: bool = True

    @property
    def threshold_bytes(self) -> int:
        """The threshold in bytes (a fraction worked out from the size)."""
        if self.threshold < 1:
            return int(self.threshold * max(self.total_bytes, 0))
        return int(self.threshold)

    def check(self) -> None:
        """Look now (the monitor's thread does this every ``interval``)."""
        try:
            st = os.statvfs(self.path)
        except OSError as exc:
            _log.debug("disk-space monitor: cannot statvfs %s: %s", self.path, exc)
            return
        self.free_bytes = st.f_bavail * st.f_frsize
        self.total_bytes = st.f_blocks * st.f_frsize
        self.checks += 1
        low = self.free_bytes < self.threshold_bytes
        was, self.low = self.low, low
        if low and not was:
            _log.warning("disk space low for queue %s: %d bytes free of %d, under the "
                         "threshold of %d", self.path, self.free_bytes, self.total_bytes,
                         self.threshold_bytes)
        elif was and not low:
            _log.info("disk space for queue %s back above the threshold: %d bytes free",
                      self.path, self.free_bytes)


class _Monitor:
    """The one thread of this process that looks at every watched file system."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.watched: dict[int, tuple[DiskSpace, float]] = {}  # id -> (what, when due)
        self.pid = -1
        self.thread: threading.Thread | None = None

    def add(self, ds: DiskSpace) -> None:
        with self.cond:
            self.watched[id(ds)] = (ds, time.monotonic() + ds.interval)
            if self.thread is None or self.pid != os.getpid():  # none yet, or forked
                self.pid = os.getpid()
                self.thread = threading.Thread(target=self._run, name="aiochronicle-disk-space",
                                               daemon=True)
                self.thread.start()
            self.cond.notify()

    def _run(self) -> None:
        me = os.getpid()
        while True:
            with self.cond:
                if self.pid != me:
                    return
                for gone in [k for k, (d, _) in self.watched.items() if not d.watching]:
                    del self.watched[gone]
                now = time.monotonic()
                due = [d for d, when in self.watched.values() if when <= now]
                for d in due:
                    self.watched[id(d)] = (d, now + d.interval)
                nxt = min((when for _, when in self.watched.values()), default=now + 60.0)
                if not due:
                    self.cond.wait(max(0.0, nxt - now))
                    continue
            for d in due:  # statvfs outside the lock
                d.check()


_MONITOR = _Monitor()


def watch(path: str, threshold: float, interval: float) -> DiskSpace:
    """Watch the file system of ``path``: one look now, then every
    ``interval`` seconds from the monitor's thread."""
    if not threshold > 0:
        raise ValueError(f"disk_space_warning must be more than 0, got {threshold}")
    if not interval > 0:
        raise ValueError(f"disk_check_interval must be more than 0 seconds, got {interval}")
    ds = DiskSpace(path, threshold, interval)
    ds.check()
    _MONITOR.add(ds)
    return ds


def unwatch(ds: DiskSpace) -> None:
    """Stop watching (the queue closed).  Takes no lock (a close may run in a
    signal handler): the monitor's thread drops it at its next look."""
    ds.watching = False
