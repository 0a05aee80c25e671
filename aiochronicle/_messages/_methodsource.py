"""What a method reader reads: its source (a tailer, as a small Protocol) and
how it takes excerpts from it, one at a time or ahead in batches (the
pending batch that ``native/hot.c`` dispatches from), plus the source that
routes metadata excerpts to the metadata handlers' reader.

A method reader never waits itself: its source's ``wait`` is the tailer's,
which the waiter drives (``_waiter``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from .._core._errors import QueueClosedError
from .._storage._excerpt import Batch, Excerpt, TailerDirection

if TYPE_CHECKING:
    import asyncio

    from .._waiting._pauser import Pauser

__all__ = ["ExcerptTaker", "MetadataRouted", "MethodSource"]


class MethodSource(Protocol):
    """What a method reader needs of a tailer: :meth:`Tailer.method_reader`
    hands one over (the tailer's reads, and its waits and saves)."""

    @property
    def tailer(self) -> object:
        """The tailer itself (``MethodReader.tailer``, shown by its repr)."""
        ...

    @property
    def name(self) -> str | None:
        """The named tailer's name, or None."""
        ...

    @property
    def direction(self) -> TailerDirection:
        """The tailer's direction."""
        ...

    @property
    def source_id(self) -> int:
        """The queue's ``source_id`` (message history is tracked when not 0)."""
        ...

    @property
    def checkpoint_every(self) -> int:
        """Excerpts between two turns given to the event loop."""
        ...

    @property
    def pauser(self) -> Pauser:
        """How the tailer waits (``unpause()`` ends a wait in progress)."""
        ...

    @property
    def closed(self) -> bool:
        """True once the tailer or its queue is closed."""
        ...

    def read_nowait(self) -> Excerpt | None:
        """The next excerpt, or None."""
        ...

    def read_many(self, max_count: int, max_bytes: int, /) -> Batch:
        """Up to ``max_count`` excerpts (about ``max_bytes`` of payload)."""
        ...

    def save(self) -> None:
        """A named tailer saves its position (what was handled is done)."""
        ...

    def wait(self, until: Callable[[], bool] | None,
             loop: asyncio.AbstractEventLoop | None,
             handle: Callable[[Excerpt], bool] | None, /) -> Awaitable[Excerpt | None]:
        """The next excerpt, waiting with the pauser; None as soon as ``until()``
        is true after a step that found nothing.  ``loop``: the running loop
        when the caller knows it (saves a lookup per wait), else None.
        ``handle``: the drain; the excerpts a wake-up finds go to ``handle``
        in the awaiting task, the wait going on while it returns True and
        ``until()`` stays false (``_waiter.wait_async``)."""
        ...


class ExcerptTaker:
    """The excerpt-taking side of a method reader (a mixin of
    :class:`~aiochronicle.MethodReader`): the pending batch read ahead from
    an unnamed forward source, or one excerpt at a time (a named source
    saves its position after each call handled)."""

    if not TYPE_CHECKING:  # no slots of its own (MethodReader's hold its state);
        __slots__ = ()      # mypy would see none of the attributes declared below

    _source: MethodSource
    _batch: bool
    _batch_count: int
    _batch_bytes: int
    _named: bool
    _stopping: bool
    # the pending batch (members of the native HotReader)
    _pend_i: int
    _pend_n: int
    _pend_data: Any
    _pend_off: Any
    _pend_idx: Any

    def _done(self) -> None:
        """A named tailer's saved position moves past what has been handled
        (at least once: an excerpt whose handler never returned, because the
        process died, is read again on restart)."""
        if self._named and self._pend_i >= self._pend_n:
            self._source.save()

    def _refill(self) -> bool:
        """Read the next excerpts into the pending batch; False when none."""
        batch = self._source.read_many(self._batch_count, self._batch_bytes)
        n = len(batch)
        if not n:
            return False
        # payload slices must be hashable read-only memoryviews: a small batch
        # is one already (read_many copied it out), a large one is copied
        data = batch.data
        self._pend_data = data if data.readonly else memoryview(bytes(data))
        self._pend_off = batch.offsets
        self._pend_idx = batch.indices
        self._pend_i = 0
        self._pend_n = n
        return True

    def _take(self) -> tuple[bytes | memoryview, int] | None:
        """The next excerpt (payload, index): from the pending batch, else read."""
        i = self._pend_i
        if i >= self._pend_n:
            if self._batch:
                if not self._refill():
                    return None
                i = 0
            else:
                ex = self._source.read_nowait()
                return None if ex is None else (ex.payload, ex.index)
        self._pend_i = i + 1
        o = self._pend_off
        return self._pend_data[o[i]:o[i + 1]], self._pend_idx[i]

    def _closed(self) -> bool:
        return self._source.closed

    def _poll_one(self) -> tuple[bytes | memoryview, int] | None:
        """One excerpt read from the tailer (none pending), or None."""
        try:
            ex = self._source.read_nowait()
        except QueueClosedError:
            if self._closed():
                self._stopping = True
                return None
            raise
        return None if ex is None else (ex.payload, ex.index)

    def _poll(self) -> tuple[bytes | memoryview, int] | None:
        try:
            return self._take()
        except QueueClosedError:
            if self._closed():
                self._stopping = True
                return None
            raise

    def _refill_open(self) -> bool:
        try:
            return self._refill()
        except QueueClosedError:
            if self._closed():
                self._stopping = True
                return False
            raise



class MetadataRouted:
    """A :class:`MethodSource` whose metadata excerpts go to the calls of
    ``meta`` (the ``process`` of a reader of the metadata handlers) as they
    are read; the reader over it sees the data excerpts only."""

    __slots__ = ("_meta", "_src", "name", "read_many", "save", "source_id", "tailer")

    def __init__(self, src: MethodSource,
                 meta: Callable[[bytes | memoryview, int], object]) -> None:
        self._src, self._meta = src, meta
        self.tailer, self.name, self.source_id = src.tailer, src.name, src.source_id
        self.read_many, self.save = src.read_many, src.save

    @property
    def direction(self) -> TailerDirection:
        return self._src.direction

    @property
    def checkpoint_every(self) -> int:
        return self._src.checkpoint_every

    @property
    def pauser(self) -> Pauser:
        return self._src.pauser

    @property
    def closed(self) -> bool:
        return self._src.closed

    def _routed(self, ex: Excerpt) -> bool:
        """True (handled here) for a metadata excerpt."""
        if not ex.metadata:
            return False
        self._meta(ex.payload, ex.index)
        return True

    def read_nowait(self) -> Excerpt | None:
        while True:
            ex = self._src.read_nowait()
            if ex is None or not self._routed(ex):
                return ex

    async def wait(self, until: Callable[[], bool] | None,
                   loop: asyncio.AbstractEventLoop | None,
                   handle: Callable[[Excerpt], bool] | None, /) -> Excerpt | None:
        h = None if handle is None else (lambda ex: self._routed(ex) or handle(ex))
        while True:
            ex = await self._src.wait(until, loop, h)
            if ex is None or not self._routed(ex):
                return ex
