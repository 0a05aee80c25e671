"""Pausers: how a reader waits when there is nothing to read yet.

The family is Chronicle's (``net.openhft.chronicle.threads.Pauser``): busy,
timed-busy, yielding, balanced, sleepy and millis, each with ``pause()``,
``pause(timeout)``, ``reset()``, ``unpause()`` and counters.  Beyond Chronicle
there is ``notify``: it parks like ``sleepy`` but an aiochronicle appender in
any process wakes it within microseconds (see ``_notify``).

A pauser only plans *how* to wait next; the waiting itself is the waiter's
(``_waiter``, which takes the pauser's plan and waiting state as values:
:func:`wait_state`), done by the native core (spins, with the GIL released,
in bounded slices), by the operating system (yield, futex park), or, in
``apause()`` and async tailers, by the event loop (``await asyncio.sleep(0)``
between spin slices, a timer for parks).  Use one pauser per waiter: its
back-off state is per waiter.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._waiter import PARK, SPIN, SYNC_SPIN_SLICE, YIELD, WaitState, unpause, wait_async, wait_sync

__all__ = ["Pauser", "PauserMode", "PauserStatistics", "wait_state"]

US = 1_000
MS = 1_000_000

#: the longest an async waiter spins before it yields to the event loop
DEFAULT_SPIN_SLICE = 50 * US


class PauserMode(enum.Enum):
    """The kinds of pauser (Chronicle's ``PauserMode`` plus ``NOTIFY``)."""

    BALANCED = "balanced"
    BUSY = "busy"
    MILLI = "milli"
    NOTIFY = "notify"
    SLEEPY = "sleepy"
    TIMED_BUSY = "timedBusy"
    YIELDING = "yielding"

    def get(self) -> Pauser:
        """A new pauser of this kind with its default settings."""
        return _FACTORIES[self]()


@dataclass(frozen=True, slots=True)
class PauserStatistics:
    """A snapshot of a pauser's counters.

    Attributes:
        mode: the kind of pauser.
        count_paused: how many times it has paused (each ``pause()`` and each
            waiting step of a tailer: one spin slice, one yield or one park).
        time_paused_ns: nanoseconds spent pausing, in total.
    """

    mode: PauserMode
    count_paused: int
    time_paused_ns: int


class Pauser:
    """Decides how to wait when there is nothing to do; Chronicle's pauser family.

    Make one with a factory: :meth:`busy`, :meth:`timed_busy`,
    :meth:`yielding`, :meth:`balanced`, :meth:`sleepy`, :meth:`millis` or
    :meth:`notify`.  The usual loop is::

        while running:
            if do_work():
                pauser.reset()
            else:
                pauser.pause()          # or: await pauser.apause()

    Tailers take one (``queue.tailer(pauser=Pauser.balanced())``) and use it in
    ``await tailer.read()``, ``async for`` and ``read_blocking()``; there the
    spins watch the tailer's next header and end the moment an excerpt is
    committed.

    ``pause(timeout)`` raises :class:`TimeoutError` once ``timeout`` seconds
    have passed since the first timed pause after the last :meth:`reset` (as
    Chronicle's ``TimeoutException``).  :meth:`unpause` may be called from any
    thread; it ends a park (and a spin) early.
    """

    mode: PauserMode = PauserMode.BUSY
    #: parks may be woken by the queue's notify signal (see Pauser.notify)
    notify_wakeup: bool = False

    def __init__(self, *, spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> None:
        if not 0 < spin_slice <= 0.01:
            raise ValueError("spin_slice must be in (0, 0.01] seconds")
        self.spin_slice_ns = int(spin_slice * 1e9)
        self._count = 0
        self._timed_start = 0
        # how its waiter waits (aiochronicle._waiting._waiter): planned by this pauser
        self._w = WaitState(self._next_step, self.reset, self.spin_slice_ns, self.notify_wakeup)

    # -- factories --------------------------------------------------------
    @staticmethod
    def busy(*, spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> Pauser:
        """Always spin (lowest latency, a whole core while waiting).

        Unlike Chronicle's ``BusyPauser``, ``pause(timeout)`` is supported.
        """
        return BusyPauser(PauserMode.BUSY, spin_slice=spin_slice)

    @staticmethod
    def timed_busy(*, spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> Pauser:
        """Always spin; ``pause(timeout)`` raises TimeoutError after ``timeout``."""
        return BusyPauser(PauserMode.TIMED_BUSY, spin_slice=spin_slice)

    @staticmethod
    def yielding(min_busy: int = 2, *, spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> Pauser:
        """Spin for the first ``min_busy - 1`` pauses after a reset, then yield
        the CPU (a thread) or the event loop (a task) on every pause."""
        return YieldingPauser(min_busy, spin_slice=spin_slice)

    @staticmethod
    def balanced(*, spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> Pauser:
        """Spin for 10 ms after the first pause, then park for 200 µs growing to
        50 ms.  Fast while messages flow, cheap when idle.

        Chronicle's ``balanced()`` parks up to 20 ms; a wake-up of an asyncio
        loop costs 100-250 µs of CPU on a small VM, so 20 ms parks alone cost
        more than 1% of a core there.  ``balanced_up_to_millis(20)`` is
        Chronicle's exactly.
        """
        return Pauser.balanced_up_to_millis(50, spin_slice=spin_slice)

    @staticmethod
    def balanced_up_to_millis(max_millis: int, *,
                              spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> Pauser:
        """:meth:`balanced` with parks growing to ``max_millis`` ms."""
        return LongPauser(PauserMode.BALANCED, busy_ns=10 * MS, yield_ns=800 * US,
                          min_park_ns=200 * US, max_park_ns=max_millis * MS,
                          spin_slice=spin_slice)

    @staticmethod
    def sleepy(max_millis: int = 50, *,
               spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> Pauser:
        """No spinning: yield for 50 µs, then park for 500 µs growing to
        ``max_millis`` ms (Chronicle's ``sleepy()`` grows to 20 ms; see
        :meth:`balanced` for why the default here is 50)."""
        return LongPauser(PauserMode.SLEEPY, busy_ns=0, yield_ns=50 * US,
                          min_park_ns=500 * US, max_park_ns=max_millis * MS,
                          spin_slice=spin_slice)

    @staticmethod
    def millis(millis: int, max_millis: int | None = None, *,
               spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> Pauser:
        """Park ``millis`` ms on every pause; with ``max_millis``, park ``millis``
        ms growing to ``max_millis`` ms (Chronicle's ``millis(min, max)``)."""
        if millis < 0 or (max_millis is not None and max_millis < millis):
            raise ValueError("need 0 <= millis <= max_millis")
        if max_millis is None:
            return MilliPauser(millis, spin_slice=spin_slice)
        return LongPauser(PauserMode.MILLI, busy_ns=0, yield_ns=0, min_park_ns=millis * MS,
                          max_park_ns=max_millis * MS, spin_slice=spin_slice)

    @staticmethod
    def notify(spin: float = 0.0, *, min_park: float = 0.020, max_park: float = 0.100,
               spin_slice: float = DEFAULT_SPIN_SLICE / 1e9) -> Pauser:
        """Spin for ``spin`` seconds after the first pause (default none), then
        park for ``min_park`` growing to ``max_park`` seconds; a tailer's park
        ends within microseconds when an aiochronicle appender of the queue,
        in any process, commits an excerpt.  Excerpts from writers that do not
        notify (Java) are still found at the end of each park (so within
        ``min_park`` seconds of the last excerpt read, growing to
        ``max_park``).  Parks start long (20 ms) because a commit ends them:
        a park that ends on its timer wakes the loop for nothing.

        It stays hot while excerpts come faster than a wake-up from sleep
        takes: after two excerpts found less than 15 µs apart, each after a
        wait, it spins twice that gap (at most 15 µs) before it parks again.

        Outside a tailer it parks as :meth:`sleepy` does.
        """
        if spin < 0 or not 0 < min_park <= max_park:
            raise ValueError("need spin >= 0 and 0 < min_park <= max_park")
        p = LongPauser(PauserMode.NOTIFY, busy_ns=int(spin * 1e9), yield_ns=0,
                       min_park_ns=int(min_park * 1e9), max_park_ns=int(max_park * 1e9),
                       spin_slice=spin_slice)
        p.notify_wakeup = True
        p._w.set_notify(True)  # noqa: SLF001 - this class's own
        return p

    # -- state -----------------------------------------------------------
    def reset(self) -> None:
        """Start again from the first phase (call it after doing work)."""
        self._timed_start = 0

    def _plan(self, now: int) -> tuple[int, int]:
        """The next step: (SPIN, budget ns), (YIELD, 0) or (PARK, ns)."""
        raise NotImplementedError

    def _timed_plan(self, now: int, timeout: float | None) -> tuple[int, int]:
        """:meth:`_plan` for ``pause(timeout)``: raises TimeoutError when due."""
        if timeout is not None:
            if self._timed_start == 0:
                self._timed_start = now
            elif now - self._timed_start > timeout * 1e9:
                raise TimeoutError(f"{self!r} paused for more than {timeout}s")
        return self._plan(now)

    def _next_step(self, now: int, slice_ns: int, left_ns: int | None = None,
                   timeout: float | None = None) -> tuple[int, int]:
        """The plan of every waiter's next step (the waiter's ``plan``): (SPIN,
        budget ns), (YIELD, 0) or (PARK, ns), from the pauser's phase
        (:meth:`_plan`; :meth:`_timed_plan` with a ``timeout``), a spin cut to
        the waiter's ``slice_ns``, any step to the ``left_ns`` of its deadline;
        counted in :attr:`count_paused`."""
        kind, ns = self._plan(now) if timeout is None else self._timed_plan(now, timeout)
        if kind == SPIN and ns > slice_ns:
            ns = slice_ns
        if left_ns is not None and ns > left_ns:
            ns = left_ns
        self._count += 1
        return kind, ns

    @property
    def count_paused(self) -> int:
        """How many times this pauser paused."""
        return self._count

    @property
    def time_paused_ns(self) -> int:
        """Nanoseconds spent pausing, in total."""
        return self._w.paused_ns

    def statistics(self) -> PauserStatistics:
        """The counters, as an immutable snapshot."""
        return PauserStatistics(self.mode, self._count, self._w.paused_ns)

    def __repr__(self) -> str:
        return f"<Pauser {self.mode.value}>"

    # -- waiting (one step of aiochronicle._waiting._waiter's drivers) ----------------
    def pause(self, timeout: float | None = None) -> None:
        """Wait once, as the current phase says: spin (in native code, the GIL
        released), yield the CPU, or park (ended early by :meth:`unpause`).

        Raises:
            TimeoutError: ``timeout`` seconds have passed since the first
                timed pause after the last reset.
        """
        wait_sync(self._w, None, None, timeout, True)

    async def apause(self, timeout: float | None = None) -> None:
        """:meth:`pause` for a task: a spin lasts at most ``spin_slice`` and is
        followed by a turn of the event loop; a yield is a turn of the loop; a
        park is a timer that :meth:`unpause` ends early.

        Raises:
            TimeoutError: as :meth:`pause`.
        """
        await wait_async(self._w, None, timeout=timeout)

    # -- waking ----------------------------------------------------------
    def unpause(self) -> None:
        """End the current spin or park of this pauser's waiter early (from any
        thread); a no-op when it is not waiting."""
        unpause(self._w)


def wait_state(pauser: Pauser) -> WaitState:
    """How ``pauser``'s waiter waits: the value the waiting drivers
    (``aiochronicle._waiting._waiter``) take."""
    return pauser._w  # noqa: SLF001 - this module's own class


class BusyPauser(Pauser):
    """Always spin (``busy`` and ``timed_busy``)."""

    def __init__(self, mode: PauserMode, *, spin_slice: float) -> None:
        super().__init__(spin_slice=spin_slice)
        self.mode = mode

    def _plan(self, now: int) -> tuple[int, int]:
        return SPIN, SYNC_SPIN_SLICE


class YieldingPauser(Pauser):
    """Spin ``min_busy - 1`` times after a reset, then yield every time."""

    mode = PauserMode.YIELDING

    def __init__(self, min_busy: int, *, spin_slice: float) -> None:
        super().__init__(spin_slice=spin_slice)
        if min_busy < 1:
            raise ValueError("min_busy must be at least 1")
        self.min_busy = min_busy
        self._n = 0

    def reset(self) -> None:
        super().reset()
        self._n = 0

    def _plan(self, now: int) -> tuple[int, int]:
        self._n += 1
        if self._n < self.min_busy:
            return SPIN, self.spin_slice_ns
        return YIELD, 0

    def __repr__(self) -> str:
        return f"<Pauser yielding min_busy={self.min_busy}>"


class LongPauser(Pauser):
    """Spin, then yield, then park with a growing sleep (Chronicle's LongPauser).

    Measured from the first pause after a reset: spin while less than
    ``busy_ns`` has passed, yield while less than ``yield_ns`` has passed, then
    park ``min_park_ns``, each park ``p/64 + 10 µs`` longer, up to
    ``max_park_ns``.
    """

    def __init__(self, mode: PauserMode, *, busy_ns: int, yield_ns: int, min_park_ns: int,
                 max_park_ns: int, spin_slice: float) -> None:
        super().__init__(spin_slice=spin_slice)
        self.mode = mode
        self.busy_ns = busy_ns
        self.yield_ns = yield_ns
        self.min_park_ns = min_park_ns
        self.max_park_ns = max_park_ns
        self._first = 0
        self._park = min_park_ns

    def reset(self) -> None:
        # Pauser.reset's work too, without the call (once per wait of a tailer)
        self._timed_start = 0
        self._first = 0
        self._park = self.min_park_ns

    def _plan(self, now: int) -> tuple[int, int]:
        if self._first == 0:
            self._first = now
        elapsed = now - self._first
        if elapsed < self.busy_ns:
            return SPIN, self.busy_ns - elapsed
        if elapsed < self.yield_ns:
            return YIELD, 0
        p = self._park
        grown = p + (p >> 6) + 10 * US
        self._park = grown if grown < self.max_park_ns else self.max_park_ns
        return PARK, p

    def __repr__(self) -> str:
        return (f"<Pauser {self.mode.value} busy={self.busy_ns / 1e6:g}ms "
                f"park={self.min_park_ns / 1e6:g}..{self.max_park_ns / 1e6:g}ms>")


class MilliPauser(Pauser):
    """Park a fixed time on every pause; ``pause(timeout)`` parks ``timeout``
    instead (and never raises), as Chronicle's ``MilliPauser``."""

    mode = PauserMode.MILLI

    def __init__(self, millis: int, *, spin_slice: float) -> None:
        super().__init__(spin_slice=spin_slice)
        self.park_ns = millis * MS

    def _plan(self, now: int) -> tuple[int, int]:
        return PARK, self.park_ns

    def _timed_plan(self, now: int, timeout: float | None) -> tuple[int, int]:
        if timeout is None:
            return self._plan(now)
        return PARK, int(timeout * 1e9)

    def __repr__(self) -> str:
        return f"<Pauser milli {self.park_ns / 1e6:g}ms>"


_FACTORIES = {
    PauserMode.BALANCED: Pauser.balanced,
    PauserMode.BUSY: Pauser.busy,
    PauserMode.MILLI: lambda: Pauser.millis(1),
    PauserMode.NOTIFY: Pauser.notify,
    PauserMode.SLEEPY: Pauser.sleepy,
    PauserMode.TIMED_BUSY: Pauser.timed_busy,
    PauserMode.YIELDING: Pauser.yielding,
}
