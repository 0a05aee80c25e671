"""What the machinery of an appender, tailer or pretoucher holds of the queue
that made it.

Their ``queue`` attribute is, at run time, the :class:`~aiochronicle.Queue`
itself, and the public classes (``_queue.Appender``, ``_queue.Tailer``,
``_queue.Pretoucher``, defined beside ``Queue``) type it so.  Below the queue
module, the machinery types it as :class:`QueueView`, the queue's public
members but the factories (``appender()``, ``tailer()``, ``pretoucher()``),
without importing the queue module even for an annotation.  ``Queue``
satisfies the Protocol; mypy checks it where the queue hands itself to the
objects it makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .._format._clock import TimeProvider
    from .._format._rollcycles import RollCycle
    from .._messages._codecs import Codec
    from .._storage._settings import SyncMode, UnlockMode

__all__ = ["QueueView"]


class QueueView(Protocol):
    """The public members of a :class:`~aiochronicle.Queue` but its
    factories: what the machinery of an appender, tailer or pretoucher uses of
    the queue that made it (the public classes type ``.queue`` as ``Queue``)."""

    #: when appended excerpts are flushed to disk (``msync``)
    sync_mode: SyncMode
    #: with a sync mode: flush every this many excerpts
    sync_every: int
    #: with a sync mode: flush at least every this many seconds (None: by count)
    sync_interval: float | None
    #: seconds to wait for another process creating a cycle file before taking it over
    timeout: float
    #: seconds one holder may keep the write lock
    lock_timeout: float
    #: what a writer does with a lock held past ``lock_timeout``
    unlock_mode: UnlockMode

    @property
    def path(self) -> str:
        """The queue directory."""
        ...

    @property
    def time_provider(self) -> TimeProvider:
        """The clock that chooses the cycle of each append."""
        ...

    @property
    def block_size(self) -> int:
        """The size cycle files grow by."""
        ...

    @property
    def week_rule(self) -> str:
        """The week rule of a weekly roll cycle."""
        ...

    @property
    def source_id(self) -> int:
        """The queue's source id (0: none)."""
        ...

    @property
    def read_only(self) -> bool:
        """True for a queue opened read-only."""
        ...

    @property
    def sync_interval_ms(self) -> float | None:
        """``sync_interval`` in milliseconds."""
        ...

    @property
    def roll_cycle(self) -> RollCycle:
        """The queue's roll cycle."""
        ...

    @property
    def epoch(self) -> int:
        """The epoch offset of the cycle numbering, in milliseconds."""
        ...

    @property
    def closed(self) -> bool:
        """True once the queue is closed."""
        ...

    @property
    def first_cycle(self) -> int | None:
        """The lowest cycle present, or None for an empty queue."""
        ...

    @property
    def last_cycle(self) -> int | None:
        """The highest cycle present, or None for an empty queue."""
        ...

    @property
    def first_index(self) -> int | None:
        """The index of the first excerpt (None when there is none)."""
        ...

    @property
    def last_index(self) -> int | None:
        """The index of the last excerpt (None when there is none)."""
        ...

    @property
    def codec(self) -> Codec:
        """The codec this queue's payloads carry."""
        ...

    def close(self) -> None:
        """Close the queue and everything made from it."""

    async def aclose(self) -> None:
        """:meth:`close` for ``async`` code."""

    def cycle_path(self, cycle: int) -> str:
        """The path of the file holding ``cycle``."""
        ...

    def current_cycle(self) -> int:
        """The cycle the clock is in now."""
        ...

    def cycles(self) -> list[int]:
        """Every cycle with a file in the directory, in order."""
        ...

    def refresh_directory_listing(self) -> None:
        """Rewrite ``listing.*`` in the metadata from the files present."""

    def excerpts_in_cycle(self, cycle: int) -> int:
        """How many excerpts ``cycle`` holds."""
        ...

    def count_excerpts(self, from_index: int, to_index: int) -> int:
        """The number of excerpts between two indices."""
        ...

    def entry_count(self) -> int:
        """The number of excerpts in the whole queue."""
        ...

    def table_store_get(self, key: str) -> int | None:
        """A named 64-bit value from ``metadata.cq4t``."""
        ...

    def table_store_put(self, key: str, value: int) -> None:
        """Store a named 64-bit value in ``metadata.cq4t``."""
