"""An asyncio driver feeder: tail a queue and hand micro-batches to Spark.

A :class:`Feeder` runs two tasks on the driver's event loop:

* the *reader* tails the queue with an async tailer, gathering excerpts with
  the native batch reader until ``max_rows`` (or ``max_bytes``) are in hand
  or ``linger`` seconds have passed since the first one, and turns each
  micro-batch into an Arrow table (the columns of the ``chronicle`` source);
* the *consumer* calls the user's callback with each micro-batch, as a Spark
  DataFrame when a session is given (``spark.createDataFrame(table)``).

Between them sits a bounded buffer of ``buffer`` micro-batches.  When Spark is
slower than the queue the buffer fills and the reader stops reading: the
tailer falls behind and nothing is lost, the excerpts wait in the queue.

With a ``name`` the feeder's position is kept in ``metadata.cq4t`` (as the
named tailer ``index.<name>``) and advanced only after the callback for a
micro-batch returned, so a restarted feeder resumes after the last micro-batch
handled: at-least-once, never a gap.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from array import array
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._messages._codecs import Codecs
from .._objects._queue import Queue, Tailer, open_queue
from .._storage._excerpt import Batch, Excerpt
from .._waiting._pauser import Pauser
from ._columns import Layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


__all__ = ["FeedBatch", "Feeder", "FeederStatistics"]


@dataclass
class FeedBatch:
    """One micro-batch handed to the callback."""

    table: pa.Table
    """The excerpts as an Arrow table (``index``, ``cycle``, ``sequence``,
    ``payload`` and any decoded columns)."""
    first_index: int
    last_index: int
    read_ns: int
    """``time.monotonic_ns()`` when the first excerpt of the batch was read."""
    df: DataFrame | None = None
    """The table as a Spark DataFrame when the feeder has a session."""

    @property
    def rows(self) -> int:
        return int(self.table.num_rows)


@dataclass
class FeederStatistics:
    """Counters of a feeder."""

    batches: int = 0
    rows: int = 0
    buffered: int = 0
    max_buffered: int = 0
    waits_for_room: int = 0
    """How often the reader found the buffer full (Spark slower than the queue)."""
    last_index: int | None = None
    callback_seconds: list[float] = field(default_factory=list)


Callback = Callable[[FeedBatch], Any]


class Feeder:
    """Feeds micro-batches of a queue to ``callback`` (see the module doc).

    Args:
        queue: an open :class:`~aiochronicle.Queue` or a queue directory.
        callback: called with each :class:`FeedBatch`; ``async def`` callbacks
            are awaited on the loop; plain ones run in a worker thread when the
            feeder has a session (Spark calls block), else on the loop
            (``in_thread`` says otherwise).
        spark: a SparkSession: each batch also comes as ``batch.df``.
        name: keep the position in the queue's metadata under this name and
            resume there (needs a writable queue).
        start: where an unnamed (or new) feeder starts: ``"start"``, ``"end"``
            or an index.
        max_rows, max_bytes: the most a micro-batch holds.
        linger: seconds a micro-batch waits for more excerpts after its first.
        buffer: micro-batches waiting for the callback before the reader pauses.
        options: read options of the ``chronicle`` source (``struct``,
            ``interface``, ``codec``, ``includePayload``, ``decodeErrors``).
        pauser: how the tailer waits (default ``Pauser.notify()``: parks, woken
            within microseconds by aiochronicle appenders in any process).
    """

    def __init__(self, queue: Queue | str | os.PathLike[str], callback: Callback, *,
                 spark: SparkSession | None = None, name: str | None = None,
                 start: str | int = "start", max_rows: int = 10_000,
                 max_bytes: int = 8 << 20, linger: float = 0.005, buffer: int = 4,
                 options: Mapping[str, str] | None = None, pauser: Pauser | None = None,
                 in_thread: bool | None = None) -> None:
        if max_rows < 1 or buffer < 1 or linger < 0:
            raise ValueError("max_rows and buffer must be positive, linger not negative")
        self._own = not isinstance(queue, Queue)
        self.queue = queue if isinstance(queue, Queue) else open_queue(
            queue, read_only=name is None and os.path.isdir(queue))
        self.callback = callback
        self.spark = spark
        self.name = name
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.linger = linger
        self.layout = Layout(dict(options or {}))
        codec = self.layout.codec_name
        self.codec = Codecs.get(codec) if codec else self.queue.codec
        self.in_thread = spark is not None if in_thread is None else in_thread
        self.buffer = buffer
        self._buffer: asyncio.Queue[FeedBatch | None] = asyncio.Queue()
        self._room: asyncio.Semaphore | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stats = FeederStatistics()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._tailer = self._open_tailer(start)
        if pauser is None:
            # no spinning beside Spark's threads; woken by aiochronicle appenders
            pauser = Pauser.notify()
        self._tailer.pauser = pauser

    # -- position ------------------------------------------------------------
    def _open_tailer(self, start: str | int) -> Tailer:
        q = self.queue
        self._mark: Tailer | None = None
        resume: int | None = None
        if self.name is not None:
            stored = q.table_store_get(f"index.{self.name}")  # before the tailer stores one
            self._mark = q.tailer(self.name)  # holds the position; never read
            if stored:
                resume = self._mark.index
        t = q.tailer()
        if resume is not None:
            _move(t, resume)
        elif start == "end":
            t.to_end()
        elif start != "start":
            _move(t, int(start))
        if self._mark is not None and resume is None:
            _move(self._mark, t.index)
        return t

    def _commit(self, next_index: int) -> None:
        if self._mark is not None:
            _move(self._mark, next_index)

    # -- running ---------------------------------------------------------------
    def statistics(self) -> FeederStatistics:
        """The counters so far."""
        self._stats.buffered = self._buffer.qsize()
        return self._stats

    async def run(self) -> None:
        """Feed until :meth:`stop` is called; the micro-batches already read
        are handed over before it returns."""
        self._room = asyncio.Semaphore(self.buffer)
        self._reader = asyncio.ensure_future(self._read_loop())
        consumer = asyncio.ensure_future(self._consume_loop())
        try:
            await consumer
        finally:
            self._reader.cancel()
            consumer.cancel()
            await asyncio.gather(self._reader, consumer, return_exceptions=True)
        if not self._reader.cancelled() and self._reader.exception() is not None:
            raise self._reader.exception()  # type: ignore[misc]

    def start(self) -> asyncio.Task[None]:
        """:meth:`run` as a task of the running loop."""
        return asyncio.ensure_future(self.run())

    def stop(self) -> None:
        """Stop reading; :meth:`run` returns once the micro-batches already
        read went through the callback."""
        self._stopping = True
        if self._reader is not None:
            self._reader.cancel()

    async def __aenter__(self) -> Feeder:
        self._task = self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()
        try:
            await self._task
        finally:
            self.close()

    def close(self) -> None:
        """Close the tailers (and the queue when the feeder opened it)."""
        self._tailer.close()
        if self._mark is not None:
            self._mark.close()
        if self._own:
            self.queue.close()

    async def _read_loop(self) -> None:
        room = self._room
        assert room is not None
        try:
            while not self._stopping:
                if room.locked():
                    self._stats.waits_for_room += 1
                await room.acquire()
                try:
                    batch = await self._gather()
                except BaseException:
                    room.release()
                    raise
                if batch is None:
                    room.release()
                    continue
                self._buffer.put_nowait(batch)
                self._stats.max_buffered = max(self._stats.max_buffered, self._buffer.qsize())
        finally:
            self._buffer.put_nowait(None)

    async def _gather(self) -> FeedBatch | None:
        """Read one micro-batch (None when stopping with nothing read)."""
        t = self._tailer
        parts: list[Batch] = []
        rows = size = 0
        first_ns = 0
        while rows < self.max_rows and size < self.max_bytes:
            b = t.read_many(self.max_rows - rows, self.max_bytes - size)
            if len(b):
                if not parts:
                    first_ns = time.monotonic_ns()
                parts.append(b)
                rows += len(b)
                size += b.offsets[len(b)]
                continue
            if self._stopping:
                break
            if parts:
                left = self.linger - (time.monotonic_ns() - first_ns) / 1e9
                if left <= 0:
                    break
                ex = await _read_within(t, left)
            else:
                ex = await t.read()  # wait (with the pauser) for the first one
            if ex is None:
                break
            if not parts:
                first_ns = time.monotonic_ns()
            parts.append(_one(ex))
            rows += 1
            size += len(ex.payload)
        if not parts:
            return None
        rc = self.queue.roll_cycle
        rbs = [self.layout.record_batch(p, rc.cycle_shift, self.codec, t) for p in parts]
        table = pa.Table.from_batches(rbs, schema=self.layout.arrow_schema)
        return FeedBatch(table, parts[0].indices[0], parts[-1].indices[-1], first_ns)

    async def _consume_loop(self) -> None:
        st = self._stats
        cb = self.callback
        is_async = inspect.iscoroutinefunction(cb)
        while True:
            batch = await self._buffer.get()
            if batch is None:
                return
            t0 = time.perf_counter()
            if self.spark is not None:
                batch.df = await asyncio.to_thread(self.spark.createDataFrame, batch.table)
            if is_async:
                await cb(batch)
            elif self.in_thread:
                res = await asyncio.to_thread(cb, batch)
                if isinstance(res, Awaitable):
                    await res
            else:
                cb(batch)
            st.callback_seconds.append(time.perf_counter() - t0)
            if len(st.callback_seconds) > 1000:
                del st.callback_seconds[:500]
            st.batches += 1
            st.rows += batch.rows
            st.last_index = batch.last_index
            self._commit(batch.last_index + 1)
            assert self._room is not None
            self._room.release()


async def _read_within(t: Tailer, seconds: float) -> Excerpt | None:
    try:
        return await asyncio.wait_for(t.read(), seconds)
    except TimeoutError:
        return None


def _one(ex: Excerpt) -> Batch:
    return Batch(memoryview(ex.payload), array("q", [0, len(ex.payload)]),
                 array("q", [ex.index]))


def _move(t: Tailer, index: int) -> None:
    """Position ``t`` at ``index`` (the next excerpt it reads is the first at or
    after it, in this cycle or a later one)."""
    if t.move_to_index(index):
        return
    q = t.queue
    rc = q.roll_cycle
    c = rc.to_cycle(index)
    if q.excerpts_in_cycle(c) >= rc.to_sequence(index) and c in q.cycles():
        return  # left at the next index to be written in that cycle
    later = [x for x in q.cycles() if x > c]
    if later:
        t.move_to_cycle(later[0])
    else:
        t.to_end()
