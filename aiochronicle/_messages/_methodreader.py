"""Method readers: read excerpts from a tailer and call the handler methods
they name (see ``_methods``).  The reader is made here (its handler table,
its sync API); how it takes excerpts is ``_methodsource``, how it dispatches
them ``_methoddispatch``, its async run loop ``_methodrun``.

Calls written in msgpack, JSON and BinaryWire (including Java's) are all
recognised by their first byte, whatever the queue records.
"""

from __future__ import annotations

import inspect
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._core._errors import ReentrantReadError
from .._core._native import HotReader
from .._storage._excerpt import Excerpt, TailerDirection
from ._methoddispatch import Dispatcher, Entry, Target
from ._methodrun import MethodCall, RunLoop
from ._methods import FILTER_METHOD, MP_ENC, log, method_spec, public_functions
from ._methodsource import ExcerptTaker, MetadataRouted, MethodSource

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from .._core._native import Incoming

__all__ = ["MethodCall", "MethodReader", "MethodReaderStatistics", "MethodSource"]


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



class MethodReader(RunLoop, ExcerptTaker, Dispatcher, HotReader):
    """Method dispatch over a :class:`MethodSource`, below the user objects:
    the public class is :class:`aiochronicle.MethodReader` (``_queue.MethodReader``),
    which subclasses this one to name its tailer; :meth:`Tailer.method_reader`
    makes one."""

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
            self.metadata_reader = type(self)(source, *meta_handlers, on_error=on_error,
                                              interfaces=interfaces, batch=False)
            source = MetadataRouted(source, self.metadata_reader.process)
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
        self._by_name: dict[str, Entry] = {}
        self._by_id: dict[int, Entry] = {}
        self._mp: dict[Any, Entry] = {}  # msgpack-encoded key (name or id) -> entry
        self._names: dict[Any, Entry] = {}  # name as bytes -> entry (the fast path)
        self._wire_names: dict[Any, Entry] = {}  # name as Java's 8-bit bytes -> entry
        self._wire_ids: dict[int, Entry] = {}  # method ids under 128 -> entry
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
        # readers tracking history: the common BinaryWire calls, dispatched in C too,
        # by event name or method id -> (decode, handlers)
        self._fast_wire_names = {k: (e.wire_decode, e.wire_fast)
                                 for k, e in self._wire_names.items()
                                 if e.wire_fast is not None and type(k) is bytes}
        self._fast_wire_ids = {k: (e.wire_decode, e.wire_fast) for k, e in self._wire_ids.items()
                               if e.wire_fast is not None}
        # [where the last native dispatch got to, how many calls it handled in all]
        self._fast_done = array("q", [0, 0, 0])
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

    def _add_handler(self, h: object) -> None:
        cls = type(h)
        flt_fn = getattr(h, FILTER_METHOD, None)
        for name, fn in public_functions(cls).items():
            spec = method_spec(cls, name, fn, self._interfaces)
            entry = self._by_name.get(name)
            if entry is None:
                entry = self._by_name[name] = Entry(name, spec)
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
            entry.add(Target(getattr(h, name), h), flt_fn if callable(flt_fn) else None)

    def __repr__(self) -> str:
        names = ", ".join(type(h).__name__ for h in self.handlers)
        return f"<MethodReader {names} on {self.tailer!r}>"

    def statistics(self) -> MethodReaderStatistics:
        """The counters so far."""
        native = self._fast_done[1]  # calls read and dispatched in C
        return MethodReaderStatistics(self._read + native, self._dispatched + native,
                                      self._unknown, self._ignored, self._errors)

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
                ReentrantReadError: called while this reader's
                    ``read_available()`` or ``run()`` is in progress (by one
                    of its handlers).  A handler of ``read_one()`` may read on.
            """

    def _reentered(self) -> bool:
        """A read while this reader's batch read is in progress."""
        raise ReentrantReadError(
            "read from a method reader while its read_available() or run() is handling a "
            "batch (a handler reading its own reader?): the batch would be handled twice")

    def _read_one_general(self) -> bool:
        """:meth:`read_one` of a pending excerpt that is not the common call."""
        self._drain(1, mp=False)  # a BinaryWire call still goes to C
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
            ReentrantReadError: called while this reader's ``read_available()``
                or ``run()`` is in progress (by one of its handlers).
        """
        if self._has_async:
            raise TypeError("this reader has async handlers: use await run(until_end=True)")
        if self._busy:
            self._reentered()
        self._busy = True
        try:
            return self._read_available(-1 if limit is None else limit)
        finally:
            self._busy = False
            self._fast_done[2] = 0  # set by a stop() in one of its handlers

    def _read_available(self, left: int) -> int:
        n = 0
        stop = self._fast_done
        while left and not stop[2]:
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


def _log_error(exc: Exception, ex: Excerpt) -> None:
    log.warning("skipping excerpt %#x that could not be decoded: %s", ex.index, exc)
