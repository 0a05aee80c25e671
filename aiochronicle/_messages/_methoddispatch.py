"""How a method reader dispatches an excerpt to handler methods: the handler
table (one entry per method name) and the three tiers, from the fastest: the
common msgpack calls of one sync handler in C (``native/hot.c``), the common
calls of msgpack and BinaryWire without history in one Python loop, and the
general decoders of msgpack, JSON and BinaryWire (history, filters, async
handlers, Java's chained calls and generic events).
"""

from __future__ import annotations

import inspect
import logging
from array import array
from collections.abc import Awaitable, Callable, Generator
from time import monotonic_ns as _mono_ns
from typing import TYPE_CHECKING, Any, Final

import msgspec

from .._core._errors import CodecError, WireError
from .._core._native import Incoming, dispatch_mp, dispatch_one, dispatch_wire, hold, release
from .._format._history import CURRENT, MessageHistory, check_history
from .._format._wire import HistoryBytes, PlainReader
from .._storage._excerpt import Excerpt
from ._codecs import Codecs, typed_reader, wire_call_decoder
from ._methods import JSON_RAWS, MethodSpec, log, msgpack_history

__all__ = ["Dispatcher", "Entry", "Target", "dispatch_tracked"]

_DECODE_ERRORS: Final = (msgspec.DecodeError, msgspec.ValidationError, CodecError, WireError,
                         UnicodeDecodeError, IndexError, ValueError, TypeError, KeyError)



class Target:
    __slots__ = ("fn", "is_async", "owner")

    def __init__(self, fn: Callable[..., Any], owner: object) -> None:
        self.fn = fn
        self.owner = owner
        self.is_async = inspect.iscoroutinefunction(fn)


_Filter = Callable[[str, Any], bool]


class Entry:
    """Everything the reader needs to dispatch one method name."""

    __slots__ = ("fast", "filtered", "filters", "has_async", "id", "jdecs", "json_dec",
                 "mp_dec", "mp_decs", "n", "name", "spec", "targets", "wire_decode",
                 "wire_fast", "wire_readers")

    def __init__(self, name: str, spec: MethodSpec) -> None:
        self.name = name
        self.spec = spec
        self.id = spec.id
        self.targets: list[Target] = []
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

    def add(self, target: Target, flt: _Filter | None) -> None:
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


_Live = list[Target]


class Dispatcher:
    """The dispatching side of a method reader (a mixin of
    :class:`~aiochronicle.MethodReader`, whose ``__init__`` fills the
    tables): :meth:`process` and the pending batch's :meth:`_drain`."""

    if not TYPE_CHECKING:  # no slots of its own (MethodReader's hold its state);
        __slots__ = ()      # mypy would see none of the attributes declared below

    handlers: tuple[object, ...]
    on_error: Callable[[Exception, Excerpt], None]
    default_handler: Callable[[str | int, Any], Any] | None
    _by_name: dict[str, Entry]
    _by_id: dict[int, Entry]
    _mp: dict[Any, Entry]
    _names: dict[Any, Entry]
    _wire_names: dict[Any, Entry]
    _wire_ids: dict[int, Entry]
    _fast_mp: dict[bytes, tuple[Callable[[Any], Any], Callable[[Any], Any]]]
    _fast_wire_names: dict[Any, tuple[Any, tuple[Callable[..., Any], ...]]]
    _fast_wire_ids: dict[Any, tuple[Any, tuple[Callable[..., Any], ...]]]
    _fast_done: Any
    _common_at: int
    _track: bool
    _history: bool | None
    _source_id: int
    _reader_filter: Callable[[str, Any], bool] | None
    _recording: bool
    _last: tuple[str, tuple[Any, ...], Incoming | None] | None
    _read: int
    _dispatched: int
    _unknown: int
    _ignored: int
    _errors: int
    _pend_i: int
    _pend_n: int
    _pend_data: Any
    _pend_off: Any
    _pend_idx: Any

    def _drain(self, limit: int, mp: bool = True) -> tuple[int, Awaitable[None] | None]:
        """Handle excerpts of the pending batch (at most ``limit``, all if < 0)
        until it is used up or an async handler's awaitable needs awaiting;
        returns how many were handled and that awaitable.  ``mp``: False when
        the C msgpack dispatch has just declined the first one (read_one())."""
        i = start = self._pend_i
        end = self._pend_n if limit < 0 else min(self._pend_n, i + limit)
        data, o, idx = self._pend_data, self._pend_off, self._pend_idx
        general = self._process_general
        # the common calls in C, msgpack (native) and BinaryWire (wire), then in
        # Python (common: for a reader not tracking history, what C declined)
        c_ok = not self._recording and type(o) is array and type(idx) is array
        native = mp and c_ok and bool(self._fast_mp)
        wire = c_ok and bool(self._fast_wire_names or self._fast_wire_ids)
        common = None if self._track else self._dispatch_common
        self._common_at = i
        # one excerpt (read_one()): consumed before its handler runs, whichever
        # path takes it, so that a handler reading on gets the next one (and
        # where that left _pend_i stays)
        one = end - i == 1
        if one:
            self._pend_i = end
        # stop(): done[2] set by a handler ends the batch after its excerpt
        # (the C dispatch checks it after each handler, as these loops do)
        stop = self._fast_done
        try:
            while i < end and not stop[2]:
                if native:
                    i = self._dispatch_native(data, o, i, end)
                    if i >= end or stop[2]:
                        break
                if wire:
                    i = self._dispatch_wire_native(data, o, idx, i, end)
                    if i >= end or stop[2]:
                        break
                if common is not None:
                    i = common(data, o, idx, i, end)
                    if i >= end or stop[2]:
                        break
                p = data[o[i]:o[i + 1]]
                i += 1  # first: an excerpt whose handler raises has been consumed
                self._read += 1
                r = general(p, idx[i - 1])
                if r is not None:
                    return i - start, r
        finally:
            # a handler raising in _dispatch_common: it had consumed its excerpt
            i = max(i, self._common_at)
            if not one:
                self._pend_i = i
        return (1 if one else i - start), None

    # -- processing --------------------------------------------------------
    def process(self, p: bytes | memoryview, idx: int) -> Awaitable[None] | None:
        """Decode one excerpt (its payload and index, as a read returned them)
        and call the handlers, as :meth:`read_one` does for the next excerpt;
        returns an awaitable when async handlers remain to be awaited.  For a
        payload read some other way (a batch, a Spark partition)."""
        if not self._recording and (self._fast_mp or self._fast_wire_names
                                    or self._fast_wire_ids):
            # the common calls in C, as a batch's (native/hot.c)
            self._read += 1  # (counted before its handler runs, as _call does)
            self._dispatched += 1
            if dispatch_one(p, idx, self._fast_mp, self._source_id, self._fast_wire_names,
                            self._fast_wire_ids, self._track_mode()):
                return None
            self._read -= 1
            self._dispatched -= 1
        if self._track:
            self._read += 1
            return self._process_general(p, idx)
        # what C declined, or a reader recording its calls (async for)
        if self._dispatch_common(p, (0, len(p)), (idx,), 0, 1):
            return None
        self._read += 1
        return self._process_general(p, idx)

    def _track_mode(self) -> int:
        """Which calls the C dispatch runs with their excerpt as the current
        message (native/hot.c TRACK_*): all (a reader tracking history), those
        that carry one (``history=None`` on a queue without a sourceId, as
        :meth:`_incoming`), or none (``history=False``)."""
        return 0 if self._track else 2 if self._history is False else 1

    def _dispatch_wire_native(self, data: bytes | memoryview, off: array[int],
                              idx: array[int], i: int, end: int) -> int:
        """:meth:`_dispatch_common`'s BinaryWire calls, in C (native/hot.c
        ``_dispatch_wire``): excerpts of one event (its compact history first,
        or none) to a method with sync handlers and no filter, each called with
        the excerpt as the thread's current message where the reader tracks
        its history.  Returns where it stopped (a damaged history too: the
        general path names it)."""
        done = self._fast_done
        try:
            j: int = dispatch_wire(data, off, i, end, self._fast_wire_names,
                                   self._fast_wire_ids, done, idx, self._source_id,
                                   self._track_mode())
        except BaseException:
            self._common_at = max(self._common_at, done[0])  # consumed, as _dispatch_native
            raise
        return j

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
            j: int = dispatch_mp(data, off, i, end, self._fast_mp, done, self._pend_idx,
                                 self._source_id, self._track_mode())
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
        stop = self._fast_done
        first, ok = i, 0
        try:
            while i < end and not stop[2]:
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

    def _live(self, entry: Entry, first: Any) -> _Live | None:
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
        reader: Dispatcher = self
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
            # the message is the context's for the async handlers' awaits, and
            # the thread's while each handler is called
            token = CURRENT.set(inc) if inc is not None else None
            try:
                result = None
                for t in live:
                    if inc is None:
                        out = t.fn(*args)
                    else:
                        hold(inc)
                        try:
                            out = t.fn(*args)
                        finally:
                            release(inc)
                    if t.is_async:
                        out = yield out
                    result = out
            finally:
                if token is not None:
                    CURRENT.reset(token)
            # Java: a handler method returning an object chains the next event to it
            reader = self._chained(result) if result is not None else self

    def _chained(self, obj: object) -> Dispatcher:
        """The reader of ``obj``, which a handler returned (Java chains the
        next event of the excerpt to it): the reader's own."""
        raise NotImplementedError

    def _wire_args(self, r: PlainReader, pos: int, end: int,
                   entry: Entry) -> tuple[tuple[Any, ...], int, _Live | None]:
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
    def _call(self, entry: Entry, args: tuple[Any, ...], inc: Incoming | None,
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
        hold(inc)  # the thread's message while the sync handlers run
        try:
            for t in live:
                t.fn(*args)
        finally:
            release(inc)
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


_MP_RAWS = msgspec.msgpack.Decoder(list[msgspec.Raw])
_MP_KEY_LEN: Final = {0xD9: 2, 0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9,
                      0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9}


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


def dispatch_tracked(reader: Dispatcher, data: memoryview, off: array[int], idx: array[int],
                     i: int, end: int, done: array[int]) -> int:
    """For a reader tracking history (a service's): dispatch excerpts ``i``,
    ``i + 1``, ... of a batch (excerpt k is ``data[off[k]:off[k + 1]]`` at
    index ``idx[k]``) in C while they are the common msgpack calls of one
    sync handler; returns where it stopped, the excerpt for
    :meth:`Dispatcher.process` (``i`` when it took none).  ``done`` is three
    int64 (native/hot.c ``_dispatch_mp``): ``done[0]`` ends up just past the
    last excerpt consumed (a handler that raises has consumed its own), a
    non-zero ``done[2]`` stops it after the handler that set it."""
    r = reader
    if not r._track or r._recording:  # noqa: SLF001 - this module's own class
        return i
    fast = r._fast_mp  # noqa: SLF001 - this module's own class
    names = r._fast_wire_names  # noqa: SLF001 - this module's own class
    ids = r._fast_wire_ids  # noqa: SLF001 - this module's own class
    sid = r._source_id  # noqa: SLF001 - this module's own class
    before = done[1]
    try:
        j: int = dispatch_mp(data, off, i, end, fast, done, idx, sid) if fast else i
        if j == i and (names or ids):
            j = dispatch_wire(data, off, i, end, names, ids, done, idx, sid)
    finally:
        n = done[1] - before
        r._read += n  # noqa: SLF001 - this module's own class
        r._dispatched += n  # noqa: SLF001 - this module's own class
    return j
