"""Who uses a queue's cycle files: listeners told when a queue object in this
process opens or closes one (Java's ``StoreFileListener``), and the
processes that have one open or mapped (``/proc``).

:class:`~aiochronicle.Retention` is such a listener, and asks the second
question before it removes a file.
"""

from __future__ import annotations

import contextlib
import os
import queue as _queue_mod
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

from .._objects._queue import Queue, cycles_of
from .._storage._cycles import Cycles

__all__ = ["StoreFileListener", "add_store_file_listener", "files_open_by_processes"]


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

    def __init__(self, files: Cycles) -> None:
        self.files = files
        self.listeners: list[tuple[StoreFileListener, bool]] = []
        self._events: _queue_mod.SimpleQueue[tuple[StoreFileListener, str, int, str] | None] = (
            _queue_mod.SimpleQueue())
        self._thread: threading.Thread | None = None
        files.listeners.append(self._emit)

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
                self.files.listeners.remove(self._emit)
            self._events.put(None)
            _HUBS.pop(id(self.files), None)


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
    files = cycles_of(q)
    hub = _HUBS.get(id(files))
    if hub is None or hub.files is not files:
        hub = _ListenerHub(files)
        _HUBS[id(files)] = hub
    hub.listeners.append((listener, background))

    def remove() -> None:
        hub.remove(listener)

    remove.flush = hub.flush  # type: ignore[attr-defined]
    return remove


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
