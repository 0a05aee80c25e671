"""Method interfaces: typed interfaces over a queue, as method writers
(``_methodwriter``) and method readers (``_methodreader``) see them.

An *interface* is a class (or ``typing.Protocol``) whose public methods take
msgspec Structs or plain values.  ``appender.method_writer(Iface)`` returns a
proxy, typed as ``Iface``, whose every call appends one excerpt carrying the
method (its name, or its ``@method_id`` number) and the arguments.
``tailer.method_reader(handler, ...)`` reads excerpts and calls the handler
methods of the same names, decoding the arguments into the handler's
annotated types.

See ``_codecs`` for how calls are framed per codec; in BinaryWire they are the
bytes a Java method writer writes, and the reader dispatches calls Java wrote.
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import msgspec

from .._core._errors import CodecError
from .._format._history import MessageHistory, check_history
from .._format._wire import HistoryBytes, PlainReader, WireError
from ._codecs import HISTORY_EXT, register_alias

__all__ = [
    "FILTER_METHOD",
    "JSON_RAWS",
    "MP_ENC",
    "MethodSpec",
    "call_history",
    "interface_methods",
    "method_id",
    "method_spec",
    "msgpack_history",
    "public_functions",
]

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("aiochronicle.methods")

_ID_ATTR: Final = "__chronicle_method_id__"
FILTER_METHOD: Final = "ignore_method_based_on_first_arg"
"""A handler defining ``ignore_method_based_on_first_arg(method, first_arg)``
(Java's ``MethodFilterOnFirstArg``) is asked before each of its methods is
called; returning True skips the call without decoding the other arguments."""

MP_ENC = msgspec.msgpack.Encoder()
JSON_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def method_id(number: int) -> Callable[[F], F]:
    """Give an interface method a numeric id (Java's ``@MethodId``): writers
    send the number instead of the name (``BA <stop-bit>`` in BinaryWire), and
    readers dispatch it to the method of that name.

    Raises:
        ValueError: ``number`` is negative (-1 is the ``history`` field).
    """
    if not isinstance(number, int) or number < 0:
        raise ValueError(f"a method id is a non-negative int, not {number!r}")

    def mark(fn: F) -> F:
        setattr(fn, _ID_ATTR, number)
        return fn

    return mark


# --------------------------------------------------------------------------
# Interfaces
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One method of an interface or handler."""

    name: str
    id: int | None
    params: tuple[inspect.Parameter, ...]
    types: tuple[Any, ...]
    chain: type | None = None  # the interface a chained call returns (Java's DSL style)

    @property
    def arity(self) -> int:
        return len(self.params)


_SKIP_BASES: Final = (object, typing.Protocol, typing.Generic)


def public_functions(cls: type) -> dict[str, Callable[..., Any]]:
    """Public plain functions of ``cls`` and its bases (nearest definition wins)."""
    out: dict[str, Callable[..., Any]] = {}
    for klass in reversed(cls.__mro__):
        if klass in _SKIP_BASES:
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") or name == FILTER_METHOD:
                continue
            if inspect.isfunction(attr):
                out[name] = attr
            elif name in out:
                del out[name]  # shadowed by a non-method
    return out


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: use what is there
        return {k: v for k, v in getattr(fn, "__annotations__", {}).items()
                if not isinstance(v, str)}


def method_spec(cls: type, name: str, fn: Callable[..., Any],
          interfaces: tuple[type, ...] = ()) -> MethodSpec:
    """The spec of ``cls.name``: parameters of ``fn``; each parameter's type
    and the method id from the nearest class in the MRO (then in
    ``interfaces``) that gives them, so a handler implementing an interface need
    not repeat its annotations or ids."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]  # drop self
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{cls.__name__}.{name}: *args/**kwargs are not supported "
                            "in a method interface")
    mid: int | None = None
    types: list[Any] = [None] * len(params)
    returns: Any = None
    for klass in (*cls.__mro__, *(k for i in interfaces for k in i.__mro__)):
        f = vars(klass).get(name)
        if not inspect.isfunction(f):
            continue
        if mid is None:
            got = getattr(f, _ID_ATTR, None)
            if isinstance(got, int):
                mid = got
        if returns is None and "return" in getattr(f, "__annotations__", {}):
            returns = _hints(f).get("return", type(None))
        if any(t is None for t in types):
            hints = _hints(f)
            fparams = list(inspect.signature(f).parameters.values())[1:]
            for i, p in enumerate(fparams[:len(params)]):
                if types[i] is None and p.name in hints:
                    types[i] = hints[p.name]
    resolved = tuple(Any if t is None else t for t in types)
    for t in resolved:
        _register_structs(t)
    return MethodSpec(name, mid, tuple(params), resolved, _chain_target(returns))


def _chain_target(rt: Any) -> type | None:
    """The interface a method returns, if it is one (Java chains such calls
    into one excerpt: ``to("one").say("hi")``)."""
    if (not isinstance(rt, type) or rt.__module__ == "builtins"
            or issubclass(rt, msgspec.Struct) or rt.__module__.startswith("typing")):
        return None
    try:
        return rt if public_functions(rt) else None
    except TypeError:
        return None


def _register_structs(t: Any) -> None:
    if isinstance(t, type) and issubclass(t, msgspec.Struct):
        register_alias(t)
    for a in typing.get_args(t):
        _register_structs(a)


def interface_methods(iface: type) -> dict[str, MethodSpec]:
    """The methods of an interface class, by name."""
    if not isinstance(iface, type):
        raise TypeError(f"an interface is a class, not {iface!r}")
    specs = {name: method_spec(iface, name, fn) for name, fn in public_functions(iface).items()}
    if not specs:
        raise TypeError(f"{iface.__name__} has no public methods")
    ids: dict[int, str] = {}
    for s in specs.values():
        if s.id is not None:
            if s.id in ids:
                raise TypeError(f"{iface.__name__}: methods {ids[s.id]} and {s.name} share "
                                f"method id {s.id}")
            ids[s.id] = s.name
    return specs


def msgpack_history(p: bytes | memoryview) -> tuple[HistoryBytes, int]:
    """The history ext first in a 3-item msgpack call (``p[0]`` is 0x93), and
    where the method key after it starts.

    Raises:
        CodecError: no history ext there.
        WireError: the history bytes are truncated.
    """
    c = p[1]
    if c == 0xC7:
        n, typ, pos = p[2], p[3], 4
    elif c == 0xC8:
        n, typ, pos = (p[2] << 8) | p[3], p[4], 5
    elif c == 0xC9:
        n, typ, pos = int.from_bytes(p[2:6], "big"), p[6], 7
    else:
        raise CodecError("a 3-item call must start with a history ext")
    if typ != HISTORY_EXT:
        raise CodecError(f"unexpected msgpack ext type {typ}")
    raw = HistoryBytes(p[pos:pos + n])
    check_history(raw)
    return raw, pos + n


def call_history(payload: bytes | memoryview) -> MessageHistory | None:
    """The message history a method writer put first in an excerpt, in any
    codec (msgpack, JSON, BinaryWire as Java writes it), without decoding the
    call's arguments; None when the excerpt carries none (or is no call).

    Raises:
        WireError: the history is there but damaged.
    """
    p = payload
    if len(p) < 2:
        return None
    b0 = p[0]
    if b0 == 0x93:
        try:
            raw: object = msgpack_history(p)[0]
        except CodecError:
            return None
    elif b0 == 0x92:
        return None
    elif b0 == 0x5B:
        try:
            parts = JSON_RAWS.decode(p)
            if len(parts) != 3:
                return None
            raw = msgspec.json.decode(parts[0])
        except msgspec.DecodeError:
            return None
    else:
        r = PlainReader(p)
        end = len(p)
        try:
            pos = r.skip_padding(0, end)
            if pos >= end or not r.at_key(pos):
                return None
            key, pos = r.key(pos, end)
        except (WireError, IndexError):
            return None
        if key != -1 and key != "history":
            return None
        try:
            raw, _ = r.value(pos, end)
        except IndexError:
            raise WireError("truncated message history") from None
    return MessageHistory.from_plain(raw)
