"""Time providers: the clock an appender consults to decide its cycle."""

from __future__ import annotations

import time
import weakref
from typing import Protocol, runtime_checkable

from .._core._native import Cell, new_int64

__all__ = ["SetTimeProvider", "SystemTimeProvider", "TimeProvider", "clock_cell"]


@runtime_checkable
class TimeProvider(Protocol):
    """Anything with ``current_time_millis()``: milliseconds since the Unix epoch."""

    def current_time_millis(self) -> int:
        """The current time in milliseconds since the Unix epoch (UTC)."""
        ...


class SystemTimeProvider:
    """The wall clock (``CLOCK_REALTIME``), read in the native core on every append."""

    INSTANCE: SystemTimeProvider

    def current_time_millis(self) -> int:
        """Milliseconds since the Unix epoch, from the system clock."""
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemTimeProvider()"


SystemTimeProvider.INSTANCE = SystemTimeProvider()


class SetTimeProvider:
    """A clock that only moves when told to: for tests and replays.

    The value lives in native memory, so appenders read it without calling
    back into Python::

        clock = SetTimeProvider(1_637_251_500_000)
        clock.advance_millis(86_400_000)   # one day later: the next append rolls
    """

    __slots__ = ("__weakref__", "_cell")

    def __init__(self, initial_millis: int = 0) -> None:
        self._cell: Cell = new_int64(initial_millis)
        _CELLS[self] = self._cell

    def current_time_millis(self) -> int:
        """The time this clock was set to, in milliseconds since the Unix epoch."""
        return int(self._cell[0])

    def set_millis(self, millis: int) -> None:
        """Set the clock to ``millis`` since the Unix epoch."""
        self._cell[0] = millis

    def advance_millis(self, millis: int) -> None:
        """Move the clock forward (or back, with a negative value) by ``millis``."""
        self._cell[0] += millis

    def __repr__(self) -> str:
        return f"SetTimeProvider({self.current_time_millis()})"


#: each SetTimeProvider's native cell (what :func:`clock_cell` gives)
_CELLS: weakref.WeakKeyDictionary[SetTimeProvider, Cell] = weakref.WeakKeyDictionary()


def clock_cell(clock: SetTimeProvider) -> Cell:
    """The ``int64_t`` ``clock``'s time is kept in: what a native appender
    reads before each append (for this package; not a member of the public
    class)."""
    return _CELLS[clock]
