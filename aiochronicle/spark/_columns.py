"""Columns of excerpts: Spark schemas, Arrow record batches, decoded payloads.

Shared by the Spark data source (``_source``), the sink (``_sink``) and the
driver feeder (``_feeder``).  The raw columns (``index``, ``cycle``,
``sequence``, ``payload``) of a :class:`~aiochronicle.Batch` become Arrow
arrays over the batch's own buffers: no per-row Python work.  Decoded columns
(a msgspec Struct's fields, or a method name and one struct column per method
of an interface) are decoded with msgspec and built column by column.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import enum
import importlib
import inspect
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import msgspec.inspect as mi
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .._format._wire import WireWriter
from .._messages._codecs import Codec, Codecs
from .._messages._methods import MethodSpec, interface_methods

if TYPE_CHECKING:
    from .._objects._queue import Tailer
    from .._storage._excerpt import Batch

__all__ = [
    "JVM_MSGPACK",
    "RAW_COLUMNS",
    "Layout",
    "load_object",
    "norm_options",
    "option_bool",
    "option_int",
]

RAW_COLUMNS = ("index", "cycle", "sequence", "payload")
"""The columns every excerpt has (``payload`` can be left out)."""

_RESERVED = frozenset((*RAW_COLUMNS, "metadata", "method"))

Conv = Callable[[Any], Any]


# --------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------


def norm_options(options: Mapping[str, str] | None) -> dict[str, str]:
    """Options with lower-case keys (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in (options or {}).items()}


def option_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    """A boolean option (``true``/``false``, any case) of normalised options."""
    v = options.get(key.lower())
    if v is None:
        return default
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"option {key} must be true or false, not {v!r}")


def option_int(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    """An integer option (decimal, or ``0x`` hex as the CLI prints indices)."""
    v = options.get(key.lower())
    if v is None or str(v).strip() == "":
        return default
    try:
        return int(str(v).strip(), 0)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {v!r}") from None


def load_object(spec: str) -> Any:
    """The object named ``module:qualname`` (or ``module.qualname``)."""
    mod, sep, qual = spec.partition(":")
    if not sep:
        mod, _, qual = spec.rpartition(".")
    if not mod or not qual:
        raise ValueError(f"expected 'module:Name', not {spec!r}")
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


# --------------------------------------------------------------------------
# msgspec types -> Spark types (+ a converter to Arrow-friendly values)
# --------------------------------------------------------------------------


def _json_text(v: Any) -> Any:
    return msgspec.json.encode(v, enc_hook=_json_default).decode()


def _json_default(v: Any) -> Any:
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    if isinstance(v, enum.Enum):
        return v.value
    return str(v)


def _nullable(conv: Conv) -> Conv:
    def c(v: Any) -> Any:
        return None if v is None else conv(v)

    return c


def _enum_conv(v: Any) -> Any:
    return v.value if isinstance(v, enum.Enum) else v


def _record_fields(t: mi.Type) -> list[tuple[str, mi.Type]] | None:
    if isinstance(t, mi.StructType | mi.DataclassType | mi.TypedDictType | mi.NamedTupleType):
        return [(f.name, f.type) for f in t.fields]
    return None


def _getter(t: mi.Type) -> Callable[[Any, str], Any]:
    if isinstance(t, mi.TypedDictType):
        return lambda v, k: v.get(k)
    return lambda v, k: getattr(v, k, None)


#: msgspec scalar types -> the Spark type for them, and the converter of a value
_SCALAR_TYPES: tuple[tuple[tuple[type[mi.Type], ...], Callable[[], DataType], Conv | None],
                     ...] = (
    ((mi.BoolType,), BooleanType, None),
    ((mi.IntType,), LongType, None),
    ((mi.FloatType,), DoubleType, None),
    ((mi.StrType,), StringType, None),
    ((mi.BytesType, mi.ByteArrayType, mi.MemoryViewType), BinaryType, _nullable(bytes)),
    ((mi.DateTimeType,), TimestampType, None),
    ((mi.DateType,), DateType, None),
    ((mi.TimeDeltaType,), DayTimeIntervalType, None),
    ((mi.TimeType, mi.UUIDType, mi.DecimalType), StringType, _nullable(str)),
)


def spark_type(t: mi.Type) -> tuple[DataType, Conv | None]:
    """The Spark type for a msgspec type, and how to turn a decoded value into
    what ``pyarrow.array`` takes for it (None: as it is)."""
    if isinstance(t, mi.UnionType):
        others = [x for x in t.types if not isinstance(x, mi.NoneType)]
        if len(others) == 1:
            return spark_type(others[0])
        return StringType(), _nullable(_json_text)
    for kinds, make, conv in _SCALAR_TYPES:
        if isinstance(t, kinds):
            return make(), conv
    if isinstance(t, mi.EnumType | mi.LiteralType):
        values = ([m.value for m in t.cls] if isinstance(t, mi.EnumType) else list(t.values))
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return LongType(), _nullable(_enum_conv)
        return StringType(), _nullable(lambda v: str(_enum_conv(v)))
    if isinstance(t, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        it, ic = spark_type(t.item_type)
        if ic is None:
            return ArrayType(it, True), _nullable(list)
        inner = ic
        return ArrayType(it, True), _nullable(lambda v: [inner(x) for x in v])
    if isinstance(t, mi.DictType):
        kt, kc = spark_type(t.key_type)
        vt, vc = spark_type(t.value_type)
        kcc = kc or (lambda x: x)
        vcc = vc or (lambda x: x)
        return MapType(kt, vt, True), _nullable(
            lambda v: [(kcc(k), vcc(x)) for k, x in v.items()])
    rec = _record_fields(t)
    if rec is not None:
        fields, conv = record_type(rec, _getter(t))
        return fields, _nullable(conv)
    return StringType(), _nullable(_json_text)


def record_type(fields: Sequence[tuple[str, mi.Type]],
                get: Callable[[Any, str], Any]) -> tuple[StructType, Conv]:
    """A Spark struct for named fields, and a converter of a record to a dict."""
    sfields = []
    convs: list[tuple[str, Conv | None]] = []
    for name, ft in fields:
        st, c = spark_type(ft)
        sfields.append(StructField(name, st, True))
        convs.append((name, c))

    def conv(v: Any) -> dict[str, Any]:
        out = {}
        for name, c in convs:
            x = get(v, name)
            out[name] = c(x) if c is not None else x
        return out

    return StructType(sfields), conv


JVM_MSGPACK = "aiochronicle.msgpack"
"""Field metadata key: how the JVM reader finds this struct column in a msgpack payload."""

_JVM_SCALARS: dict[type, str] = {mi.IntType: "long", mi.FloatType: "double", mi.StrType: "string",
                                 mi.BoolType: "boolean", mi.BytesType: "binary"}
_PLAIN = (bool, int, float, str)


def _jvm_scalar(t: mi.Type) -> tuple[str, bool] | None:
    """A type the JVM reader decodes (``long``, ``double``, ``string``, ``boolean``,
    ``binary``, optionally ``| None``) and whether it takes null; None for others."""
    nullable = False
    if isinstance(t, mi.UnionType):
        others = [x for x in t.types if not isinstance(x, mi.NoneType)]
        if len(others) != 1 or len(others) == len(t.types):
            return None
        t, nullable = others[0], True
    kind = _JVM_SCALARS.get(type(t))
    constrained = any(getattr(t, k, None) is not None for k in (
        "gt", "ge", "lt", "le", "multiple_of", "pattern", "min_length", "max_length"))
    if kind is None or constrained:
        return None
    return kind, nullable


def _jvm_msgpack_fields(info: mi.Type) -> list[dict[str, Any]] | None:
    """For a msgspec Struct the JVM reader can decode from msgpack itself: per field,
    its key (or position), type, nullability and default; None when it cannot
    (nested or constrained types, tagged or strict structs: the Python source decodes)."""
    if not isinstance(info, mi.StructType) or info.tag_field is not None \
            or info.forbid_unknown_fields:
        return None
    out = []
    for pos, f in enumerate(info.fields):
        scalar = _jvm_scalar(f.type)
        if scalar is None or f.default_factory is not msgspec.NODEFAULT:
            return None
        has_default = f.default is not msgspec.NODEFAULT
        if has_default and f.default is not None and not isinstance(f.default, _PLAIN):
            return None
        out.append({"key": f.encode_name, "pos": pos, "arrayLike": bool(info.array_like),
                    "type": scalar[0], "nullable": scalar[1], "hasDefault": has_default,
                    "default": f.default if has_default else None})
    return out


def _jvm_param_fields(spec: MethodSpec) -> list[dict[str, Any]] | None:
    """For a method's parameters the JVM reader can decode from msgpack itself (as
    :func:`_jvm_msgpack_fields` gives a Struct's fields), or None."""
    out = []
    for pos, (p, t) in enumerate(zip(spec.params, spec.types, strict=True)):
        scalar = _jvm_scalar(mi.type_info(t))
        has_default = p.default is not p.empty
        if scalar is None or (has_default and p.default is not None
                              and not isinstance(p.default, _PLAIN)):
            return None
        out.append({"key": p.name, "pos": pos, "arrayLike": True, "type": scalar[0],
                    "nullable": scalar[1], "hasDefault": has_default,
                    "default": p.default if has_default else None})
    return out


def _column_name(name: str) -> str:
    return f"value_{name}" if name in _RESERVED else name


# --------------------------------------------------------------------------
# the layout of a read: which columns, how to decode
# --------------------------------------------------------------------------


@dataclass
class _StructMode:
    cls: type
    names: list[str]  # attribute names, in column order
    convs: list[Conv | None]
    get: Callable[[Any, str], Any]


@dataclass
class _MethodCol:
    method: str
    column: str
    params: list[str]
    single: Conv | None  # one record argument: its converter to a dict
    convs: list[Conv | None] = field(default_factory=list)


@dataclass
class _IfaceMode:
    iface: type
    cols: list[_MethodCol]


class Layout:
    """What a read yields: the Spark schema and how to build each column.

    Options (case-insensitive, as Spark passes them):

    * ``struct``: ``module:Class`` of a msgspec Struct (or dataclass) each
      payload decodes into; its fields become columns.
    * ``interface``: ``module:Class`` of a method interface; adds a ``method``
      column and one struct column per method holding its argument (a
      Struct's fields, or the parameters by name).
    * ``codec``: the codec of the payloads (default: the one the queue records).
    * ``includePayload`` (default true), ``includeMetadata`` (default false:
      adds a ``metadata`` column and reads metadata excerpts too).
    * ``decodeErrors``: ``null`` (default: a payload that does not decode
      gives nulls) or ``fail``.
    """

    def __init__(self, options: Mapping[str, str], user_schema: StructType | None = None) -> None:
        options = norm_options(options)
        self._options = options
        self._user_schema = user_schema
        self.include_payload = option_bool(options, "includePayload", True)
        self.include_metadata = option_bool(options, "includeMetadata", False)
        errors = (options.get("decodeerrors") or "null").lower()
        if errors not in ("null", "fail"):
            raise ValueError(f"option decodeErrors must be null or fail, not {errors!r}")
        self.fail_on_error = errors == "fail"
        self.codec_name = options.get("codec") or None
        if self.codec_name is not None:
            Codecs.get(self.codec_name)  # fail early on a bad name
        self.struct_spec = options.get("struct") or None
        self.iface_spec = options.get("interface") or None
        if self.struct_spec and self.iface_spec:
            raise ValueError("give either the struct or the interface option, not both")
        self.mode: _StructMode | _IfaceMode | None = None
        fields = [StructField("index", LongType(), False),
                  StructField("cycle", IntegerType(), False),
                  StructField("sequence", LongType(), False)]
        if self.include_payload:
            fields.append(StructField("payload", BinaryType(), False))
        if self.include_metadata:
            fields.append(StructField("metadata", BooleanType(), False))
        if self.struct_spec:
            fields += self._struct_fields(load_object(self.struct_spec))
        elif self.iface_spec:
            fields += self._iface_fields(load_object(self.iface_spec))
        self.schema = StructType(fields)
        # columns asked for by a user schema that no mode gives: taken by name
        # from each payload decoded as a plain map
        self.loose: list[StructField] = []
        if user_schema is not None:
            known = {f.name for f in fields}
            self.loose = [f for f in user_schema.fields if f.name not in known]
            self.schema = user_schema
        self._arrow_schema: pa.Schema | None = None

    # -- schema --------------------------------------------------------------
    def _struct_fields(self, cls: Any) -> list[StructField]:
        if not isinstance(cls, type):
            raise TypeError(f"struct must name a class, not {cls!r}")
        info = mi.type_info(cls)
        rec = _record_fields(info)
        if rec is None:
            raise TypeError(f"{cls.__name__} is not a msgspec Struct, dataclass or TypedDict")
        get = _getter(info)
        out, names, convs = [], [], []
        jvm = _jvm_msgpack_fields(info)
        for i, (name, ft) in enumerate(rec):
            st, c = spark_type(ft)
            out.append(StructField(_column_name(name), st, True,
                                   {JVM_MSGPACK: jvm[i]} if jvm is not None else None))
            names.append(name)
            convs.append(c)
        self.mode = _StructMode(cls, names, convs, get)
        return out

    def _iface_fields(self, iface: Any) -> list[StructField]:
        fields: list[tuple[str, DataType, dict[str, Any] | None]] = []
        cols = []
        # what the JVM reader needs to decode msgpack calls itself (None: it cannot)
        jvm: list[dict[str, Any]] | None = []
        for name, spec in interface_methods(iface).items():
            keys = [msgspec.msgpack.encode(k).hex() for k in (name, spec.id) if k is not None]
            if spec.arity == 0:
                cols.append(_MethodCol(name, "", [], None))
                if jvm is not None:
                    jvm.append({"name": name, "keys": keys, "arity": 0, "column": None})
                continue
            types = [mi.type_info(t) for t in spec.types]
            rec = _record_fields(types[0]) if spec.arity == 1 else None
            arg: dict[str, Any] | None = None
            if rec is not None:
                st, conv = record_type(rec, _getter(types[0]))
                col = _MethodCol(name, _column_name(name), [], conv)
                got = _jvm_msgpack_fields(types[0])
                if got is not None:
                    shape = "array" if got and got[0]["arrayLike"] else "map"
                    arg = {"shape": shape, "fields": got}
            else:
                params = [p.name for p in spec.params]
                st, _ = record_type(list(zip(params, types, strict=True)), lambda v, k: None)
                col = _MethodCol(name, _column_name(name), params, None,
                                 [spark_type(t)[1] for t in types])
                got = _jvm_param_fields(spec)
                if got is not None:
                    arg = {"shape": "single" if spec.arity == 1 else "params", "fields": got}
            if jvm is not None and arg is not None and arg["fields"]:
                jvm.append({"name": name, "keys": keys, "arity": spec.arity,
                            "column": col.column})
            else:
                jvm = None
            fields.append((col.column, st, arg))
            cols.append(col)
        self.mode = _IfaceMode(iface, cols)

        def meta(value: dict[str, Any] | None) -> dict[str, Any] | None:
            return {JVM_MSGPACK: value} if jvm is not None else None

        name = f"{iface.__module__}:{iface.__qualname__}"
        return [StructField("method", StringType(), True,
                            meta({"interface": name, "methods": jvm})),
                *(StructField(c, st, True, meta(arg)) for c, st, arg in fields)]

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema Spark expects for :attr:`schema` (binary columns as
        32-bit offset ``binary``, timestamps in UTC)."""
        if self._arrow_schema is None:
            from pyspark.sql.pandas.types import to_arrow_schema

            self._arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        return self._arrow_schema

    def __getstate__(self) -> dict[str, Any]:
        # the loaded classes and converters stay behind: rebuilt from the
        # option strings where the layout is unpickled (a Spark worker)
        return {"options": self._options, "user": self._user_schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"], state["user"])  # type: ignore[misc]

    @property
    def decodes(self) -> bool:
        """Whether payloads are decoded at all."""
        return self.mode is not None or bool(self.loose)

    # -- building record batches ----------------------------------------------
    def record_batch(self, batch: Batch, shift: int, codec: Codec,
                     tailer: Tailer | None = None,
                     metadata: Sequence[bool] | None = None) -> pa.RecordBatch:
        """The record batch for ``batch`` (excerpts of a queue whose roll cycle
        has ``cycle_shift`` = ``shift``)."""
        n = len(batch)
        cols: dict[str, pa.Array] = {}
        idx = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(batch.indices)])
        cols["index"] = idx
        cols["cycle"] = pc.shift_right(idx, shift).cast(pa.int32())
        cols["sequence"] = pc.bit_wise_and(idx, (1 << shift) - 1)
        if self.include_payload:
            cols["payload"] = binary_array(batch)
        if self.include_metadata:
            cols["metadata"] = pa.array(metadata if metadata is not None else [False] * n,
                                        pa.bool_())
        if self.decodes:
            self._decode(batch, codec, tailer, cols)
        schema = self.arrow_schema
        arrays = []
        for f in schema:
            a = cols.get(f.name)
            if a is None:
                a = pa.nulls(n, f.type)
            elif not a.type.equals(f.type):
                a = a.cast(f.type)
            arrays.append(a)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _decode(self, batch: Batch, codec: Codec, tailer: Tailer | None,
                cols: dict[str, pa.Array]) -> None:
        schema = self.arrow_schema
        mode = self.mode
        if isinstance(mode, _StructMode):
            objs = self._decode_structs(batch, codec, mode.cls)
            for name, conv in zip(mode.names, mode.convs, strict=True):
                col = _column_name(name)
                if col not in schema.names:
                    continue
                get = mode.get
                vals = [None if o is None else get(o, name) for o in objs]
                if conv is not None:
                    vals = [conv(v) for v in vals]
                cols[col] = _array(vals, schema.field(col).type)
        elif isinstance(mode, _IfaceMode):
            self._decode_calls(batch, mode, tailer, cols)
        if self.loose:
            plain = self._decode_rows(batch, codec, Any)
            for f in self.loose:
                vals = [r.get(f.name) if isinstance(r, dict) else None for r in plain]
                cols[f.name] = _array(vals, schema.field(f.name).type)

    def _decode_rows(self, batch: Batch, codec: Codec, t: Any) -> list[Any]:
        d, o = batch.data, batch.offsets
        out: list[Any] = []
        fail = self.fail_on_error
        dec: Callable[[Any], Any]
        if codec is Codecs.MSGPACK or codec is Codecs.JSON:
            dec = codec.decoder(t).decode
        else:
            def dec(p: Any) -> Any:
                return codec.decode(p, t)
        for i in range(len(batch)):
            try:
                out.append(dec(d[o[i]:o[i + 1]]))
            except Exception:
                if fail:
                    raise
                out.append(None)
        return out

    def _decode_structs(self, batch: Batch, codec: Codec, cls: type) -> list[Any]:
        n = len(batch)
        if codec is Codecs.MSGPACK and n:
            # n msgpack documents back to back are the body of a msgpack array:
            # decode the whole batch in one call
            head = b"\xdd" + n.to_bytes(4, "big")
            try:
                got: list[Any] = codec.decoder(list[cls]).decode(  # type: ignore[valid-type]
                    head + batch.data)
                return got
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass  # one bad payload: decode one by one
        return self._decode_rows(batch, codec, cls)

    def _decode_calls(self, batch: Batch, mode: _IfaceMode, tailer: Tailer | None,
                      cols: dict[str, pa.Array]) -> None:
        reader, rec = _call_reader(mode.iface, tailer)
        # read-only (hashable) payload slices, as the method reader wants
        d = memoryview(bytes(batch.data))
        o, ix = batch.offsets, batch.indices
        n = len(batch)
        names: list[str | None] = [None] * n
        args: list[tuple[Any, ...] | None] = [None] * n
        process = reader.process
        for i in range(n):
            rec.got = None
            rec.error = None
            process(d[o[i]:o[i + 1]], ix[i])
            if rec.error is not None and self.fail_on_error:
                raise rec.error
            got = rec.got
            if got is not None:
                names[i], args[i] = got
        cols["method"] = pa.array(names, pa.string())
        schema = self.arrow_schema
        for mc in mode.cols:
            if not mc.column or mc.column not in schema.names:
                continue
            vals: list[Any] = []
            for name, a in zip(names, args, strict=True):
                if name != mc.method or a is None:
                    vals.append(None)
                elif mc.single is not None:
                    vals.append(mc.single(a[0]) if a and a[0] is not None else None)
                else:
                    vals.append({p: (c(v) if c is not None else v) for p, c, v in
                                 zip(mc.params, mc.convs, a, strict=False)})
            cols[mc.column] = _array(vals, schema.field(mc.column).type)


def _array(vals: list[Any], t: pa.DataType) -> pa.Array:
    try:
        return pa.array(vals, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        out = []
        for v in vals:  # keep what converts, null the rest
            try:
                pa.scalar(v, type=t)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                v = None
            out.append(v)
        return pa.array(out, type=t)


def binary_array(batch: Batch) -> pa.Array:
    """The payloads of ``batch`` as an Arrow ``binary`` array over its buffers."""
    n = len(batch)
    offs = pa.Array.from_buffers(pa.int64(), n + 1, [None, pa.py_buffer(batch.offsets)])
    offs32 = offs.cast(pa.int32())
    return pa.Array.from_buffers(pa.binary(), n,
                                 [None, offs32.buffers()[1], pa.py_buffer(batch.data)])


# --------------------------------------------------------------------------
# method calls: a method reader whose handlers record the call
# --------------------------------------------------------------------------


class _Recorder:
    got: tuple[str, tuple[Any, ...]] | None = None
    error: Exception | None = None


_RECORDERS: dict[type, type] = {}


def _recorder_class(iface: type) -> type:
    cls = _RECORDERS.get(iface)
    if cls is not None:
        return cls
    ns: dict[str, Any] = {}
    for name, spec in interface_methods(iface).items():
        def record(self: _Recorder, *args: Any, _name: str = name) -> None:
            self.got = (_name, args)

        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        record.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [self_param, *spec.params])
        record.__name__ = name
        ns[name] = record
    cls = type(f"_{iface.__name__}Recorder", (_Recorder,), ns)
    _RECORDERS[iface] = cls
    return cls


#: the method reader decoding each tailer's calls, kept while the tailer lives
_CALL_READERS: weakref.WeakKeyDictionary[Tailer, tuple[type, Any, _Recorder]] = (
    weakref.WeakKeyDictionary())


def _call_reader(iface: type, tailer: Tailer | None) -> tuple[Any, _Recorder]:
    if tailer is None:
        raise ValueError("decoding method calls needs the tailer the batch came from")
    cached = _CALL_READERS.get(tailer)
    if cached is not None and cached[0] is iface:
        return cached[1], cached[2]
    rec = _recorder_class(iface)()

    def on_error(exc: Exception, _excerpt: Any) -> None:
        rec.error = exc

    reader = tailer.method_reader(rec, interfaces=[iface], on_error=on_error,
                                  history=False, batch=False)
    _CALL_READERS[tailer] = (iface, reader, rec)
    return reader, rec


# --------------------------------------------------------------------------
# encoding rows for the sink
# --------------------------------------------------------------------------


def _plain_value(v: Any) -> Any:
    """A value from ``RecordBatch.to_pylist`` as codecs take it."""
    if isinstance(v, dict):
        return {k: _plain_value(x) for k, x in v.items()}
    if isinstance(v, list):
        if v and isinstance(v[0], tuple) and len(v[0]) == 2:
            return {k: _plain_value(x) for k, x in v}  # a map column
        return [_plain_value(x) for x in v]
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, _dt.timedelta):
        return v.total_seconds()
    if isinstance(v, uuid.UUID):
        return str(v)
    return v


def call_params(iface: type) -> dict[str, list[str] | None]:
    """For each method of ``iface``: None when its one argument is a record (a
    struct column is that record), else its parameter names (a struct column
    holds them by name)."""
    out: dict[str, list[str] | None] = {}
    for name, spec in interface_methods(iface).items():
        one_record = spec.arity == 1 and _record_fields(mi.type_info(spec.types[0])) is not None
        out[name] = None if one_record else [p.name for p in spec.params]
    return out


def encode_rows(rb: pa.RecordBatch, codec: Codec, skip: Iterable[str],
                params: Mapping[str, list[str] | None] | None = None) -> list[bytes]:
    """Each row of ``rb`` (less the ``skip`` columns) as one payload: a map of
    its columns, or with a ``method`` column a method call whose argument is
    the struct column of that name (else the other columns as a map).

    ``params`` (from :func:`call_params`) says which methods take several
    arguments: their struct column holds them by parameter name.
    """
    skip = set(skip)
    names = [n for n in rb.schema.names if n not in skip]
    rows = rb.select(names).to_pylist() if names else [{} for _ in range(rb.num_rows)]
    if "method" not in names:
        return [codec.encode({k: _plain_value(v) for k, v in r.items() if v is not None})
                for r in rows]
    if not codec.methods:
        raise ValueError(f"the {codec.name} codec cannot carry method calls")
    params = params or {}
    out = []
    for r in rows:
        m = r.pop("method")
        if m is None:
            raise ValueError("a row has a null method")
        m = str(m)
        arg = r.get(m)
        names_of = params.get(m)
        if names_of is not None:
            got = arg if isinstance(arg, dict) else {}
            args = [_plain_value(got.get(p)) for p in names_of]
            out.append(encode_call(codec, m, args, len(args)))
            continue
        if arg is None or not isinstance(arg, dict):
            arg = {k: v for k, v in r.items() if v is not None}
        out.append(encode_call(codec, m, [_plain_value(arg)], 1))
    return out


def encode_call(codec: Codec, method: str, args: list[Any], arity: int) -> bytes:
    """One method call framed as ``codec`` frames it: no argument as null, one
    as itself, several as an array (as method writers do)."""
    value: Any = None if arity == 0 else args[0] if arity == 1 else list(args)
    if codec is Codecs.MSGPACK or codec is Codecs.JSON:
        return codec.encode([method, value])
    if codec is Codecs.BINARY_WIRE:
        w = WireWriter(small_raw=False)
        w.event_name(method)
        if arity == 0:
            w.raw(b"\xe0")  # an empty text: no argument, as Java writes it
        elif arity == 1:
            w.object_value(value)
        else:
            token = w.begin_length32()
            for a in args:
                w.object_value(a)
            w.end_length32(token)
        return w.getvalue()
    raise ValueError(f"the {codec.name} codec cannot carry method calls")
