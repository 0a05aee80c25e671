"""Method writers: a proxy of an interface whose every call appends one
excerpt carrying the method and its arguments (see ``_methods``).

Arguments are encoded before the excerpt is written (outside the write lock),
so a call whose arguments cannot be encoded writes nothing.
"""

from __future__ import annotations

import inspect
import keyword
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import msgspec

from .._core._native import HotAppender, WriterMethod, handle, new_int64
from .._format._history import outgoing_plain, outgoing_raw, outgoing_wire_bytes
from .._format._wire import WireWriter
from ._codecs import (
    HISTORY_EXT,
    Codec,
    Codecs,
    recorded_codec,
    resolve_codec,
    wire_call_encoder,
    writer_for,
)
from ._methods import MP_ENC, MethodSpec, interface_methods

if TYPE_CHECKING:
    from .._format._tablestore import TableStore

__all__ = ["MethodAppender", "ReplayGate", "make_method_writer"]

T = TypeVar("T")


class MethodAppender(Protocol):
    """What a method writer needs of an appender (:class:`Appender` is one).

    Its calls go to ``append``; where the appender is a ``HotAppender`` whose
    ``append`` is the C one, the common calls are encoded and appended in C
    (``WriterMethod``), counted in flight on it as ``append()`` is.
    """

    def append(self, data: bytes | bytearray | memoryview | str, /) -> int:
        """Append one excerpt; returns its index."""
        ...


class ReplayGate:
    """Where a method writer's calls made in C append: while the gate is open,
    straight to ``appender`` (a queue's own appender), else through the
    writer's ``append`` (a service replaying inputs after a restart compares
    what its handler writes with what it wrote before).  Calls the C path does
    not take go through ``append`` either way."""

    __slots__ = ("_cell", "appender", "handle")

    def __init__(self, appender: HotAppender) -> None:
        self.appender = appender
        self._cell = new_int64(1)
        self.handle = handle(self._cell)

    @property
    def open(self) -> bool:
        """Whether the C calls append straight to ``appender``."""
        return self._cell[0] == 0

    @open.setter
    def open(self, value: bool) -> None:
        self._cell[0] = 0 if value else 1


# --------------------------------------------------------------------------
# Method writers
# --------------------------------------------------------------------------

_JSON_ENC = msgspec.json.Encoder()


#: the history forms of WriterMethod (native/histcall.h HC_MSGPACK, HC_WIRE)
_HIST_MSGPACK: Final = 1
_HIST_WIRE: Final = 2


def _mp_history() -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(HISTORY_EXT, outgoing_raw())


def _wire_key(spec: MethodSpec) -> bytes:
    w = WireWriter(small_raw=False)
    if spec.id is not None:
        w.field_number(spec.id)
    else:
        w.event_name(spec.name)
    return w.getvalue()


def _wire_encoder(spec: MethodSpec) -> Callable[[tuple[Any, ...]], bytes]:
    """Encode one call's arguments as Java's method writer does."""
    key = _wire_key(spec)
    writers = [writer_for(t) for t in spec.types]
    n = len(writers)

    def encode(args: tuple[Any, ...], history: bytes = b"") -> bytes:
        w = WireWriter(small_raw=False)
        buf = w.buf
        buf += history
        buf += key
        if n == 0:
            buf.append(0xE0)  # no argument: empty text
        elif n == 1:
            writers[0](w, args[0])
        else:
            token = w.begin_length32()
            for put, a in zip(writers, args, strict=True):
                put(w, a)
            w.end_length32(token)
        return bytes(buf)

    return wire_call_encoder(key, list(spec.types), encode)


def _param_source(spec: MethodSpec) -> tuple[str, str, tuple[Any, ...] | None,
                                             dict[str, Any] | None]:
    """The parameter list, the argument tuple expression, and the defaults of
    a generated proxy method."""
    parts = ["self"]
    names = []
    defaults: list[Any] = []
    kwdefaults: dict[str, Any] = {}
    star = False
    for p in spec.params:
        if not p.name.isidentifier() or keyword.iskeyword(p.name) or p.name.startswith("_ac"):
            raise TypeError(f"unsupported parameter name {p.name!r}")
        if p.kind is p.KEYWORD_ONLY:
            if not star:
                parts.append("*")
                star = True
            if p.default is not p.empty:
                kwdefaults[p.name] = p.default
        elif p.default is not p.empty:
            defaults.append(p.default)
        parts.append(p.name)
        names.append(p.name)
    if any(p.kind is p.POSITIONAL_ONLY for p in spec.params):
        k = sum(1 for p in spec.params if p.kind is p.POSITIONAL_ONLY)
        parts.insert(k + 1, "/")
    args = "(" + "".join(f"{n}, " for n in names) + ")"
    return ", ".join(parts), args, tuple(defaults) or None, kwdefaults or None


def _compile(spec: MethodSpec, body: str, env: dict[str, Any]) -> Callable[..., None]:
    params, args, defaults, kwdefaults = _param_source(spec)
    single = spec.params[0].name if spec.arity == 1 else "None"
    src = (f"def {spec.name}({params}):\n"
           + "".join(f"    {line}\n" for line in body.format(args=args, single=single)
                     .splitlines()))
    ns: dict[str, Any] = {}
    exec(compile(src, f"<method writer {spec.name}>", "exec"), env, ns)
    fn: Callable[..., None] = ns[spec.name]
    fn.__defaults__ = defaults
    fn.__kwdefaults__ = kwdefaults
    return fn


def _method_for(spec: MethodSpec, codec: Codec, append: Callable[[bytes], int],
                history: bool,
                chain: Callable[[type], Callable[[bytes], Any]] | None = None,
                appender: MethodAppender | None = None,
                gate: ReplayGate | None = None) -> Callable[..., None]:
    """One proxy method: encode the call, then append it.  A call by position
    of a method without history or chaining is encoded and appended in C
    (``WriterMethod``, native/hot.c); the Python function does the rest."""
    env: dict[str, Any] = {"_ac_append": append}
    key: Any = spec.id if spec.id is not None else spec.name
    # msgpack and JSON: the whole envelope in one msgspec call, which measured
    # faster than encode_into a scratch buffer plus the copy append() needs
    arg = {0: "None", 1: "{single}"}.get(spec.arity, "{args}")
    env["_ac_key"] = key
    # (encode, prefix, suffix, pack, history form, where in prefix the history goes)
    native: tuple[Callable[[Any], bytes], bytes, bytes, bool, int, int] | None = None
    into: Callable[[Any, bytearray], None] | None = None
    if codec is Codecs.MSGPACK or codec is Codecs.JSON:
        encoder = MP_ENC if codec is Codecs.MSGPACK else _JSON_ENC
        enc, into = encoder.encode, encoder.encode_into
        env["_ac_enc"] = enc
        # the envelope around the argument(s), as the encoder writes it
        whole, none = enc((key, None)), enc(None)
        cut = whole.rindex(none)
        prefix, suffix, pack = whole[:cut], whole[cut + len(none):], spec.arity > 1
        if history:
            env["_ac_hist"] = _mp_history if codec is Codecs.MSGPACK else outgoing_plain
            body = f"_ac_append(_ac_enc((_ac_hist(), _ac_key, {arg})))"
            if codec is Codecs.MSGPACK:
                # [history, key, arg]: a 3-item array (0x93), the history Ext first
                # (the C call writes it there: _HIST_MSGPACK)
                native = enc, b"\x93" + prefix[1:], suffix, pack, _HIST_MSGPACK, 1
        else:
            body = f"_ac_append(_ac_enc((_ac_key, {arg})))"
            native = enc, prefix, suffix, pack, 0, 0
    elif codec is Codecs.BINARY_WIRE:
        env["_ac_enc"] = _wire_encoder(spec)
        hist = ", _ac_hist()" if history else ""
        if history:
            env["_ac_hist"] = outgoing_wire_bytes
        if spec.chain is not None and chain is not None:
            env["_ac_chain"] = chain(spec.chain)
            body = f"return _ac_chain(_ac_enc({{args}}{hist}))"
        else:
            body = f"_ac_append(_ac_enc({{args}}{hist}))"
            native = env["_ac_enc"], b"", b"", True, _HIST_WIRE if history else 0, 0
    else:
        raise ValueError(f"the {codec.name} codec cannot carry method calls")
    fn = _compile(spec, body, env)
    if native is None or appender is None or any(
            p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in spec.params):
        return fn
    encode, prefix, suffix, pack, hist_form, hist_at = native
    direct = type(appender).append is HotAppender.append
    if gate is not None and not direct and type(gate.appender).append is HotAppender.append:
        m = WriterMethod(appender, append, encode, prefix, suffix, spec.arity, pack, False,
                         fn, into, hist_form, hist_at, gate.handle, gate.appender)
    else:
        m = WriterMethod(appender, append, encode, prefix, suffix, spec.arity, pack, direct,
                         fn, into, hist_form, hist_at)
    m.__name__ = m.__qualname__ = spec.name  # type: ignore[attr-defined]
    m.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return m


def _generic_for(spec: MethodSpec, codec: Codec, append: Callable[[bytes], Any],
                 history: bool) -> Callable[..., None]:
    """The generic-event method (Java's ``methodWriterBuilder().genericEvent(name)``):
    its first argument is the name of the event to write, the others that
    event's arguments, written as a method of that name would write them (in
    BinaryWire byte for byte what Java's method writer writes for the event)."""
    if spec.arity < 1 or spec.params[0].kind is spec.params[0].KEYWORD_ONLY:
        raise TypeError(f"the generic event method {spec.name} takes the event name first")
    types = spec.types[1:]
    n = len(types)
    name = spec.name

    def check(event: object, args: tuple[Any, ...]) -> None:
        if type(event) is not str or not event:
            raise TypeError(f"{name}: the event name is a non-empty str, not {event!r}")
        if len(args) != n:
            raise TypeError(f"{name}({event!r}, ...) takes {n} event argument(s), "
                            f"{len(args)} given")

    if codec is Codecs.MSGPACK or codec is Codecs.JSON:
        enc = (MP_ENC if codec is Codecs.MSGPACK else _JSON_ENC).encode
        hist = _mp_history if codec is Codecs.MSGPACK else outgoing_plain

        def call(self: object, event: str, *args: Any) -> None:
            check(event, args)
            a = None if n == 0 else args[0] if n == 1 else args
            append(enc((hist(), event, a)) if history else enc((event, a)))
    elif codec is Codecs.BINARY_WIRE:
        encoders: dict[str, Callable[..., bytes]] = {}

        def name_alone(key: bytes) -> Callable[..., bytes]:
            def encode(args: tuple[Any, ...], history: bytes = b"") -> bytes:
                return history + key
            return encode

        def call(self: object, event: str, *args: Any) -> None:
            check(event, args)
            e: Callable[..., bytes] | None = encoders.get(event)
            if e is None:
                if len(encoders) > 4096:
                    encoders.clear()
                one = MethodSpec(event, None, spec.params[1:], types)
                if n == 0:  # Java's generic event writes the name alone
                    e = encoders[event] = name_alone(_wire_key(one))
                else:
                    # (it takes the history bytes too)
                    e = encoders[event] = typing.cast(Callable[..., bytes], _wire_encoder(one))
            append(e(args, outgoing_wire_bytes()) if history else e(args))
    else:
        raise ValueError(f"the {codec.name} codec cannot carry method calls")
    call.__name__ = call.__qualname__ = name
    return call


def make_method_writer(appender: MethodAppender, iface: type[T] | Callable[..., T],
                       meta: TableStore | None, where: str, source_id: int, *,
                       codec: Codec | str | None = None,
                       record_history: bool | None = None,
                       generic_event: str | None = None, metadata: bool = False,
                       append_metadata: Callable[[bytes], Any] | None = None,
                       gate: ReplayGate | None = None) -> T:
    """See :meth:`Appender.method_writer`: a proxy of ``iface`` appending to
    ``appender``, of the queue at ``where`` whose metadata table store is
    ``meta`` (the codec is recorded there) and whose source id is ``source_id``.
    ``metadata``: calls go out as metadata excerpts through ``append_metadata``.
    ``gate``: the calls made in C append to the gate's appender while it is
    open (see :class:`ReplayGate`)."""
    if not isinstance(iface, type):
        raise TypeError(f"an interface is a class, not {iface!r}")
    specs = interface_methods(iface)
    if generic_event is not None and generic_event not in specs:
        raise TypeError(f"{iface.__name__} has no method {generic_event!r} for generic events")
    chained = _chained_interfaces(specs)
    if chained:
        # Java's chained calls exist in BinaryWire only: the default for such an
        # interface, an error (before anything is recorded) with another codec
        rec = recorded_codec(meta)
        if codec is None and rec is None:
            codec = Codecs.BINARY_WIRE
        want = Codecs.get(codec) if codec is not None else rec
        if want is not Codecs.BINARY_WIRE:
            raise TypeError(f"{iface.__name__} has chained methods (returning "
                            f"{', '.join(sorted(x.__name__ for x in chained))}): they need "
                            "codec='binary_wire'")
    c = resolve_codec(meta, codec, where, writing=True)
    if record_history is None:
        history = source_id != 0
    elif record_history and source_id == 0:
        raise ValueError("record_history needs a queue with a non-zero source_id "
                         "(open_queue(..., source_id=N)), as Java's history does")
    else:
        history = bool(record_history)
    append: Callable[[bytes], Any] = appender.append
    native_to: MethodAppender | None = appender
    if metadata:
        if append_metadata is None:
            raise TypeError("metadata=True needs an appender that writes metadata")
        append, native_to = append_metadata, None  # (no native path: no index)
    chain = _chain_maker(append)
    ns: dict[str, Any] = {name: (_generic_for(spec, c, append, history)
                                 if name == generic_event else
                                 _method_for(spec, c, append, history, chain, native_to,
                                             None if metadata else gate))
                          for name, spec in specs.items()}
    ns["__slots__"] = ()
    ns["__init__"] = _proxy_init
    ns["__repr__"] = _proxy_repr
    ns["__module__"] = iface.__module__
    ns["_ac_info"] = (iface.__name__, c.name, history, where)
    name = f"{iface.__name__}MethodWriter"
    proxy: Any
    try:
        proxy = type(name, (iface,), ns)()
    except TypeError:  # an interface that cannot be subclassed or instantiated
        proxy = type(name, (), ns)()
    return typing.cast(T, proxy)


def _chained_interfaces(specs: dict[str, MethodSpec]) -> set[type]:
    """Every interface reachable through chained methods."""
    seen: set[type] = set()
    todo = [s.chain for s in specs.values() if s.chain is not None]
    while todo:
        rt = todo.pop()
        if rt is None or rt in seen:
            continue
        seen.add(rt)
        todo += [s.chain for s in interface_methods(rt).values() if s.chain is not None]
    return seen


def _chain_maker(append: Callable[[bytes], int]) -> Callable[[type], Callable[[bytes], Any]]:
    """Proxies for the interfaces chained calls return: each method adds its
    event to the excerpt begun by the first call; a method returning None
    appends the whole excerpt (BinaryWire only)."""
    made: dict[type, Callable[[bytes], Any]] = {}

    def chain(rt: type) -> Callable[[bytes], Any]:
        got = made.get(rt)
        if got is not None:
            return got
        box: list[type] = []

        def make(prefix: bytes) -> Any:
            obj: Any = object.__new__(box[0])
            _chain_init(obj, prefix)
            return obj

        made[rt] = make  # before the methods, for interfaces that chain to themselves
        ns: dict[str, Any] = {"__module__": rt.__module__, "__repr__": _chain_repr}
        for name, spec in interface_methods(rt).items():
            env: dict[str, Any] = {"_ac_append": append, "_ac_enc": _wire_encoder(spec)}
            if spec.chain is not None:
                env["_ac_chain"] = chain(spec.chain)
                body = "return _ac_chain(self._ac_prefix + _ac_enc({args}))"
            else:
                body = "_ac_append(self._ac_prefix + _ac_enc({args}))"
            ns[name] = _compile(spec, body, env)
        try:
            box.append(type(f"{rt.__name__}Chained", (rt,), ns))
        except TypeError:
            box.append(type(f"{rt.__name__}Chained", (), ns))
        return make

    return chain


def _chain_init(self: Any, prefix: bytes) -> None:
    self._ac_prefix = prefix  # the excerpt begun by the first call of the chain


def _chain_repr(self: Any) -> str:
    return f"<chained call, {len(self._ac_prefix)} bytes so far>"


def _proxy_init(self: object) -> None:
    pass


def _proxy_repr(self: Any) -> str:
    iface, codec, history, path = self._ac_info
    return (f"<{iface} method writer on {path!r} codec={codec}"
            f"{' history' if history else ''}>")
