"""Method readers: read excerpts from a tailer and call the handler methods
they name (see ``_methods``).

Calls written in msgpack, JSON and BinaryWire (including Java's) are all
recognised by their first byte, whatever the queue records.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass
from time import monotonic_ns as _mono_ns
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

import msgspec

from ._codecs import CodecError, Codecs, typed_reader, wire_call_decoder
from ._errors import QueueClosedError
from ._excerpt import Batch, Excerpt, TailerDirection
from ._history import CURRENT, Incoming, MessageHistory, check_history
from ._methods import (
    FILTER_METHOD,
    JSON_RAWS,
    MP_ENC,
    MethodSpec,
    log,
    method_spec,
    msgpack_history,
    public_functions,
)
from ._native import HotReader, dispatch_mp
from ._wire import HistoryBytes, PlainReader, WireError

if TYPE_CHECKING:
    from ._pauser import Pauser

__all__ = ["MethodCall", "MethodReader", "MethodReaderStatistics", "MethodSource"]


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


_DECODE_ERRORS: Final = (msgspec.DecodeError, msgspec.ValidationError, CodecError, WireError,
                         UnicodeDecodeError, IndexError, ValueError, TypeError, KeyError)


# --------------------------------------------------------------------------
# Method readers
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MethodReaderStatistics:
    """Counters of a :class:`MethodReader`.

    Attributes:
        read: excerpts read.
        dispatched: method calls delivered to at least one handler.
        unknown: events no handler has a method for (skipped).
        ignored: calls skipped by a first-argument filter.
        errors: excerpts that could not be decoded (given to the error handler).
    """

    read: int
    dispatched: int
    unknown: int
    ignored: int
    errors: int


class MethodCall(NamedTuple):
    """A call a method reader dispatched (what ``async for`` yields)."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose
    method: str
    args: tuple[Any, ...]
    history: MessageHistory | None


class _Target:
    __slots__ = ("fn", "is_async", "owner")

    def __init__(self, fn: Callable[..., Any], owner: object) -> None:
        self.fn = fn
        self.owner = owner
        self.is_async = inspect.iscoroutinefunction(fn)


_Filter = Callable[[str, Any], bool]


class _Entry:
    """Everything the reader needs to dispatch one method name."""

    __slots__ = ("fast", "filtered", "filters", "has_async", "id", "jdecs", "json_dec",
                 "mp_dec", "mp_decs", "n", "name", "spec", "targets", "wire_decode",
                 "wire_fast", "wire_readers")

    def __init__(self, name: str, spec: MethodSpec) -> None:
        self.name = name
        self.spec = spec
        self.id = spec.id
        self.targets: list[_Target] = []
        self.filters: list[_Filter | None] = []
        self.has_async = False
        self.filtered = False
        self.fast: Callable[[Any], Any] | None = None  # the one sync target of a 1-arg call
        # the sync targets of an unfiltered call, when its arguments decode in C
        self.wire_fast: tuple[Callable[..., Any], ...] | None = None
        self.n = n = spec.arity
        mp, js = Codecs.MSGPACK, Codecs.JSON
        whole: Any = Any
        if n == 1:
            whole = spec.types[0]
        elif n > 1:
            whole = tuple.__class_getitem__(spec.types)
        self.mp_dec = mp.decoder(whole)
        self.json_dec = js.decoder(whole)
        self.mp_decs = [mp.decoder(t) for t in spec.types]
        self.jdecs = [js.decoder(t) for t in spec.types]
        self.wire_readers = [typed_reader(t) for t in spec.types]
        self.wire_decode = wire_call_decoder(list(spec.types))

    def add(self, target: _Target, flt: _Filter | None) -> None:
        self.targets.append(target)
        self.filters.append(flt)
        self.has_async = self.has_async or target.is_async
        self.filtered = self.filtered or flt is not None
        self.refresh()

    def refresh(self) -> None:
        t = self.targets
        plain = not self.filtered and not self.has_async
        self.fast = t[0].fn if len(t) == 1 and self.n == 1 and plain else None
        self.wire_fast = (tuple(x.fn for x in t) if plain and self.wire_decode is not None
                          else None)

    def fill(self, got: list[Any]) -> tuple[Any, ...]:
        """Complete positional arguments from defaults (an older writer sent
        fewer); drop extra ones (a newer writer sent more)."""
        params = self.spec.params
        if len(got) > len(params):
            return tuple(got[: len(params)])
        for p in params[len(got):]:
            if p.default is p.empty:
                raise CodecError(f"{self.name}: missing argument {p.name!r}")
            got.append(p.default)
        return tuple(got)

    def decode_rest(self, raws: list[Any], decs: list[Any], first: Any) -> tuple[Any, ...]:
        got = [first, *(decs[i].decode(raws[i]) for i in range(1, min(len(raws), len(decs))))]
        return self.fill(got)


_Live = list[_Target]


class MethodReader(HotReader):
    """Reads excerpts from a tailer and calls the matching handler methods.

    Create one with :meth:`Tailer.method_reader`.  Every public method of every
    handler is a target; several handlers with the same method are called in
    order.  Argument types come from the handler's annotations, or from the
    interface it inherits.

    * :meth:`read_one` handles one excerpt (sync handlers only);
      :meth:`read_available` handles all there are now.
    * ``await`` :meth:`run` handles excerpts as they come, waiting with the
      tailer's pauser; ``async for call in reader`` does the same and yields a
      :class:`MethodCall` per dispatched call.  Handlers may be ``async def``.
    * An event no handler knows is skipped and counted; an excerpt that cannot
      be decoded goes to ``on_error(exc, excerpt)`` (default: log a warning)
      and reading goes on.  Exceptions raised by handlers propagate (the tailer
      has already moved past that excerpt).

    Calls written in msgpack, JSON and BinaryWire (including Java's) are all
    recognised by their first byte, whatever the queue records.

    Reading ahead: on an unnamed forward tailer (unless ``batch=False``) the
    reader takes excerpts from the tailer in batches (``read_many``) and hands
    them out one by one, so the tailer's position may be ahead of the calls
    handled so far; the excerpts in between stay with the reader (nothing is
    lost if a handler raises).  A named tailer is read one excerpt at a time, so
    the index it persists is always that of the last call handled.
    """

    # slots: attribute reads on a subclass of a C type without them take
    # CPython's generic path (measured 10% of a BinaryWire read_one())
    __slots__ = ("__dict__", "__weakref__", "_batch", "_batch_bytes", "_batch_count", "_by_id",
                 "_by_name", "_chain_cache", "_common_at", "_dispatched", "_errors",
                 "_has_async", "_held", "_held_n", "_history", "_ignored", "_interfaces", "_last",
                 "_mp", "_named", "_names", "_read", "_reader_filter", "_recording", "_source",
                 "_source_id", "_stopping", "_track", "_unknown", "_wire_ids", "_wire_names",
                 "default_handler", "handlers", "metadata_reader", "on_error", "tailer")

    def __init__(self, source: MethodSource, *handlers: object,
                 on_error: Callable[[Exception, Excerpt], None] | None = None,
                 ignore_first_arg: Callable[[str, Any], bool] | None = None,
                 history: bool | None = None, interfaces: Iterable[type] = (),
                 batch: bool | None = None,
                 default_handler: Callable[[str | int, Any], Any] | None = None,
                 metadata_handlers: Iterable[object] = ()) -> None:
        """See :meth:`Tailer.method_reader` (which hands over ``source``)."""
        if not handlers and default_handler is None:
            raise TypeError("method_reader needs at least one handler")
        if default_handler is not None and not callable(default_handler):
            raise TypeError(f"default_handler must be callable, not {default_handler!r}")
        self.default_handler = default_handler
        """Called with ``(event, args)`` for each event no handler has a method
        for (Java's default parselet; None: such events are skipped)."""
        self.metadata_reader: MethodReader | None = None
        """The reader of the metadata excerpts' calls (``metadata_handlers``)."""
        meta_handlers = tuple(metadata_handlers)
        if meta_handlers:
            if any(inspect.iscoroutinefunction(fn) for h in meta_handlers
                   for fn in public_functions(type(h)).values()):
                raise TypeError("metadata handlers must be plain (not async) methods")
            self.metadata_reader = MethodReader(source, *meta_handlers, on_error=on_error,
                                                interfaces=interfaces, batch=False)
            source = _MetadataRouted(source, self.metadata_reader)
            batch = False  # the kind of each excerpt is needed: read one at a time
        self._interfaces = tuple(interfaces)
        self._source = source
        self.tailer = source.tailer
        """The tailer this reader reads."""
        self.handlers = handlers
        self.on_error = on_error if on_error is not None else _log_error
        self._reader_filter = ignore_first_arg
        self._history = history
        self._source_id = source.source_id
        self._track = history is True or (history is None and self._source_id != 0)
        self._by_name: dict[str, _Entry] = {}
        self._by_id: dict[int, _Entry] = {}
        self._mp: dict[Any, _Entry] = {}  # msgpack-encoded key (name or id) -> entry
        self._names: dict[Any, _Entry] = {}  # name as bytes -> entry (the fast path)
        self._wire_names: dict[Any, _Entry] = {}  # name as Java's 8-bit bytes -> entry
        self._wire_ids: dict[int, _Entry] = {}  # method ids under 128 -> entry
        self._chain_cache: dict[int, MethodReader] = {}
        for h in handlers:
            self._add_handler(h)
        if not self._by_name and default_handler is None:
            raise TypeError("the handlers have no public methods")
        if ignore_first_arg is not None:
            for e in self._by_name.values():
                e.filtered = True
                e.refresh()
        self._has_async = any(e.has_async for e in self._by_name.values()) or (
            inspect.iscoroutinefunction(default_handler))
        # the common msgpack calls, dispatched in C: name -> (decode, handler)
        self._fast_mp = {k: (e.mp_dec.decode, e.fast) for k, e in self._names.items()
                         if e.fast is not None}
        # [where the last native dispatch got to, how many calls it handled in all]
        self._fast_done = array("q", [0, 0])
        self._read = self._dispatched = self._unknown = self._ignored = self._errors = 0
        self._stopping = False
        # what the waiter's drain left run() (an async handler's awaitable),
        # and how many excerpts it handled
        self._held: Awaitable[None] | Exception | None = None
        self._held_n = 0
        self._last: tuple[str, tuple[Any, ...], Incoming | None] | None = None
        self._recording = False  # keep _last (for async iteration)
        # an unnamed forward tailer is read ahead in batches (see the class doc)
        self._batch = (batch if batch is not None else source.name is None) and (
            source.direction == TailerDirection.FORWARD)
        self._batch_count = 1024
        self._batch_bytes = 256 << 10
        self._pend_data = memoryview(b"")
        self._pend_off = ()
        self._pend_idx: Any = ()
        self._pend_i = self._pend_n = 0
        self._named = source.name is not None
        self._common_at = 0  # see _dispatch_common
        #: read_one() may dispatch in C (cleared when async iteration records calls)
        self._one_native = bool(self._fast_mp) and not self._track and not self._named \
            and not self._has_async

    def _done(self) -> None:
        """A named tailer's saved position moves past what has been handled
        (at least once: an excerpt whose handler never returned, because the
        process died, is read again on restart)."""
        if self._named and self._pend_i >= self._pend_n:
            self._source.save()

    def _add_handler(self, h: object) -> None:
        cls = type(h)
        flt_fn = getattr(h, FILTER_METHOD, None)
        for name, fn in public_functions(cls).items():
            spec = method_spec(cls, name, fn, self._interfaces)
            entry = self._by_name.get(name)
            if entry is None:
                entry = self._by_name[name] = _Entry(name, spec)
                self._mp[MP_ENC.encode(name)] = entry
                self._names[name.encode()] = entry
                if name != "history" and len(name) < 0x80 and name.isascii():
                    self._wire_names[name.encode()] = entry
            elif entry.n != spec.arity:
                raise TypeError(f"handlers disagree on the arguments of {name}")
            if spec.id is not None:
                other = self._by_id.get(spec.id)
                if other is not None and other is not entry:
                    raise TypeError(f"methods {other.name} and {name} share id {spec.id}")
                self._by_id[spec.id] = entry
                self._mp[MP_ENC.encode(spec.id)] = entry
                if spec.id < 0x80:
                    self._wire_ids[spec.id] = entry
                if entry.id is None:
                    entry.id = spec.id
            entry.add(_Target(getattr(h, name), h), flt_fn if callable(flt_fn) else None)

    def __repr__(self) -> str:
        names = ", ".join(type(h).__name__ for h in self.handlers)
        return f"<MethodReader {names} on {self.tailer!r}>"

    def statistics(self) -> MethodReaderStatistics:
        """The counters so far."""
        native = self._fast_done[1]  # calls read and dispatched in C
        return MethodReaderStatistics(self._read + native, self._dispatched + native,
                                      self._unknown, self._ignored, self._errors)

    # -- taking excerpts ----------------------------------------------------
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

    # -- the sync API ------------------------------------------------------
    # read_one() is HotReader's (native/hot.c): the common msgpack call of
    # the pending batch handled in C, else _read_one_slow or _read_one_general
    if TYPE_CHECKING:
        def read_one(self) -> bool:
            """Read and handle one excerpt; False when there is none yet.

            True means an excerpt was consumed: dispatched, skipped as unknown,
            filtered out, or handed to the error handler.

            Raises:
                TypeError: a handler method is ``async def`` (use ``await
                    aread_one()`` or ``run()``).
            """

    def _read_one_general(self) -> bool:
        """:meth:`read_one` of a pending excerpt that is not the common call."""
        self._drain(1, native=False)
        self._done()
        return True

    def _read_one_slow(self) -> bool:
        if self._has_async:
            raise TypeError("this reader has async handlers: use await aread_one() or run()")
        if self._pend_i >= self._pend_n:
            if not self._batch:
                ex = self._source.read_nowait()
                if ex is None:
                    return False
                self.process(ex.payload, ex.index)
                self._done()
                return True
            if not self._refill():
                return False
            if self._one_native:
                return self.read_one()
        self._drain(1)  # from the pending batch, without slicing it out first
        self._done()
        return True

    def read_available(self, limit: int | None = None) -> int:
        """Handle every excerpt available now (at most ``limit``); returns how many.

        Raises:
            TypeError: a handler method is ``async def``.
        """
        if self._has_async:
            raise TypeError("this reader has async handlers: use await run(until_end=True)")
        n = 0
        left = -1 if limit is None else limit
        while left:
            if self._pend_i >= self._pend_n:
                if not self._batch:
                    ex = self._source.read_nowait()
                    if ex is None:
                        break
                    self.process(ex.payload, ex.index)
                    self._done()
                    n += 1
                    left -= 1
                    continue
                if not self._refill():
                    break
            k, _ = self._drain(left)
            self._done()
            n += k
            if left > 0:
                left -= k
        return n

    def _drain(self, limit: int, native: bool = True) -> tuple[int, Awaitable[None] | None]:
        """Handle excerpts of the pending batch (at most ``limit``, all if < 0)
        until it is used up or an async handler's awaitable needs awaiting;
        returns how many were handled and that awaitable."""
        i = start = self._pend_i
        end = self._pend_n if limit < 0 else min(self._pend_n, i + limit)
        data, o, idx = self._pend_data, self._pend_off, self._pend_idx
        general = self._process_general
        common = self._dispatch_common if not self._track else None
        native = (native and bool(self._fast_mp) and common is not None
                  and not self._recording and type(o) is array)
        self._common_at = i
        try:
            while i < end:
                if native:
                    i = self._dispatch_native(data, o, i, end)
                    if i >= end:
                        break
                if common is not None:
                    i = common(data, o, idx, i, end)
                    if i >= end:
                        break
                p = data[o[i]:o[i + 1]]
                i += 1  # first: an excerpt whose handler raises has been consumed
                self._read += 1
                r = general(p, idx[i - 1])
                if r is not None:
                    return i - start, r
        finally:
            # a handler raising in _dispatch_common: it had consumed its excerpt
            self._pend_i = i = max(i, self._common_at)
        return i - start, None

    # -- the async API -----------------------------------------------------
    async def aread_one(self) -> bool:
        """:meth:`read_one` for any handlers (awaits ``async def`` ones)."""
        got = self._take()
        if got is None:
            return False
        r = self.process(*got)
        if r is not None:
            await r
        self._done()
        return True

    def _closed(self) -> bool:
        return self._source.closed

    def _stopped(self) -> bool:
        return self._stopping or self._held is not None

    def _handle_parked(self, ex: Excerpt) -> bool:
        """:meth:`run`'s handling of the excerpts a wake-up finds (the waiter's
        drain, ``_waiter.wait_async``; in :meth:`run`'s task): False when
        :meth:`run` must take over (an async handler's awaitable is held for
        it, or the reader is stopped).  What a handler raises leaves through
        :meth:`run`."""
        self._held_n += 1
        r = self.process(ex.payload, ex.index)
        if r is not None:
            self._held = r
            return False
        self._done()
        return not self._stopping

    async def _wait(self) -> tuple[bytes | memoryview, int] | None:
        """The next excerpt, waiting with the tailer's pauser in this task (no
        Task of its own: :meth:`stop` unpauses the pauser); None once the
        reader is stopped or the tailer closed."""
        if self._stopping:
            return None
        try:
            ex = await self._source.wait(self._stopped, None, None)
        except QueueClosedError:
            if self._closed():
                return None
            raise
        return None if ex is None else (ex.payload, ex.index)

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

    async def run(self, *, until_end: bool = False) -> int:
        """Handle excerpts as they come until :meth:`stop`, the tailer or its
        queue closes, or (``until_end``) there is nothing more to read now.
        Returns the number of excerpts handled.  Gives the event loop a turn
        every ``tailer.checkpoint_every`` excerpts.  Handlers run in the task
        that awaits ``run()``, whatever the pauser.

        Raises:
            Exception: whatever a handler raised.
        """
        self._stopping = False
        every = max(1, self._source.checkpoint_every)
        n = since = 0
        woke = False  # the last excerpt came out of a wait
        loop = asyncio.get_running_loop()  # once, not per wait (each lookup is a getpid())
        wait = self._source.wait  # the tailer's own wait (no coroutine layer between)
        stopped = self._stopped
        # the excerpts a wake-up finds are handled by the waiter's drain (in
        # this task), one coroutine resume per wake-up
        handle = self._handle_parked
        self._held_n = 0
        if self._held is not None:  # left by a run() cancelled before it took it over
            await self._take_held()
        while not self._stopping:
            if self._pend_i < self._pend_n or (
                    self._batch and not woke and self._refill_open()):
                k, r = self._drain(every - since)
                n += k
                since += k
                if r is not None:
                    await r
                self._done()
            else:
                # after a wake-up, one look (a C call) before a batch read: a
                # lone excerpt is the common case; in batches the refill just
                # found nothing: straight to waiting (which looks once more
                # after announcing its park)
                got = self._poll_one() if woke else None if self._batch else self._poll()
                woke = False
                if got is None:
                    if until_end or self._stopping:
                        break
                    # the tailer's wait itself (not self._wait(): one coroutine
                    # less to resume per wake-up)
                    try:
                        ex = await wait(stopped, loop, handle)
                    except QueueClosedError:
                        if self._closed():
                            break
                        raise
                    finally:
                        n += self._held_n
                        self._held_n = 0
                    if ex is None:
                        if self._held is None:
                            break
                        await self._take_held()
                        since = 0
                        continue
                    got = ex.payload, ex.index
                    since = 0
                    woke = True
                r = self.process(*got)
                n += 1
                since += 1
                if r is not None:
                    await r
                self._done()
            if since >= every:
                since = 0
                await asyncio.sleep(0)
        return n

    async def _take_held(self) -> None:
        """What :meth:`_handle_parked` left :meth:`run`: raise a handler's
        exception, or await an async handler's awaitable (in order: nothing
        after it was read)."""
        held = self._held
        task = asyncio.current_task()
        if held is not None and task is not None and task.cancelling():
            # a handler cancelled run() (in the drain): the cancellation lands
            # here, the awaitable still held for the next run()
            await asyncio.sleep(0)
        self._held = None
        if isinstance(held, Exception):
            raise held
        if held is not None:
            await held
            self._done()

    def _refill_open(self) -> bool:
        try:
            return self._refill()
        except QueueClosedError:
            if self._closed():
                self._stopping = True
                return False
            raise

    def stop(self) -> None:
        """Make :meth:`run` (and ``async for``) return after the current excerpt."""
        self._stopping = True
        self._source.pauser.unpause()  # ends a wait in progress (from any thread)

    def __aiter__(self) -> AsyncIterator[MethodCall]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[MethodCall]:
        self._stopping = False
        self._recording = True
        self._one_native = False
        every = max(1, self._source.checkpoint_every)
        k = 0
        while not self._stopping:
            got = self._poll()
            if got is None:
                got = await self._wait()
                if got is None:
                    return
                k = 0
            self._last = None
            r = self.process(*got)
            if r is not None:
                await r
            self._done()
            last = self._last
            if last is not None:
                name, args, inc = last
                yield MethodCall(got[1], name, args, None if inc is None else inc.history())
            k += 1
            if k >= every:
                k = 0
                await asyncio.sleep(0)

    # -- processing --------------------------------------------------------
    def process(self, p: bytes | memoryview, idx: int) -> Awaitable[None] | None:
        """Decode one excerpt (its payload and index, as a read returned them)
        and call the handlers, as :meth:`read_one` does for the next excerpt;
        returns an awaitable when async handlers remain to be awaited.  For a
        payload read some other way (a batch, a Spark partition)."""
        if not self._track and self._dispatch_common(p, (0, len(p)), (idx,), 0, 1):
            return None
        self._read += 1
        return self._process_general(p, idx)

    def _process_general(self, p: bytes | memoryview, idx: int) -> Awaitable[None] | None:
        """:meth:`process` for any excerpt (``_read`` counted by the caller)."""
        if not p:
            self._error(CodecError("empty excerpt"), p, idx)
            return None
        b0 = p[0]
        if b0 == 0x92 or b0 == 0x93:
            return self._process_msgpack(p, idx, b0)
        if b0 == 0x5B:
            return self._process_json(p, idx)
        return self._process_wire(p, idx)

    def _dispatch_native(self, data: memoryview, off: array[int], i: int, end: int) -> int:
        """:meth:`_dispatch_common` for the msgpack calls of one sync handler, in
        C (``native/hot.c``); returns where it stopped."""
        done = self._fast_done
        try:
            j: int = dispatch_mp(data, off, i, end, self._fast_mp, done)
        except BaseException:
            j = done[0]  # the excerpt whose handler raised was consumed
            self._common_at = max(self._common_at, j)
            raise
        return j

    def _dispatch_common(self, data: bytes | memoryview, off: Any, idx: Any, i: int,
                         end: int) -> int:
        """Dispatch excerpts ``i``, ``i + 1``, ... (excerpt k is
        ``data[off[k]:off[k + 1]]`` at index ``idx[k]``) while they are the
        common calls, straight to their handler: ``[name, arg]`` in msgpack to
        a method with one sync handler, and a BinaryWire excerpt of one event
        and no history (its arguments decoded in C) to a method with sync
        handlers and no filter.  Returns where it stopped (``end`` when it
        took them all); the excerpts before that were dispatched or given to
        the error handler, and are counted.  If a handler raises,
        ``_common_at`` is just past its excerpt.  The caller checks that the
        reader does not track history."""
        names, wire_names, wire_ids = self._names, self._wire_names, self._wire_ids
        recording = self._recording
        first, ok = i, 0
        try:
            while i < end:
                p = data[off[i]:off[i + 1]]
                try:
                    b0 = p[0]
                    k = p[1]
                except IndexError:  # shorter than any call
                    break
                if b0 == 0x92:
                    if not 0xA0 <= k <= 0xBF:
                        break
                    e = names.get(p[2:k - 0x9E])
                    if e is None or e.fast is None:
                        break
                    i += 1
                    try:
                        arg = e.mp_dec.decode(p[k - 0x9E:])
                    except _DECODE_ERRORS as exc:
                        self._error(exc, p, idx[i - 1])
                        continue
                    ok += 1
                    if recording:
                        self._last = (e.name, (arg,), None)
                    e.fast(arg)
                    continue
                if b0 == 0xB9:  # an event name (under 128 chars)
                    e = wire_names.get(p[2:k + 2]) if k < 0x80 else None
                    pos = k + 2
                elif b0 == 0xBA:  # a method id under 128
                    e = wire_ids.get(k)
                    pos = 2
                else:
                    break
                if e is None or e.wire_fast is None:
                    break
                args = e.wire_decode(p, pos)  # type: ignore[misc]
                if args is None:
                    break
                i += 1
                ok += 1
                if recording:
                    self._last = (e.name, args, None)
                for fn in e.wire_fast:
                    fn(*args)
        except BaseException:
            self._common_at = i
            raise
        finally:
            self._read += i - first
            self._dispatched += ok
        return i

    def _error(self, exc: Exception, p: bytes | memoryview, idx: int) -> None:
        self._errors += 1
        self.on_error(exc, _excerpt(idx, bytes(p)))

    def _unknown_method(self, key: str | int, idx: int,
                        args: Callable[[], Any]) -> Awaitable[None] | None:
        """An event no handler has: to the default handler (``args()`` decodes
        its arguments untyped), else skipped; counted either way."""
        self._unknown += 1
        default = self.default_handler
        if default is None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("unknown method %r at index %#x", key, idx)
            return None
        out = default(key, args())
        return out if inspect.isawaitable(out) else None

    def _incoming(self, raw: object, idx: int) -> Incoming | None:
        if raw is not None:
            if self._history is False:
                return None
        elif not self._track:
            return None
        return Incoming(raw, self._source_id, idx, _mono_ns())

    def _live(self, entry: _Entry, first: Any) -> _Live | None:
        """The targets that still want a call once its first argument is known
        (None, counted as ignored, when none does)."""
        rf = self._reader_filter
        if rf is not None and rf(entry.name, first):
            self._ignored += 1
            return None
        live = [t for t, f in zip(entry.targets, entry.filters, strict=True)
                if f is None or not f(entry.name, first)]
        if not live:
            self._ignored += 1
            return None
        return live

    # msgpack ---------------------------------------------------------------
    def _process_msgpack(self, p: bytes | memoryview, idx: int,
                         b0: int) -> Awaitable[None] | None:
        raw: HistoryBytes | None = None
        live: _Live | None
        try:
            pos = 1
            if b0 == 0x93:
                raw, pos = msgpack_history(p)
            k = p[pos]
            if 0xA0 <= k <= 0xBF:
                end = pos + 1 + (k - 0xA0)
            elif k < 0x80 or k >= 0xE0:
                end = pos + 1
            else:
                end = pos + _MP_KEY_LEN[k] + (p[pos + 1] if k == 0xD9 else 0)
            entry = self._mp.get(p[pos:end])
            if entry is None:
                key = msgspec.msgpack.decode(p[pos:end])
                return self._unknown_method(key, idx, lambda: msgspec.msgpack.decode(p[end:]))
            body = p[end:] if type(p) is memoryview else memoryview(p)[end:]
            n = entry.n
            if n == 1:
                args: tuple[Any, ...] = (entry.mp_dec.decode(body),)
                live = self._live(entry, args[0]) if entry.filtered else entry.targets
            elif n == 0:
                args, live = (), entry.targets
            elif entry.filtered:
                raws = _MP_RAWS.decode(body)
                first = entry.mp_decs[0].decode(raws[0])
                live = self._live(entry, first)
                if live is None:
                    return None
                args = entry.decode_rest(raws, entry.mp_decs, first)
            else:
                try:
                    args = entry.mp_dec.decode(body)
                except msgspec.ValidationError:  # fewer or more arguments than declared
                    raws = _MP_RAWS.decode(body)
                    args = entry.decode_rest(raws, entry.mp_decs,
                                             entry.mp_decs[0].decode(raws[0]))
                live = entry.targets
        except _DECODE_ERRORS as exc:
            self._error(exc, p, idx)
            return None
        if live is None:
            return None
        return self._call(entry, args, self._incoming(raw, idx), live)

    # JSON ------------------------------------------------------------------
    def _process_json(self, p: bytes | memoryview, idx: int) -> Awaitable[None] | None:
        live: _Live | None
        try:
            parts = JSON_RAWS.decode(p)
            hist_raw: object = None
            if len(parts) == 3:
                hist_raw = msgspec.json.decode(parts[0])
                MessageHistory.from_plain(hist_raw)  # validate now, not in the handler
                parts = parts[1:]
            if len(parts) != 2:
                raise CodecError(f"a JSON call is [method, args], not {len(parts)} items")
            key = msgspec.json.decode(parts[0])
            entry = (self._by_id.get(key) if type(key) is int
                     else self._by_name.get(key) if type(key) is str else None)
            if entry is None:
                body = parts[1]
                return self._unknown_method(key, idx, lambda: msgspec.json.decode(body))
            n = entry.n
            if n == 0:
                args: tuple[Any, ...] = ()
                live = entry.targets
            elif n == 1:
                args = (entry.json_dec.decode(parts[1]),)
                live = self._live(entry, args[0]) if entry.filtered else entry.targets
            else:
                raws = JSON_RAWS.decode(parts[1])
                first = entry.jdecs[0].decode(raws[0])
                live = self._live(entry, first) if entry.filtered else entry.targets
                if live is None:
                    return None
                args = entry.decode_rest(raws, entry.jdecs, first)
        except _DECODE_ERRORS as exc:
            self._error(exc, p, idx)
            return None
        if live is None:
            return None
        return self._call(entry, args, self._incoming(hist_raw, idx), live)

    # BinaryWire ------------------------------------------------------------
    def _process_wire(self, p: bytes | memoryview, idx: int) -> Awaitable[None] | None:
        gen = self._wire_steps(p, idx)
        try:
            aw = next(gen)
        except StopIteration:
            return None
        return _drive(gen, aw)

    def _wire_steps(self, p: bytes | memoryview,
                    idx: int) -> Generator[Awaitable[Any], Any, None]:
        """Dispatch every event of a BinaryWire excerpt in order; yields the
        awaitables of async handlers (their results come back by ``send``)."""
        r = PlainReader(p)
        end = len(p)
        raw: object = None
        inc: Incoming | None = None
        reader: MethodReader = self
        first_event = True
        try:
            pos = r.skip_padding(0, end)
            if pos < end and not r.at_key(pos):
                raise CodecError(f"not a method call (code 0x{p[pos]:02x} at offset {pos})")
        except _DECODE_ERRORS as exc:
            self._error(exc, p, idx)
            return
        while True:
            live: _Live | None
            try:
                pos = r.skip_padding(pos, end)
                if pos >= end:
                    return
                key, pos = r.key(pos, end)
                if key == -1 or key == "history":
                    raw, pos = r.value(pos, end)
                    if isinstance(raw, HistoryBytes):
                        check_history(raw)
                    else:
                        MessageHistory.from_plain(raw)  # validate
                    continue
                entry = (reader._by_id.get(key) if type(key) is int
                         else reader._by_name.get(key))  # type: ignore[arg-type]
                if entry is None:
                    value: Any = None  # an event without a value (Java's generic events)
                    if r.skip_padding(pos, end) < end:
                        value, pos = r.value(pos, end)  # skip it (or give it to the default)
                    reader = self
                    out = self._unknown_method(key, idx, _const(value))
                    if out is not None:
                        yield out
                    continue
                args, pos, live = reader._wire_args(r, pos, end, entry)
            except _DECODE_ERRORS as exc:
                self._error(exc, p, idx)
                return
            if live is None:
                reader = self
                continue
            if first_event:
                inc = self._incoming(raw, idx)
                first_event = False
            self._dispatched += 1
            if self._recording:
                self._last = (entry.name, args, inc)
            token = CURRENT.set(inc) if inc is not None else None
            try:
                result = None
                for t in live:
                    out = t.fn(*args)
                    if t.is_async:
                        out = yield out
                    result = out
            finally:
                if token is not None:
                    CURRENT.reset(token)
            # Java: a handler method returning an object chains the next event to it
            reader = self._chained(result) if result is not None else self

    def _chained(self, obj: object) -> MethodReader:
        cached = self._chain_cache.get(id(obj))
        if cached is None or cached.handlers[0] is not obj:
            try:
                cached = MethodReader(self._source, obj, on_error=self.on_error,
                                      interfaces=self._interfaces)
            except TypeError:
                return self
            if len(self._chain_cache) > 64:
                self._chain_cache.clear()
            self._chain_cache[id(obj)] = cached
        return cached

    def _wire_args(self, r: PlainReader, pos: int, end: int,
                   entry: _Entry) -> tuple[tuple[Any, ...], int, _Live | None]:
        n = entry.n
        if n == 0:
            if r.skip_padding(pos, end) < end:  # (Java's generic events write none)
                _, pos = r.value(pos, end)
            return (), pos, entry.targets
        readers = entry.wire_readers
        if n == 1:
            arg, pos = readers[0](r, pos, end)
            return (arg,), pos, self._live(entry, arg) if entry.filtered else entry.targets
        buf = r.buf
        pos = r.skip_padding(pos, end)
        if pos < end and buf[pos] in (0x80, 0x81, 0x82):
            body, body_end = _body(buf, pos, end)
        else:  # a single value where several were declared
            body, body_end = pos, r.value(pos, end)[1]
        got: list[Any] = []
        p = r.skip_padding(body, body_end)
        live = entry.targets
        for i, read in enumerate(readers):
            if p >= body_end:
                break
            v, p = read(r, p, body_end)
            got.append(v)
            if i == 0 and entry.filtered:
                live = self._live(entry, v)  # type: ignore[assignment]
                if live is None:
                    return (), body_end, None
            p = r.skip_padding(p, body_end)
        if not got and entry.filtered:
            live = self._live(entry, None)  # type: ignore[assignment]
            if live is None:
                return (), body_end, None
        return entry.fill(got), body_end, live

    # -- calls ---------------------------------------------------------------
    def _call(self, entry: _Entry, args: tuple[Any, ...], inc: Incoming | None,
              live: _Live) -> Awaitable[None] | None:
        self._dispatched += 1
        if self._recording:
            self._last = (entry.name, args, inc)
        if entry.has_async:
            return self._call_async(args, inc, live)
        if inc is None:
            for t in live:
                t.fn(*args)
            return None
        token = CURRENT.set(inc)
        try:
            for t in live:
                t.fn(*args)
        finally:
            CURRENT.reset(token)
        return None

    async def _call_async(self, args: tuple[Any, ...], inc: Incoming | None,
                          live: _Live) -> None:
        token = CURRENT.set(inc) if inc is not None else None
        try:
            for t in live:
                out = t.fn(*args)
                if t.is_async:
                    await out
        finally:
            if token is not None:
                CURRENT.reset(token)


async def _drive(gen: Generator[Awaitable[Any], Any, None], aw: Awaitable[Any]) -> None:
    while True:
        res = await aw
        try:
            aw = gen.send(res)
        except StopIteration:
            return


def _body(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """The body range of the ``80/81/82`` length-prefixed value at ``pos``."""
    code = buf[pos]
    if code == 0x82:
        if pos + 5 > end:
            raise CodecError(f"truncated length at offset {pos}")
        body, n = pos + 5, int.from_bytes(buf[pos + 1:pos + 5], "little")
    elif code == 0x81:
        if pos + 3 > end:
            raise CodecError(f"truncated length at offset {pos}")
        body, n = pos + 3, int.from_bytes(buf[pos + 1:pos + 3], "little")
    else:
        if pos + 2 > end:
            raise CodecError(f"truncated length at offset {pos}")
        body, n = pos + 2, buf[pos + 1]
    if body + n > end:
        raise CodecError(f"truncated sequence at offset {pos}")
    return body, body + n


def _excerpt(index: int, payload: bytes) -> Excerpt:
    return Excerpt(index, payload)


def _log_error(exc: Exception, ex: Excerpt) -> None:
    log.warning("skipping excerpt %#x that could not be decoded: %s", ex.index, exc)


_MP_RAWS = msgspec.msgpack.Decoder(list[msgspec.Raw])
_MP_KEY_LEN: Final = {0xD9: 2, 0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9,
                      0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9}


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


class _MetadataRouted:
    """A :class:`MethodSource` whose metadata excerpts go to the calls of
    ``meta`` (a reader of the metadata handlers) as they are read; the reader
    over it sees the data excerpts only."""

    __slots__ = ("_meta", "_src", "name", "read_many", "save", "source_id", "tailer")

    def __init__(self, src: MethodSource, meta: MethodReader) -> None:
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
        self._meta.process(ex.payload, ex.index)
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
