"""Codecs: how typed messages become excerpt payloads, built on msgspec.

Five codecs, each a singleton on :class:`Codecs`:

* ``MSGPACK`` (the default for typed messages): msgspec's MessagePack;
* ``JSON``: msgspec's JSON;
* ``BINARY_WIRE``: Chronicle's self-describing binary YAML, as Java writes it
  (``writeDocument`` fields, ``writeText`` strings, method-writer calls);
* ``RAW``: the bytes themselves;
* ``TEXT``: a string as Java's ``writeText`` writes it.

Encoders and decoders are made once and reused (msgspec decoders per target
type); decoding accepts any buffer, so a ``memoryview`` of an excerpt decodes
without a copy.

A queue records the codec it carries under the ``aiochronicle.codec`` key of its
``metadata.cq4t`` (a small integer Java ignores).  The key is created the first
time a codec is set (by the first method writer, or ``set_queue_codec``),
never when a queue is opened, so an untouched queue's metadata stays
byte-identical to Java's.  A queue with no record (one written by Java, say) is
read as BinaryWire.

Method calls (see ``_methods``) are framed per codec:

* msgpack: a 2-array ``[method, args]``, or a 3-array ``[history, method,
  args]`` whose first item is an ``Ext`` of type :data:`HISTORY_EXT` holding
  Java's compact history bytes;
* JSON: ``[method, args]`` or ``[{"sources": [...], "timings": [...]}, method,
  args]``;
* BinaryWire: exactly Java's method-writer bytes.

``method`` is the method's name, or its numeric id (``@method_id``).  ``args``
is ``null`` for no argument, the argument itself for one, and an array of them
for more (as Java's method writer does).
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import math
import struct
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar, overload

import msgspec
import msgspec.inspect as mi

from .._core._errors import CodecError, CodecMismatchError, ReadOnlyQueueError
from .._core._native import WireDecoder, WireEncoder
from .._format._history import MessageHistory
from .._format._render import (
    DecodedPayload,
    decode_auto,
    decode_hex,
    decode_text,
    decode_wire,
    register_decoder,
)
from .._format._wire import (
    EmptyBody,
    HistoryBytes,
    PlainReader,
    Typed,
    WireError,
    WireWriter,
    encode_stop_bit,
    payload_text,
)

if TYPE_CHECKING:
    from .._format._tablestore import TableStore

__all__ = [
    "CODEC_KEY",
    "HISTORY_EXT",
    "Codec",
    "CodecError",
    "CodecMismatchError",
    "Codecs",
    "codec_of",
    "decode_payload",
    "payload_decoder",
    "record_codec",
    "recorded_codec",
    "resolve_codec",
]

T = TypeVar("T")

CODEC_KEY: Final = "aiochronicle.codec"
"""The ``metadata.cq4t`` key recording a queue's codec."""

HISTORY_EXT: Final = 72
"""The msgpack extension type carrying a message history (``'H'``)."""


# --------------------------------------------------------------------------
# Codec base
# --------------------------------------------------------------------------


class Codec:
    """Turns values into payload bytes and back.

    Attributes:
        name: ``msgpack``, ``json``, ``binary_wire``, ``raw`` or ``text``.
        code: the integer recorded in a queue's metadata.
        methods: whether method writers and readers can use it.
    """

    name: ClassVar[str] = ""
    code: ClassVar[int] = 0
    methods: ClassVar[bool] = False

    def encode(self, value: Any) -> bytes:
        """``value`` as payload bytes.

        Raises:
            CodecError: the value cannot be encoded by this codec.
        """
        raise NotImplementedError

    @overload
    def decode(self, payload: Any) -> Any: ...

    @overload
    def decode(self, payload: Any, type: type[T]) -> T: ...

    @overload
    def decode(self, payload: Any, type: Any) -> Any: ...

    def decode(self, payload: Any, type: Any = Any) -> Any:
        """Decode a payload (any bytes-like; a memoryview is not copied), into
        ``type`` when given.

        Raises:
            CodecError: the payload is not valid for this codec or ``type``.
        """
        raise NotImplementedError

    def render(self, payload: bytes) -> DecodedPayload | None:
        """A readable form of ``payload`` for dumps, or None if it is not this
        codec's format."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"Codecs.{self.name.upper()}"

    def __reduce__(self) -> str:
        return f"Codecs.{self.name.upper()}"


# --------------------------------------------------------------------------
# msgpack
# --------------------------------------------------------------------------


def _ext_hook(code: int, data: memoryview) -> object:
    if code == HISTORY_EXT:
        return HistoryBytes(data)
    return msgspec.msgpack.Ext(code, bytes(data))


def _enc_hook(value: Any) -> Any:
    if isinstance(value, MessageHistory):
        return msgspec.msgpack.Ext(HISTORY_EXT, value.to_bytes())
    raise NotImplementedError(f"cannot encode a {type(value).__name__}")


class _MsgspecCodec(Codec):
    """What msgpack and JSON share: a reused encoder, decoders cached per type."""

    label = ""

    def __init__(self) -> None:
        self.encoder: Any = None
        self._decoders: dict[Any, Any] = {}

    def _new_decoder(self, type: Any) -> Any:
        raise NotImplementedError

    def _shown(self, value: Any) -> Any:
        return value

    def decoder(self, type: Any) -> Any:
        """The (cached) decoder for ``type``."""
        d = self._decoders.get(type)
        if d is None:
            d = self._decoders[type] = self._new_decoder(type)
        return d

    def encode(self, value: Any) -> bytes:
        try:
            return self.encoder.encode(value)  # type: ignore[no-any-return]
        except (TypeError, ValueError, NotImplementedError, OverflowError) as exc:
            raise CodecError(f"{self.label} cannot encode {type(value).__name__}: {exc}") from exc

    def decode(self, payload: Any, type: Any = Any) -> Any:
        try:
            return self.decoder(type).decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CodecError(str(exc)) from exc

    def render(self, payload: bytes) -> DecodedPayload | None:
        try:
            value = self.decoder(Any).decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        call = _as_call(value)
        return _rendered(self.name, call if call is not None else self._shown(value))


class MsgpackCodec(_MsgspecCodec):
    """MessagePack through msgspec (Structs as maps, so fields can be added and
    removed over time)."""

    name = "msgpack"
    label = "msgpack"
    code = 2
    methods = True

    def __init__(self) -> None:
        super().__init__()
        self.encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)

    def _new_decoder(self, type: Any) -> msgspec.msgpack.Decoder[Any]:
        return msgspec.msgpack.Decoder(type, ext_hook=_ext_hook)

    def _shown(self, value: Any) -> Any:
        return _plain(value)


# --------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------


class JsonCodec(_MsgspecCodec):
    """JSON through msgspec."""

    name = "json"
    label = "JSON"
    code = 3
    methods = True

    def __init__(self) -> None:
        super().__init__()
        self.encoder = msgspec.json.Encoder(enc_hook=_json_enc_hook)

    def _new_decoder(self, type: Any) -> msgspec.json.Decoder[Any]:
        return msgspec.json.Decoder(type)


def _json_enc_hook(value: Any) -> Any:
    if isinstance(value, MessageHistory):
        return value.to_dict()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    raise NotImplementedError(f"cannot encode a {type(value).__name__}")


# --------------------------------------------------------------------------
# raw bytes and text
# --------------------------------------------------------------------------


class RawCodec(Codec):
    """The payload is the bytes themselves."""

    name = "raw"
    code = 4

    def encode(self, value: Any) -> bytes:
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        raise CodecError(f"the raw codec takes bytes, not {type(value).__name__}")

    def decode(self, payload: Any, type: Any = Any) -> Any:
        if type in (Any, bytes):
            return bytes(payload)
        if type is memoryview:
            return memoryview(payload)
        if type is bytearray:
            return bytearray(payload)
        raise CodecError(f"the raw codec decodes to bytes, not {type!r}")

    def render(self, payload: bytes) -> DecodedPayload | None:
        return decode_auto(payload)


class TextCodec(Codec):
    """A string as Java's ``writeText`` writes it (a BinaryWire string); reads
    UTF-8 without the wire prefix too."""

    name = "text"
    code = 5

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise CodecError(f"the text codec takes str, not {type(value).__name__}")
        return WireWriter().text(value).getvalue()

    def decode(self, payload: Any, type: Any = Any) -> Any:
        if type not in (Any, str):
            raise CodecError(f"the text codec decodes to str, not {type!r}")
        try:
            return payload_text(payload)
        except WireError as exc:
            raise CodecError(f"not text: {exc}") from exc

    def render(self, payload: bytes) -> DecodedPayload | None:
        return decode_text(payload)


# --------------------------------------------------------------------------
# BinaryWire
# --------------------------------------------------------------------------

_Writer = Callable[[WireWriter, Any], None]
_STRUCT_WRITERS: dict[type, _Writer] = {}
_ALIASES: dict[str, type] = {}


def struct_alias(cls: type) -> str:
    """The alias a Struct class is written under when typed (``B6 alias``):
    its ``__chronicle_alias__``, else its msgspec ``tag`` when a string, else
    its name."""
    alias = getattr(cls, "__chronicle_alias__", None)
    if isinstance(alias, str):
        return alias
    cfg = getattr(cls, "__struct_config__", None)
    tag = getattr(cfg, "tag", None)
    return tag if isinstance(tag, str) else cls.__name__


def register_alias(cls: type) -> None:
    """Make a Struct class (and those it refers to) known by its alias, so a
    typed value of it is decoded even where the declared type is ``Any``."""
    _ALIASES.setdefault(struct_alias(cls), cls)


def _key_bytes(name: str) -> bytes:
    w = WireWriter(small_raw=False)
    w.field(name)
    return w.getvalue()


def _typed_default(w: WireWriter, value: Any) -> None:
    """``object_value`` fallback: Structs are written typed (their class is not
    the declared one), Decimals as text."""
    if isinstance(value, msgspec.Struct):
        cls = type(value)
        w.type_prefix(struct_alias(cls))
        struct_writer(cls)(w, value)
    elif isinstance(value, Decimal):
        w.text(str(value))
    else:
        raise CodecError(f"cannot write a {type(value).__name__} as BinaryWire")


def _write_any(w: WireWriter, value: Any) -> None:
    w.object_value(value, _typed_default)


def struct_writer(cls: type) -> _Writer:
    """A compiled writer of ``cls`` instances as untyped marshallables
    (``82 <u32 length>`` + each field)."""
    fn = _STRUCT_WRITERS.get(cls)
    if fn is not None:
        return fn
    info = mi.type_info(cls)
    if not isinstance(info, mi.StructType):
        raise TypeError(f"{cls!r} is not a msgspec Struct")
    register_alias(cls)
    # generated straight-line code: one key constant and one writer per field
    env: dict[str, Any] = {"_pack": _U32_PACK_INTO, "_open": b"\x82\0\0\0\0"}
    lines = ["def write(w, v):", "    buf = w.buf", "    buf += _open", "    start = len(buf)"]
    for i, f in enumerate(info.fields):
        if not f.name.isidentifier():
            raise TypeError(f"{cls.__name__}: unsupported field name {f.name!r}")
        env[f"_k{i}"] = _key_bytes(f.encode_name)
        env[f"_p{i}"] = writer_for(f.type)
        lines += [f"    buf += _k{i}", f"    _p{i}(w, v.{f.name})"]
    lines.append("    _pack(buf, start - 4, len(buf) - start)")
    ns: dict[str, Any] = {}
    exec(compile("\n".join(lines) + "\n", f"<BinaryWire writer of {cls.__name__}>", "exec"),
         env, ns)
    write: _Writer = ns["write"]
    _STRUCT_WRITERS[cls] = write
    return write


_U32_PACK_INTO = struct.Struct("<I").pack_into
_A1 = [bytes((0xA1, i)) for i in range(256)]  # 0..255 as Java writes them: UINT8
_E = [bytes((0xE0 + n,)) for n in range(32)]  # STRING_0 + length


def _int_writer(w: WireWriter, v: Any) -> None:
    if type(v) is int and 0 <= v <= 255:
        w.buf += _A1[v]
        return
    if not isinstance(v, int) or isinstance(v, bool):
        raise CodecError(f"expected an int, got {type(v).__name__}")
    w.int_compact(v)


def _float_writer(w: WireWriter, d: Any) -> None:
    """Java's ``writeNumber(double)``, with the common cases inline (checked
    against ``WireWriter.float64`` by the tests)."""
    if type(d) is not float:
        if isinstance(d, bool) or not isinstance(d, int | float):
            raise CodecError(f"expected a float, got {type(d).__name__}")
        d = float(d)
    if -1e12 < d < 1e12:
        i = int(d)
        if i == d:
            if 0 <= i <= 255:
                w.buf += _A1[i]
                return
        else:
            # fixed point: the first of 2, 4, 6 decimals that round-trips
            x = d * 1e6
            fl = math.floor(x)
            l6 = fl + 1 if x - fl >= 0.5 else fl
            if l6 / 1e6 == d and -(1 << 35) < l6 < (1 << 42):
                a = -l6 if l6 < 0 else l6
                buf = w.buf
                i2 = a // 10000 if l6 >= 0 else -(a // 10000)
                if i2 / 1e2 == d:
                    buf.append(0x92)
                    buf += _stop_bit(i2)
                    return
                i4 = a // 100 if l6 >= 0 else -(a // 100)
                if i4 / 1e4 == d:
                    buf.append(0x94)
                    buf += _stop_bit(i4)
                    return
                buf.append(0x96)
                buf += _stop_bit(l6)
                return
    w.float64(d)


def _stop_bit(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _BYTE[n]
    if 0 <= n < 0x4000:
        return bytes((0x80 | (n & 0x7F), n >> 7))
    return encode_stop_bit(n)


_BYTE = [bytes((i,)) for i in range(256)]


def _str_writer(w: WireWriter, v: Any) -> None:
    if type(v) is str and len(v) < 32 and v.isascii():
        buf = w.buf
        buf += _E[len(v)]
        buf += v.encode("ascii")
        return
    if not isinstance(v, str):
        raise CodecError(f"expected a str, got {type(v).__name__}")
    w.text(v)


def _bool_writer(w: WireWriter, v: Any) -> None:
    if type(v) is not bool:
        raise CodecError(f"expected a bool, got {type(v).__name__}")
    w.buf += b"\xb1" if v else b"\xb0"


def writer_for(t: Any) -> _Writer:
    """The BinaryWire writer for values declared as ``t`` (a type annotation or
    a ``msgspec.inspect.Type``), following Java's method writer: numbers
    compacted, a Struct of exactly the declared class untyped, otherwise typed."""
    info = t if isinstance(t, mi.Type) else mi.type_info(t)
    if isinstance(info, mi.IntType):
        return _int_writer
    if isinstance(info, mi.FloatType):
        return _float_writer
    if isinstance(info, mi.StrType):
        return _str_writer
    if isinstance(info, mi.BoolType):
        return _bool_writer
    if isinstance(info, mi.StructType):
        cls = info.cls

        def struct_field(w: WireWriter, v: Any, cls: type = cls) -> None:
            if type(v) is cls:
                struct_writer(cls)(w, v)
            else:
                _write_any(w, v)

        return struct_field
    if isinstance(info, mi.UnionType):
        others = [x for x in info.types if not isinstance(x, mi.NoneType)]
        if len(others) == 1 and len(info.types) == 2:
            inner = writer_for(others[0])

            def optional(w: WireWriter, v: Any) -> None:
                if v is None:
                    w.null()
                else:
                    inner(w, v)

            return optional
        for x in others:
            if isinstance(x, mi.StructType):
                register_alias(x.cls)
        return _write_any
    if isinstance(info, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        item = writer_for(info.item_type)

        def sequence(w: WireWriter, v: Any) -> None:
            token = w.begin_length32()
            for x in v:
                item(w, x)
            w.end_length32(token)

        return sequence
    if isinstance(info, mi.TupleType):
        items = [writer_for(x) for x in info.item_types]

        def fixed_tuple(w: WireWriter, v: Any) -> None:
            if len(v) != len(items):
                raise CodecError(f"expected a tuple of {len(items)} items, got {len(v)}")
            token = w.begin_length32()
            for put, x in zip(items, v, strict=True):
                put(w, x)
            w.end_length32(token)

        return fixed_tuple
    if isinstance(info, mi.DictType):
        val = writer_for(info.value_type)

        def mapping(w: WireWriter, v: Any) -> None:
            token = w.begin_length32()
            for k, x in v.items():
                if isinstance(k, int) and not isinstance(k, bool):
                    w.field_number(k)
                else:
                    w.field(k.value if isinstance(k, enum.Enum) else str(k))
                val(w, x)
            w.end_length32(token)

        return mapping
    return _write_any


# -- reading: plain values -> typed, with type-directed fix-ups -------------

_INFO: dict[Any, mi.Type] = {}


def _info(t: Any) -> mi.Type:
    i = _INFO.get(t)
    if i is None:
        i = _INFO[t] = mi.type_info(t)
    return i


def _pick_struct(alias: str, t: mi.Type) -> type | None:
    """The Struct class a typed value ``alias`` stands for where ``t`` is declared."""
    cands: list[mi.StructType] = []
    if isinstance(t, mi.StructType):
        cands = [t]
    elif isinstance(t, mi.UnionType):
        cands = [x for x in t.types if isinstance(x, mi.StructType)]
    for c in cands:
        if struct_alias(c.cls) == alias or c.cls.__name__ == alias:
            return c.cls
    if len(cands) == 1:
        return cands[0].cls
    found = _ALIASES.get(alias)
    if found is None and "." in alias:
        found = _ALIASES.get(alias.rsplit(".", 1)[1])
    return found


_SEQ_TYPES = (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType, mi.TupleType)


def _fix(v: object, t: mi.Type) -> object:
    """Resolve :class:`Typed`, :class:`EmptyBody` and int field keys in ``v``
    along the declared type ``t``, so msgspec can convert the result."""
    if isinstance(t, mi.UnionType):
        if v is None:
            return None
        nonnull = [x for x in t.types if not isinstance(x, mi.NoneType)]
        if isinstance(v, Typed):
            cls = _pick_struct(v.alias, t)
            if cls is not None:
                return _fix(v, _info(cls))
        if len(nonnull) == 1:
            return _fix(v, nonnull[0])
        if isinstance(v, EmptyBody):
            if any(isinstance(x, _SEQ_TYPES) for x in nonnull):
                return []
            return {}
        return _fix(v, mi.AnyType())
    if isinstance(v, Typed):
        cls = _pick_struct(v.alias, t)
        if cls is None:
            return _fix(v.value, t)
        inner = _fix(v.value, _info(cls))
        return msgspec.convert(inner, cls, strict=False)
    if isinstance(v, EmptyBody):
        return [] if isinstance(t, _SEQ_TYPES) else {}
    if isinstance(v, dict):
        if isinstance(t, mi.StructType):
            by_name = {f.encode_name: f.type for f in t.fields}
            out: dict[object, object] = {}
            for k, x in v.items():
                key = str(k)
                ft = by_name.get(key)
                out[key] = _fix(x, ft) if ft is not None else x
            return out
        if isinstance(t, mi.DictType):
            return {k: _fix(x, t.value_type) for k, x in v.items()}
        return {(k if isinstance(k, str) else str(k)): _fix(x, mi.AnyType())
                for k, x in v.items()}
    if isinstance(v, list):
        if isinstance(t, mi.TupleType):
            return [_fix(x, it) for x, it in zip(v, t.item_types, strict=False)]
        if isinstance(t, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
            return [_fix(x, t.item_type) for x in v]
        return [_fix(x, mi.AnyType()) for x in v]
    return v


def convert_plain(value: object, type: Any, marked: bool = True) -> Any:
    """Convert a plain value read by :class:`PlainReader` to ``type``.

    BinaryWire loses static types (``100.0`` arrives as an int, a long as a
    float32), so conversion is lax: numbers are coerced to the declared type.

    Raises:
        CodecError: the value does not fit ``type``.
    """
    if type is Any:
        return _untyped(value) if marked else value
    try:
        if marked:
            value = _fix(value, _info(type))
        return msgspec.convert(value, type, strict=False)
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise CodecError(str(exc)) from exc


def _untyped(v: object) -> object:
    """Plain Python for a value with no declared type: typed values of known
    aliases become their Struct, the rest keeps its plain form."""
    if isinstance(v, Typed):
        cls = _ALIASES.get(v.alias)
        if cls is not None and isinstance(v.value, dict):
            return msgspec.convert(_fix(v.value, _info(cls)), cls, strict=False)
        return _untyped(v.value)
    if isinstance(v, EmptyBody):
        return {}
    if isinstance(v, dict):
        return {k: _untyped(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_untyped(x) for x in v]
    return v


# -- reading: typed readers (the fast path for declared Struct and scalar types) --

_Reader = Callable[[PlainReader, int, int], tuple[Any, int]]
_READERS: dict[Any, _Reader] = {}
_NUMBER_CODES: Final = frozenset([*range(0x80), 0x90, 0x91, 0x92, 0x94, 0x96,
                                  0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xAF])


def _read_float(r: PlainReader, pos: int, end: int) -> tuple[Any, int]:
    v, q = r.value(pos, end)
    if type(v) is float:
        return v, q
    if type(v) is int:
        return float(v), q
    raise CodecError(f"expected a number at offset {pos}, got {type(v).__name__}")


def _read_int(r: PlainReader, pos: int, end: int) -> tuple[Any, int]:
    v, q = r.value(pos, end)
    if type(v) is int:
        return v, q
    if type(v) is float and v.is_integer():
        return min(int(v), (1 << 63) - 1), q  # a long sent as FLOAT32 (Java saturates)
    raise CodecError(f"expected an integer at offset {pos}, got {type(v).__name__}")


def _read_str(r: PlainReader, pos: int, end: int) -> tuple[Any, int]:
    v, q = r.value(pos, end)
    if type(v) is str:
        return v, q
    raise CodecError(f"expected text at offset {pos}, got {type(v).__name__}")


def _read_bool(r: PlainReader, pos: int, end: int) -> tuple[Any, int]:
    v, q = r.value(pos, end)
    if type(v) is bool:
        return v, q
    raise CodecError(f"expected a bool at offset {pos}, got {type(v).__name__}")


def _plain_reader(t: Any) -> _Reader:
    def read(r: PlainReader, pos: int, end: int) -> tuple[Any, int]:
        v, q = r.value(pos, end)
        return convert_plain(v, t, r.marked), q

    return read


def _unconstrained(t: mi.Type) -> bool:
    return all(getattr(t, a, None) is None
               for a in ("gt", "ge", "lt", "le", "multiple_of", "pattern", "min_length",
                         "max_length"))


def typed_reader(t: Any) -> _Reader:
    """A reader of one BinaryWire value straight into the declared type ``t``
    (Java's lax numbers coerced); declared Structs are filled field by field."""
    rd = _READERS.get(t)
    if rd is not None:
        return rd
    rd = _plain_reader(t)
    if t is not Any:
        info = _info(t)
        if isinstance(info, mi.FloatType) and _unconstrained(info):
            rd = _read_float
        elif isinstance(info, mi.IntType) and _unconstrained(info):
            rd = _read_int
        elif isinstance(info, mi.StrType) and _unconstrained(info):
            rd = _read_str
        elif isinstance(info, mi.BoolType):
            rd = _read_bool
        elif (isinstance(info, mi.StructType) and not info.forbid_unknown_fields
              and not info.array_like):
            rd = _struct_reader(info, t)
    _READERS[t] = rd
    return rd


def _struct_reader(info: mi.StructType, t: Any) -> _Reader:
    cls = info.cls
    fallback = _plain_reader(t)
    fields: dict[bytes, tuple[str, Any]] = {}
    for f in info.fields:
        fields[f.encode_name.encode("latin-1", "replace")] = (f.name, f.type)
    hints = _struct_hints(cls)
    readers: dict[bytes, tuple[str, _Reader]] = {}

    def read(r: PlainReader, pos: int, end: int) -> tuple[Any, int]:
        buf = r.buf
        pos = r.skip_padding(pos, end)
        code = buf[pos] if pos < end else -1
        if code == 0x82 and pos + 5 <= end:
            body = pos + 5
            body_end = body + _U32_UNPACK_FROM(buf, pos + 1)[0]
        else:  # typed, empty, short lengths, null ...: the general path
            return fallback(r, pos, end)
        if body_end > end:
            raise CodecError(f"truncated marshallable at offset {pos}")
        if not readers:
            for k, (name, _) in fields.items():
                readers[k] = (name, typed_reader(hints.get(name, Any)))
        kw: dict[str, Any] = {}
        p = body
        while p < body_end:
            c = buf[p]
            if 0xC0 <= c < 0xE0:
                q = p + 1 + c - 0xC0
                key = bytes(buf[p + 1:q])
            else:
                q = r.skip_padding(p, body_end)
                if q != p:
                    p = q
                    continue
                name_or_number, q = r.key(p, body_end)
                key = str(name_or_number).encode("latin-1", "replace")
            got = readers.get(key)
            if got is None:
                _, p = r.value(q, body_end)  # a field this version does not have
                continue
            v, p = got[1](r, q, body_end)
            kw.setdefault(got[0], v)
        try:
            return cls(**kw), body_end
        except TypeError as exc:  # a required field is missing
            raise CodecError(f"{cls.__name__}: {exc}") from exc

    return read


def _struct_hints(cls: type) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(cls)
    except Exception:
        return {}


_U32_UNPACK_FROM = struct.Struct("<I").unpack_from


# -- method-call arguments in C (aiochronicle._core._hot.WireEncoder / WireDecoder) ----
#
# A plan describes the declared types of a call's arguments to the C codec
# (native/wirecall.c): a tuple of nodes (kind, nullable, first, nfields, key,
# cls, attr); node 0 is the argument list, and a list's or a Struct's fields
# are the nodes first .. first + nfields.  A type the C side does not cover
# gives no plan, and the call is encoded and decoded by the Python code above
# (which the C encoder also defers to for any value it does not take).

_K_ARGS, _K_INT, _K_FLOAT, _K_STR, _K_BOOL, _K_BYTES, _K_STRUCT = range(7)
_SCALAR_KINDS: Final = ((mi.IntType, _K_INT), (mi.FloatType, _K_FLOAT), (mi.StrType, _K_STR),
                        (mi.BoolType, _K_BOOL), (mi.BytesType, _K_BYTES))
_PlanNode = tuple[int, int, int, int, bytes | None, type | None, str | None]
_MAX_PLAN_NODES: Final = 256


class _Unplannable(Exception):
    """A type the C codec does not cover."""


_Node = tuple[int, int, type | None, list[tuple[bytes, str, Any]]]


def _plan(types: list[Any], node: Callable[[Any, set[type]], _Node]
          ) -> tuple[_PlanNode, ...] | None:
    """Lay out the plan of an argument list breadth first; ``node(t, ...)``
    gives a type's (kind, nullable, Struct class, fields as (key, attr, type))."""
    nodes: list[list[Any]] = [[_K_ARGS, 0, 1, len(types), None, None, None]]
    todo: list[tuple[int, list[Any], set[type]]] = [(0, [(None, None, t) for t in types], set())]
    try:
        while todo:
            parent, fields, seen = todo.pop(0)
            nodes[parent][2] = len(nodes)
            if len(fields) > 64:
                return None
            for key, attr, t in fields:
                kind, nullable, cls, sub = node(t, seen)
                nodes.append([kind, nullable, 0, len(sub), key, cls, attr])
                if kind == _K_STRUCT:
                    assert cls is not None
                    todo.append((len(nodes) - 1, sub, seen | {cls}))
            if len(nodes) > _MAX_PLAN_NODES:
                return None
    except _Unplannable:
        return None
    return tuple((k, n, f, c, key, cls, attr) for k, n, f, c, key, cls, attr in nodes)


def _optional(info: Any) -> tuple[Any, int]:
    """(the type, 1) for ``T | None``, (the type, 0) for any other but a union,
    which no plan covers."""
    if isinstance(info, mi.UnionType):
        others = [x for x in info.types if not isinstance(x, mi.NoneType)]
        if len(others) != 1 or len(info.types) != 2:
            raise _Unplannable
        return others[0], 1
    return info, 0


def _writer_node(t: Any, seen: set[type]) -> _Node:
    """writer_for's cases the C encoder takes."""
    info, nullable = _optional(t if isinstance(t, mi.Type) else mi.type_info(t))
    for cls_, kind in _SCALAR_KINDS:
        if isinstance(info, cls_):
            return kind, nullable, None, []
    if isinstance(info, mi.StructType) and info.cls not in seen:
        return _K_STRUCT, nullable, info.cls, [(_key_bytes(f.encode_name), f.name, f.type)
                                               for f in info.fields]
    raise _Unplannable


def _reader_node(t: Any, seen: set[type]) -> _Node:
    """typed_reader's cases the C decoder takes (Optional ones: those whose
    msgspec conversion it repeats)."""
    if t is Any:
        raise _Unplannable
    info, nullable = _optional(_info(t))
    if nullable and isinstance(info, mi.StructType):  # None, or the Python path
        return _K_STRUCT, 1, info.cls, []
    for cls_, kind in _SCALAR_KINDS:
        if isinstance(info, cls_) and _unconstrained(info):
            return kind, nullable, None, []
    if (isinstance(info, mi.StructType) and not info.forbid_unknown_fields
            and not info.array_like and info.cls not in seen):
        hints = _struct_hints(info.cls)
        return _K_STRUCT, 0, info.cls, [
            (f.encode_name.encode("latin-1", "replace"), f.name, hints.get(f.name, Any))
            for f in info.fields]
    raise _Unplannable


def wire_call_encoder(key: bytes, types: list[Any],
                      fallback: Callable[..., bytes]) -> Callable[..., bytes]:
    """The encoder of a call's arguments (``enc(args, history=b"")``): the C
    one when it covers ``types``, deferring to ``fallback`` (the Python
    encoder, which it must equal) for values it does not take; else
    ``fallback`` itself."""
    plan = _plan(types, _writer_node)
    if plan is None:
        return fallback
    try:
        return WireEncoder(key, plan, fallback)
    except TypeError:  # a Struct whose fields are not plain slots
        return fallback


def wire_call_decoder(types: list[Any]) -> Callable[[Any, int], tuple[Any, ...] | None] | None:
    """``decode(payload, pos)``: the arguments of the call in ``payload`` whose
    arguments start at ``pos`` (the last event), or None when the Python reader
    must read it; None when the C decoder does not cover ``types``."""
    plan = _plan(types, _reader_node)
    if plan is None:
        return None
    return WireDecoder(plan).decode


class BinaryWireCodec(Codec):
    """Chronicle's BinaryWire (``BINARY_LIGHT``), byte-compatible with Java.

    :meth:`encode` writes a Struct, dataclass-like mapping or dict as a
    document (top-level ``field: value`` pairs, as Java's ``writeDocument``),
    a string as ``writeText`` does, and any other value as one BinaryWire value.
    """

    name = "binary_wire"
    code = 1
    methods = True

    def encode(self, value: Any) -> bytes:
        w = WireWriter(small_raw=False)
        try:
            if isinstance(value, msgspec.Struct):
                struct_writer(type(value))(w, value)
                return bytes(w.buf[5:])  # the fields, without the 82 length
            if isinstance(value, Mapping):
                w.object_value(value, _typed_default)
                return bytes(w.buf[5:])
            _write_any(w, value)
        except (TypeError, ValueError) as exc:
            raise CodecError(f"BinaryWire cannot encode {type(value).__name__}: {exc}") from exc
        return w.getvalue()

    def decode(self, payload: Any, type: Any = Any) -> Any:
        buf = payload if isinstance(payload, bytes | bytearray | memoryview) else bytes(payload)
        r = PlainReader(buf)
        end = len(buf)
        try:
            pos = r.skip_padding(0, end)
            if pos < end and r.at_key(pos):
                value: object = r.fields(pos, end)
            else:
                value, pos = r.value(pos, end)
                if r.skip_padding(pos, end) != end:
                    raise CodecError(f"trailing bytes after the value at offset {pos}")
        except WireError as exc:
            raise CodecError(str(exc)) from exc
        return convert_plain(value, type, r.marked)

    def render(self, payload: bytes) -> DecodedPayload | None:
        return decode_wire(payload)


# --------------------------------------------------------------------------
# The codec registry
# --------------------------------------------------------------------------


class Codecs:
    """The codecs, by name: ``Codecs.MSGPACK``, ``JSON``, ``BINARY_WIRE``,
    ``RAW``, ``TEXT``."""

    MSGPACK: Final[MsgpackCodec] = MsgpackCodec()
    JSON: Final[JsonCodec] = JsonCodec()
    BINARY_WIRE: Final[BinaryWireCodec] = BinaryWireCodec()
    RAW: Final[RawCodec] = RawCodec()
    TEXT: Final[TextCodec] = TextCodec()

    @staticmethod
    def all() -> tuple[Codec, ...]:
        """Every codec."""
        return (Codecs.MSGPACK, Codecs.JSON, Codecs.BINARY_WIRE, Codecs.RAW, Codecs.TEXT)

    @staticmethod
    def get(name_or_code: str | int | Codec) -> Codec:
        """The codec called ``name`` (``"msgpack"``, ``"binary-wire"``, ...) or
        recorded as ``code``.

        Raises:
            ValueError: no such codec.
        """
        if isinstance(name_or_code, Codec):
            return name_or_code
        for c in Codecs.all():
            if isinstance(name_or_code, int):
                if c.code == name_or_code:
                    return c
            elif c.name == name_or_code.lower().replace("-", "_").replace("binarywire",
                                                                         "binary_wire"):
                return c
        raise ValueError(f"no codec {name_or_code!r}; expected one of "
                         f"{', '.join(c.name for c in Codecs.all())}")


# --------------------------------------------------------------------------
# The codec a queue records
# --------------------------------------------------------------------------


def codec_of(code: int | None) -> Codec | None:
    """The codec recorded as ``code`` (the value of :data:`CODEC_KEY`), or None
    for no record or a code this version does not know."""
    if code is None:
        return None
    for c in Codecs.all():
        if c.code == code:
            return c
    return None


def recorded_codec(meta: TableStore | None) -> Codec | None:
    """The codec recorded in a queue's metadata table store, or None when there
    is none (or it is a code this version does not know)."""
    return None if meta is None else codec_of(meta.get(CODEC_KEY))


def record_codec(meta: TableStore | None, codec: Codec | str, where: str) -> Codec:
    """Record ``codec`` in the metadata table store of the queue at ``where``
    (creating the key); returns it.  The caller checks that the queue is open.

    Raises:
        CodecMismatchError: the queue already records another codec.
        ReadOnlyQueueError: the queue is open read-only (``meta`` None or read-only).
    """
    c = Codecs.get(codec)
    if meta is None or meta.read_only:
        raise ReadOnlyQueueError(f"queue {where} is open read-only")
    meta.acquire(CODEC_KEY, c.code)
    stored = meta.get(CODEC_KEY)
    if stored != c.code:
        other = next((x.name for x in Codecs.all() if x.code == stored), f"code {stored}")
        raise CodecMismatchError(f"queue {where} carries {other}, not {c.name}")
    return c


def resolve_codec(meta: TableStore | None, codec: Codec | str | None, where: str, *,
                  writing: bool) -> Codec:
    """The codec a method writer (``writing``) or reader uses on the queue at
    ``where`` whose metadata table store is ``meta``.

    Writers: the one asked for (recorded if the queue has none; an error if it
    records another); by default the recorded one, else msgpack (then
    recorded), whatever the queue already holds: pass ``codec="binary_wire"``
    to write method calls a Java process reads.  Readers: the one asked for,
    else the recorded one, else BinaryWire (a queue written by Java).
    """
    rec = recorded_codec(meta)
    if codec is not None:
        c = Codecs.get(codec)
        if not c.methods:
            raise ValueError(f"the {c.name} codec cannot carry method calls")
        if writing and rec is not c:
            record_codec(meta, c, where)
        return c
    if rec is not None:
        if not rec.methods:
            raise ValueError(f"queue {where} carries {rec.name}, which cannot hold "
                             "method calls")
        return rec
    if not writing:
        return Codecs.BINARY_WIRE
    return record_codec(meta, Codecs.MSGPACK, where)


# --------------------------------------------------------------------------
# Method-call envelopes (msgpack / JSON) and rendering
# --------------------------------------------------------------------------


def _as_call(value: object) -> dict[str, object] | None:
    """``{"history": ..., method: args}`` for a decoded msgpack/JSON call
    envelope, else None."""
    if not isinstance(value, list) or len(value) not in (2, 3):
        return None
    hist: object = None
    if len(value) == 3:
        hist, value = value[0], value[1:]
        try:
            hist = MessageHistory.from_plain(hist).to_dict()
        except WireError:
            return None
    key = value[0]
    if isinstance(key, bool) or not isinstance(key, str | int):
        return None
    out: dict[str, object] = {}
    if hist is not None:
        out["history"] = hist
    out[str(key)] = _plain(value[1])
    return out


def _plain(v: object) -> object:
    """JSON-friendly data for rendering."""
    if isinstance(v, HistoryBytes):
        return MessageHistory.from_bytes(v).to_dict()
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    if isinstance(v, msgspec.msgpack.Ext):
        return {"ext": v.code, "data": bytes(v.data).hex()}
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, _dt.date | _dt.time | uuid.UUID | Decimal):
        return str(v)
    return v


def _scalar(v: object) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, str):
        if (v and v.strip() == v and v.isprintable() and v[0] not in "-?:,[]{}#&*!|>'\"%@`"
                and ": " not in v and " #" not in v
                and v.lower() not in ("true", "false", "null", "~", "yes", "no")):
            try:
                float(v)
            except ValueError:
                return v
        return json.dumps(v, ensure_ascii=False)
    return json.dumps(v)


def _flow(v: object) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_scalar(str(k))}: {_flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return _scalar(v)


def _rendered(kind: str, value: object) -> DecodedPayload:
    if isinstance(value, dict):
        lines = [f"{_scalar(str(k))}: {_flow(x)}" for k, x in value.items()]
        return DecodedPayload(kind, value, "\n".join(lines), ", ".join(lines))
    text = _flow(value)
    return DecodedPayload(kind, value, text, text)


def _auto_msgpack(payload: bytes) -> DecodedPayload | None:
    """Claims only msgpack method-call envelopes (for ``--decode auto``)."""
    if not payload or payload[0] not in (0x92, 0x93):
        return None
    try:
        value = Codecs.MSGPACK.decoder(Any).decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    call = _as_call(value)
    return None if call is None else _rendered("msgpack", call)


register_decoder("msgpack", Codecs.MSGPACK.render, auto=False)
register_decoder("msgpack-call", _auto_msgpack, auto=True)
register_decoder("json", Codecs.JSON.render, auto=False)


def payload_decoder(rec: Codec | None) -> Callable[[bytes], DecodedPayload]:
    """The payload decoder for a queue recording the codec ``rec`` (for
    ``dump`` and ``tail``): msgpack and JSON payloads decoded by their codec, a
    text queue as text, anything else (BinaryWire, raw, no record) as
    ``--decode auto`` shows it.  Never raises: what the codec cannot read is
    shown as auto."""
    if rec is None or rec in (Codecs.BINARY_WIRE, Codecs.RAW):
        return decode_auto
    if rec is Codecs.TEXT:
        return decode_text

    def decode(payload: bytes) -> DecodedPayload:
        got = rec.render(payload) if payload else None
        return got if got is not None else decode_auto(payload)

    return decode


def decode_payload(rec: Codec | None, payload: bytes) -> str:
    """One payload of a queue recording the codec ``rec`` as one line of
    text (see :func:`payload_decoder`)."""
    if not payload:
        return decode_hex(payload).line
    return payload_decoder(rec)(payload).line
