"""The pretoucher: keeps appenders off page faults and file creation."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .._core._errors import DiskFullError, QueueClosedError

if TYPE_CHECKING:
    from .._storage._cycles import Cycles
    from ._queueview import QueueView

__all__ = ["Pretoucher"]


class Pretoucher:
    """The pretoucher's work, below the queue: the public class is
    :class:`aiochronicle.Pretoucher` (``_queue.Pretoucher``), which subclasses
    this one to name its queue."""

    def __init__(self, cycles: Cycles, queue: QueueView, headroom: int, preroll: float) -> None:
        """A pretoucher of ``cycles``, made by ``queue`` (:meth:`Queue.pretoucher`,
        the documented way in)."""
        self.queue = queue
        """The queue this object belongs to."""
        self._cycles = cycles
        self.headroom = headroom
        self.preroll = preroll
        """Seconds before a roll at which the next cycle's file is created."""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._touched: tuple[int, int] = (-1, 0)
        self.errors = 0
        """Passes that failed: a full disk (both ways), or any other error of
        a pass of the background thread (:meth:`execute` raises those)."""

    def __repr__(self) -> str:
        running = self._thread is not None and self._thread.is_alive()
        return (f"<Pretoucher {self.queue.path!r} headroom={self.headroom} "
                f"{'running' if running else 'stopped'}>")

    def execute(self) -> bool:
        """One pass: touch ahead of the write position; pre-create the next
        cycle.  False when the disk was full (counted in :attr:`errors`; the
        appender that needs the blocks raises :class:`DiskFullError`).

        Raises:
            QueueClosedError: the queue is closed.
        """
        try:
            self._pass()
        except DiskFullError:
            self.errors += 1
            return False
        return True

    def _pass(self) -> None:
        q = self._cycles
        cycle = q.current()
        st = q.acquire(cycle)
        if st is None:
            # files are only ever created under the write lock (see _discard)
            st = q.create(cycle)
        try:
            end = st.end()[0]
            start = self._touched[1] if self._touched[0] == cycle else end
            start = max(start, end)
            stop = end + self.headroom
            if stop > start:
                st.file.ensure(stop)
                st.file.reserve(start, stop)
                st.file.populate(start, stop)
                self._touched = (cycle, stop)
        finally:
            q.release(st)
        now = q.time_provider.current_time_millis()
        next_start = q.span_ms(cycle + 1)[0]
        if next_start - now <= self.preroll * 1000 and cycle + 1 not in q.listing():
            q.release(q.create(cycle + 1))

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

