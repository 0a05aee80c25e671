"""BinaryWire (Chronicle Wire ``BINARY_LIGHT``) encoding and decoding.

This module knows nothing about queues: it turns Python values into the bytes a
Java ``BinaryWire`` writes (:class:`WireWriter`) and parses such bytes back into
an ordered, offset-annotated structure (:func:`parse_document`).

Byte layouts follow the Chronicle Queue format notes (section 9).  Two details
matter for byte compatibility with Java:

* Positions are *absolute file offsets*.  ``writeAlignTo`` padding depends on
  where in the file a value lands, so a :class:`WireWriter` is created with the
  file offset of its first byte, and every parsed :class:`Value` records the
  absolute offset of its payload (the queue later mutates bound values such as
  ``writePosition`` in place).
* Java's "UTF-8" works on UTF-16 code units: characters outside the BMP are
  written as two 3-byte surrogate sequences, and 8-bit names replace characters
  above U+00FF with ``?``.  Both are reproduced here.

The parser is meant to be run over untrusted (possibly corrupt) files: every
problem is reported as :class:`WireError` (a :class:`ValueError`) carrying the
absolute offset, never as ``IndexError``, ``struct.error`` or recursion errors.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import enum
import math
import mmap
import re
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import Final, NamedTuple, TypeAlias, TypeVar

from .._core._errors import WireError

__all__ = [
    "BytesLike",
    "Document",
    "EmptyBody",
    "HistoryBytes",
    "I64Array",
    "Key",
    "PlainReader",
    "Typed",
    "Value",
    "WireError",
    "WireWriter",
    "decode_stop_bit",
    "encode_stop_bit",
    "parse_document",
    "parse_value",
    "parse_values",
    "payload_text",
]

BytesLike: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
"""Anything the parser can read from (indexing yields ints, slicing bytes-likes)."""

Key: TypeAlias = str | int
"""A document key: a field/event name, or a ``FIELD_NUMBER`` as an int."""

# --------------------------------------------------------------------------
# Wire codes (BinaryWireCode)
# --------------------------------------------------------------------------

BYTES_LENGTH8: Final = 0x80
BYTES_LENGTH16: Final = 0x81
BYTES_LENGTH32: Final = 0x82
HISTORY_MESSAGE: Final = 0x86
FIELD_ANCHOR: Final = 0x87
ANCHOR: Final = 0x88
UPDATED_ALIAS: Final = 0x89
U8_ARRAY: Final = 0x8A
I64_ARRAY: Final = 0x8D
PADDING32: Final = 0x8E
PADDING: Final = 0x8F
FLOAT32: Final = 0x90
FLOAT64: Final = 0x91
FLOAT_STOP_2: Final = 0x92
FLOAT_STOP_4: Final = 0x94
FLOAT_STOP_6: Final = 0x96
UUID: Final = 0xA0
UINT8: Final = 0xA1
UINT16: Final = 0xA2
UINT32: Final = 0xA3
INT8: Final = 0xA4
INT16: Final = 0xA5
INT32: Final = 0xA6
INT64: Final = 0xA7
INT64_0X: Final = 0xAF
FALSE: Final = 0xB0
TRUE: Final = 0xB1
TIME: Final = 0xB2
DATE: Final = 0xB3
DATE_TIME: Final = 0xB4
ZONED_DATE_TIME: Final = 0xB5
TYPE_PREFIX: Final = 0xB6
FIELD_NAME_ANY: Final = 0xB7
STRING_ANY: Final = 0xB8
EVENT_NAME: Final = 0xB9
FIELD_NUMBER: Final = 0xBA
NULL: Final = 0xBB
TYPE_LITERAL: Final = 0xBC
EVENT_OBJECT: Final = 0xBD
COMMENT: Final = 0xBE
HINT: Final = 0xBF
FIELD_NAME0: Final = 0xC0
STRING_0: Final = 0xE0

_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1
_U64_MASK: Final = (1 << 64) - 1
_MAX_DEPTH: Final = 100
_MAX_STOP_BIT_BYTES: Final = 10

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_I64X2 = struct.Struct("<qq")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")

# Fixed-width integer codes: code -> (struct, payload size).
_INT_CODES: Final[dict[int, tuple[struct.Struct, int]]] = {
    UINT8: (struct.Struct("<B"), 1),
    UINT16: (struct.Struct("<H"), 2),
    UINT32: (struct.Struct("<I"), 4),
    INT8: (struct.Struct("<b"), 1),
    INT16: (struct.Struct("<h"), 2),
    INT32: (struct.Struct("<i"), 4),
    INT64: (_I64, 8),
    INT64_0X: (_I64, 8),
}

_TEXTUAL_CODES: Final[dict[int, str]] = {
    TIME: "time",
    DATE: "date",
    DATE_TIME: "date_time",
    ZONED_DATE_TIME: "zoned_date_time",
    TYPE_LITERAL: "type_literal",
}

_FLOAT_STOP_SCALE: Final[dict[int, float]] = {
    FLOAT_STOP_2: 1e2,
    FLOAT_STOP_4: 1e4,
    FLOAT_STOP_6: 1e6,
}


# --------------------------------------------------------------------------
# Primitive encodings
# --------------------------------------------------------------------------


def encode_stop_bit(value: int) -> bytes:
    """Encode ``value`` (a signed 64-bit integer) as a Chronicle stop-bit number.

    Seven bits per byte, least significant group first, high bit meaning "more
    follows".  A negative ``n`` is written as the groups of ``~n`` all carrying
    the continuation bit, followed by a ``0x00`` terminator (so ``-1`` is
    ``80 00``).

    Raises:
        ValueError: ``value`` is outside the signed 64-bit range.
    """
    if not _I64_MIN <= value <= _I64_MAX:
        raise ValueError(f"stop-bit value {value} is outside the int64 range")
    out = bytearray()
    if value < 0:
        n = ~value
        while True:
            out.append(0x80 | (n & 0x7F))
            n >>= 7
            if n == 0:
                break
        out.append(0)
        return bytes(out)
    n = value
    while n >= 0x80:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_stop_bit(buf: BytesLike, pos: int, end: int, base: int) -> tuple[int, int]:
    """Decode a stop-bit number from ``buf[pos:end]``; offsets in errors add ``base``."""
    start = pos
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise WireError(f"truncated stop-bit number at offset 0x{base + start:x}")
        if pos - start >= _MAX_STOP_BIT_BYTES:
            raise WireError(f"stop-bit number too long at offset 0x{base + start:x}")
        b = buf[pos]
        pos += 1
        if b & 0x80:
            result |= (b & 0x7F) << shift
            shift += 7
            continue
        if b == 0 and shift > 0:
            value = ~result
        else:
            result |= b << shift
            value = result
        if result > _I64_MAX:
            raise WireError(f"stop-bit number overflows int64 at offset 0x{base + start:x}")
        return value, pos


def decode_stop_bit(buf: BytesLike, pos: int) -> tuple[int, int]:
    """Decode a stop-bit number at ``buf[pos]``; return ``(value, position after it)``.

    Raises:
        WireError: the number is truncated or does not fit in a signed 64-bit integer.
    """
    if pos < 0:
        raise WireError(f"negative offset {pos}")
    return _read_stop_bit(buf, pos, len(buf), 0)


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _surrogate_pair(match: re.Match[str]) -> str:
    cp = ord(match.group()) - 0x10000
    return chr(0xD800 + (cp >> 10)) + chr(0xDC00 + (cp & 0x3FF))


def java_utf8(text: str) -> bytes:
    """Encode ``text`` the way Chronicle Bytes' ``appendUtf8`` does.

    Identical to UTF-8 for characters in the Basic Multilingual Plane; characters
    above U+FFFF become two 3-byte sequences (one per UTF-16 surrogate).
    """
    if text.isascii():
        return text.encode("ascii")
    return _ASTRAL.sub(_surrogate_pair, text).encode("utf-8", "surrogatepass")


def java_8bit(text: str) -> bytes:
    """Encode ``text`` the way Chronicle Bytes' ``append8bit`` does.

    One byte per UTF-16 code unit; code units above 0xFF become ``?``.
    """
    if text.isascii():
        return text.encode("ascii")
    out = bytearray()
    for ch in text:
        cp = ord(ch)
        if cp < 0x100:
            out.append(cp)
        elif cp > 0xFFFF:
            out += b"??"
        else:
            out.append(0x3F)
    return bytes(out)


def _decode_utf8(raw: bytes, at: int) -> str:
    """Decode Java-style UTF-8 (surrogates allowed), reporting errors at ``at``."""
    if raw.isascii():
        return raw.decode("ascii")
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise WireError(f"malformed UTF-8 at offset 0x{at + exc.start:x}") from None
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        # Re-pair surrogates written as separate 3-byte sequences.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


# --------------------------------------------------------------------------
# Parsed structure
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class I64Array:
    """A ``0x8D`` I64_ARRAY: ``capacity``, ``used``, then ``capacity`` longs.

    ``offset`` is the absolute offset of the capacity long; ``used`` lies at
    ``offset + 8`` and the values at :attr:`values_offset`.
    """

    capacity: int
    used: int
    values: tuple[int, ...]
    offset: int

    @property
    def used_offset(self) -> int:
        """Absolute offset of the ``used`` long."""
        return self.offset + 8

    @property
    def values_offset(self) -> int:
        """Absolute offset of the first value."""
        return self.offset + 16

    def value_offset(self, index: int) -> int:
        """Absolute offset of value ``index`` (``0 <= index < capacity``)."""
        if not 0 <= index < self.capacity:
            raise IndexError(f"index {index} outside array of capacity {self.capacity}")
        return self.offset + 16 + 8 * index


#: the type :meth:`Value._of_type` checks for
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class Value:
    """One parsed value.

    Attributes:
        kind: ``int``, ``float``, ``bool``, ``null``, ``text``, ``time``,
            ``date``, ``date_time``, ``zoned_date_time``, ``type_literal``,
            ``uuid``, ``bytes``, ``history``, ``int64_array``, ``document`` or
            ``sequence``.
        value: the Python value: ``int``, ``float``, ``bool``, ``None``,
            ``str``, ``uuid.UUID``, ``bytes``, :class:`I64Array`,
            :class:`Document` or ``list[Value]``.
        offset: absolute offset of the payload: the byte itself for raw small
            ints, the bytes after the code for fixed-width numbers (e.g. the 8
            bytes of ``A7``), the capacity long of an I64 array, the text bytes,
            or the first byte of a nested body.
        type_name: the ``TYPE_PREFIX`` alias preceding the value, if any.
        code: the wire code that introduced the value.
        code_offset: absolute offset of that code byte.
        end: absolute offset just after the value.
    """

    kind: str
    value: object
    offset: int
    type_name: str | None = None
    code: int = -1
    code_offset: int = -1
    end: int = -1

    def as_int(self) -> int:
        """Return the value as an int (integral floats are accepted, as Java does)."""
        if self.kind == "int" and isinstance(self.value, int):
            return self.value
        if (
            self.kind == "float"
            and isinstance(self.value, float)
            and math.isfinite(self.value)
            and self.value.is_integer()
        ):
            return int(self.value)
        raise self._expected("an integer")

    def as_float(self) -> float:
        """Return a numeric value as a float."""
        if self.kind in ("int", "float") and isinstance(self.value, int | float):
            return float(self.value)
        raise self._expected("a number")

    def as_str(self) -> str:
        """Return a textual value (text, time, date, ...) as a str."""
        return self._of_type(str, "text")

    def as_document(self) -> Document:
        """Return a nested marshallable."""
        return self._of_type(Document, "a document")

    def as_array(self) -> I64Array:
        """Return an I64 array (e.g. ``writePosition`` or an index page)."""
        return self._of_type(I64Array, "an I64 array")

    def _of_type(self, cls: type[_V], what: str) -> _V:
        if isinstance(self.value, cls):
            return self.value
        raise self._expected(what)

    def _expected(self, what: str) -> WireError:
        return WireError(f"expected {what} at offset 0x{self.code_offset:x}, got {self.kind}")

    def to_python(self) -> object:
        """Convert to plain Python data (documents become dicts, sequences lists)."""
        if isinstance(self.value, Document):
            return self.value.to_python()
        if isinstance(self.value, I64Array):
            return list(self.value.values)
        if isinstance(self.value, list):
            return [v.to_python() for v in self.value if isinstance(v, Value)]
        return self.value


class Document:
    """An ordered list of ``(key, Value)`` pairs parsed from a BinaryWire range.

    Keys are field/event names (``str``, case-sensitive) or field numbers
    (``int``).  Duplicate keys are kept; lookups return the first match.
    Iterating yields the ``(key, value)`` pairs in wire order.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Sequence[tuple[Key, Value]] = ()) -> None:
        """Create a document from ``(key, value)`` pairs."""
        self._items: tuple[tuple[Key, Value], ...] = tuple(items)

    @property
    def items(self) -> tuple[tuple[Key, Value], ...]:
        """The ``(key, value)`` pairs in wire order."""
        return self._items

    def keys(self) -> list[Key]:
        """The keys in wire order."""
        return [k for k, _ in self._items]

    def get(self, key: Key) -> Value | None:
        """Return the first value stored under ``key``, or ``None``."""
        for k, v in self._items:
            if k == key and type(k) is type(key):
                return v
        return None

    def __getitem__(self, key: Key) -> Value:
        """Return the first value stored under ``key``; raise ``KeyError`` if absent."""
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is present."""
        return isinstance(key, str | int) and self.get(key) is not None

    def __iter__(self) -> Iterator[tuple[Key, Value]]:
        """Iterate over ``(key, value)`` pairs."""
        return iter(self._items)

    def __len__(self) -> int:
        """Number of pairs."""
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        """Documents are equal when their pairs are."""
        if not isinstance(other, Document):
            return NotImplemented
        return self._items == other._items

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """Debug representation."""
        return f"Document({list(self._items)!r})"

    def to_python(self) -> dict[Key, object]:
        """Convert to a plain dict (first occurrence of a key wins)."""
        out: dict[Key, object] = {}
        for k, v in self._items:
            if k not in out:
                out[k] = v.to_python()
        return out


# --------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------


def _is_key_code(code: int) -> bool:
    return FIELD_NAME0 <= code < STRING_0 or code in (FIELD_NAME_ANY, EVENT_NAME, FIELD_NUMBER)


class _Parser:
    """Recursive-descent BinaryWire parser over ``buf``; offsets reported as ``base + index``."""

    __slots__ = ("base", "buf")

    def __init__(self, buf: BytesLike, base: int) -> None:
        self.buf = buf
        self.base = base

    def err(self, msg: str, pos: int) -> WireError:
        return WireError(f"{msg} at offset 0x{self.base + pos:x}")

    def need(self, pos: int, n: int, end: int, what: str) -> None:
        if n < 0 or pos + n > end:
            raise self.err(f"truncated {what}", pos)

    def stop_bit(self, pos: int, end: int) -> tuple[int, int]:
        return _read_stop_bit(self.buf, pos, end, self.base)

    def length_prefixed(self, pos: int, end: int, what: str) -> tuple[bytes | None, int, int]:
        """Read stop-bit length + bytes; return (data or None for -1, data start, new pos)."""
        n, p = self.stop_bit(pos, end)
        if n == -1:
            return None, p, p
        if n < 0:
            raise self.err(f"negative {what} length {n}", pos)
        self.need(p, n, end, what)
        return bytes(self.buf[p : p + n]), p, p + n

    def skip_padding(self, pos: int, end: int) -> int:
        buf = self.buf
        while pos < end:
            code = buf[pos]
            if code == PADDING:
                pos += 1
            elif code == PADDING32:
                self.need(pos + 1, 4, end, "padding length")
                (n,) = _U32.unpack_from(buf, pos + 1)
                self.need(pos + 5, n, end, "padding")
                pos += 5 + n
            elif code == COMMENT:
                _, _, pos = self.length_prefixed(pos + 1, end, "comment")
            else:
                break
        return pos

    def key(self, pos: int, end: int) -> tuple[Key, int]:
        code = self.buf[pos]
        if FIELD_NAME0 <= code < STRING_0:
            n = code - FIELD_NAME0
            self.need(pos + 1, n, end, "field name")
            return bytes(self.buf[pos + 1 : pos + 1 + n]).decode("latin-1"), pos + 1 + n
        if code in (FIELD_NAME_ANY, EVENT_NAME):
            raw, _, p = self.length_prefixed(pos + 1, end, "field name")
            if raw is None:
                raise self.err("null field name", pos)
            return raw.decode("latin-1"), p
        if code == FIELD_NUMBER:
            return self.stop_bit(pos + 1, end)
        raise self.err(f"expected a field name, found code 0x{code:02x}", pos)

    def fields(self, start: int, end: int, depth: int) -> Document:
        items: list[tuple[Key, Value]] = []
        pos = start
        while True:
            pos = self.skip_padding(pos, end)
            if pos >= end:
                break
            key_pos = pos
            key, pos = self.key(pos, end)
            pos = self.skip_padding(pos, end)
            if pos >= end:
                raise self.err(f"field {key!r} has no value", key_pos)
            value, pos = self.value(pos, end, depth)
            items.append((key, value))
        return Document(items)

    def values(self, start: int, end: int, depth: int) -> list[Value]:
        out: list[Value] = []
        pos = start
        while True:
            pos = self.skip_padding(pos, end)
            if pos >= end:
                return out
            value, pos = self.value(pos, end, depth)
            out.append(value)

    def nested(self, code: int, pos: int, end: int, depth: int) -> tuple[Value, int]:
        """Parse ``80/81/82`` + length + body starting at the code byte ``pos``."""
        buf = self.buf
        if code == BYTES_LENGTH8:
            self.need(pos + 1, 1, end, "length")
            n, body = buf[pos + 1], pos + 2
        elif code == BYTES_LENGTH16:
            self.need(pos + 1, 2, end, "length")
            n, body = buf[pos + 1] | (buf[pos + 2] << 8), pos + 3
        else:
            self.need(pos + 1, 4, end, "length")
            (n,) = _U32.unpack_from(buf, pos + 1)
            body = pos + 5
        self.need(body, n, end, "nested body")
        body_end = body + n
        first = self.skip_padding(body, body_end)
        kind: str
        content: object
        if first >= body_end:
            kind, content = "document", Document()
        elif buf[first] in (U8_ARRAY, HISTORY_MESSAGE):
            inner, _ = self.value(first, body_end, depth)
            return inner, body_end
        elif _is_key_code(buf[first]):
            kind, content = "document", self.fields(body, body_end, depth + 1)
        else:
            kind, content = "sequence", self.values(body, body_end, depth + 1)
        base = self.base
        return Value(kind, content, base + body, None, code, base + pos, base + body_end), body_end

    def value(self, pos: int, end: int, depth: int) -> tuple[Value, int]:
        """Parse one value whose code byte is at ``pos`` (padding already skipped)."""
        if depth > _MAX_DEPTH:
            raise self.err("nesting too deep", pos)
        buf = self.buf
        base = self.base
        code = buf[pos]
        at = base + pos
        p = pos + 1

        def made(kind: str, value: object, offset: int, new_pos: int) -> tuple[Value, int]:
            return Value(kind, value, offset, None, code, at, base + new_pos), new_pos

        if code < 0x80:
            return made("int", code, at, p)
        if code in _INT_CODES:
            st, size = _INT_CODES[code]
            self.need(p, size, end, "integer")
            (iv,) = st.unpack_from(buf, p)
            return made("int", iv, base + p, p + size)
        if code in (BYTES_LENGTH8, BYTES_LENGTH16, BYTES_LENGTH32):
            return self.nested(code, pos, end, depth)
        if code == I64_ARRAY:
            self.need(p, 16, end, "I64 array header")
            capacity, used = _I64X2.unpack_from(buf, p)
            if capacity < 0 or capacity > (end - p - 16) // 8:
                raise self.err(f"I64 array capacity {capacity} exceeds the data", pos)
            vals = struct.unpack_from(f"<{capacity}q", buf, p + 16) if capacity else ()
            arr = I64Array(capacity, used, tuple(vals), base + p)
            return made("int64_array", arr, base + p, p + 16 + 8 * capacity)
        if code in (U8_ARRAY, HISTORY_MESSAGE):
            kind = "bytes" if code == U8_ARRAY else "history"
            return made(kind, bytes(buf[p:end]), base + p, end)
        if code == FLOAT32:
            self.need(p, 4, end, "float32")
            return made("float", _F32.unpack_from(buf, p)[0], base + p, p + 4)
        if code == FLOAT64:
            self.need(p, 8, end, "float64")
            return made("float", _F64.unpack_from(buf, p)[0], base + p, p + 8)
        if code in _FLOAT_STOP_SCALE:
            n, q = self.stop_bit(p, end)
            return made("float", n / _FLOAT_STOP_SCALE[code], base + p, q)
        if code == UUID:
            self.need(p, 16, end, "UUID")
            msb, lsb = _I64X2.unpack_from(buf, p)
            u = uuid.UUID(int=((msb & _U64_MASK) << 64) | (lsb & _U64_MASK))
            return made("uuid", u, base + p, p + 16)
        if code in (FALSE, TRUE):
            return made("bool", code == TRUE, at, p)
        if code == NULL:
            return made("null", None, at, p)
        if code >= STRING_0:
            n = code - STRING_0
            self.need(p, n, end, "text")
            return made("text", _decode_utf8(bytes(buf[p : p + n]), base + p), base + p, p + n)
        if code == STRING_ANY or code in _TEXTUAL_CODES:
            raw, data_pos, q = self.length_prefixed(p, end, "text")
            if raw is None:
                return made("null", None, base + data_pos, q)
            kind = _TEXTUAL_CODES.get(code, "text")
            return made(kind, _decode_utf8(raw, base + data_pos), base + data_pos, q)
        if code == TYPE_PREFIX:
            raw, data_pos, q = self.length_prefixed(p, end, "type prefix")
            if raw is None:
                raise self.err("null type prefix", pos)
            alias = _decode_utf8(raw, base + data_pos)
            q = self.skip_padding(q, end)
            if q >= end:
                raise self.err(f"type prefix {alias!r} has no value", pos)
            inner, q = self.value(q, end, depth + 1)
            return replace(inner, type_name=alias), q
        if _is_key_code(code):
            raise self.err(f"field name code 0x{code:02x} where a value was expected", pos)
        raise self.err(f"unsupported wire code 0x{code:02x}", pos)


def _check_range(buf: BytesLike, start: int, end: int) -> None:
    if not 0 <= start <= end <= len(buf):
        raise WireError(f"invalid range [{start}, {end}) for a buffer of {len(buf)} bytes")


def parse_document(buf: BytesLike, start: int, end: int, base: int = 0) -> Document:
    """Parse ``buf[start:end]`` as a sequence of ``key value`` pairs.

    ``start`` and ``end`` index ``buf``; ``base`` is the absolute file offset of
    ``buf[0]`` and is added to every offset reported (in values and in errors).
    Padding (``8F``, ``8E``) and comments (``BE``) are skipped before keys and
    values.

    Raises:
        WireError: the bytes are malformed, truncated or use an unsupported code.
    """
    _check_range(buf, start, end)
    return _Parser(buf, base).fields(start, end, 0)


def parse_value(buf: BytesLike, pos: int, end: int, base: int = 0) -> tuple[Value, int]:
    """Parse a single value at ``buf[pos]`` (leading padding skipped) within ``end``.

    Returns the value and the index just after it.  Offsets as for
    :func:`parse_document`.
    """
    _check_range(buf, pos, end)
    parser = _Parser(buf, base)
    p = parser.skip_padding(pos, end)
    if p >= end:
        raise parser.err("no value", pos)
    return parser.value(p, end, 0)


def parse_values(buf: BytesLike, start: int, end: int, base: int = 0) -> list[Value]:
    """Parse ``buf[start:end]`` as a sequence of key-less values (e.g. ``E3 one``)."""
    _check_range(buf, start, end)
    return _Parser(buf, base).values(start, end, 0)


# --------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------


def _check_i64(value: int) -> None:
    if not _I64_MIN <= value <= _I64_MAX:
        raise ValueError(f"{value} is outside the int64 range")


def _long_fits_float32(value: int) -> bool:
    """Java's ``(long) (float) l == l`` (including the saturating cast)."""
    if value == _I64_MAX:
        return True  # (float) MAX == 2^63, which casts back (saturated) to MAX
    f = _F32.unpack(_F32.pack(float(value)))[0]
    return int(f) == value


def _double_fits_float32(value: float) -> bool:
    """Java's ``(double) (float) d == d``."""
    try:
        return bool(_F32.unpack(_F32.pack(value))[0] == value)
    except OverflowError:
        return False


def _java_d2l(value: float) -> int:
    """Java's saturating ``(long) d`` cast."""
    if math.isnan(value):
        return 0
    if value >= 9.223372036854775807e18:
        return _I64_MAX
    if value <= -9.223372036854775808e18:
        return _I64_MIN
    return int(value)


def _java_round(value: float) -> int:
    """Java's ``Math.round(double)``: round half up, saturating, NaN -> 0."""
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return _I64_MAX if value > 0 else _I64_MIN
    fl = math.floor(value)
    r = fl + 1 if value - fl >= 0.5 else fl
    return max(_I64_MIN, min(_I64_MAX, r))


def _java_div(a: int, b: int) -> int:
    """Java's truncating ``long / long`` for ``b > 0``."""
    q = abs(a) // b
    return q if a >= 0 else -q


class WireWriter:
    """Builds BinaryWire bytes into :attr:`buf`.

    ``base`` is the absolute file offset of the first byte written; alignment
    padding and the offsets returned by the ``*_for_binding`` methods depend on
    it.  ``small_raw`` selects the number style: ``True`` (Chronicle 5.20 and
    older) writes 0..127 as the raw byte, ``False`` (5.25 onwards) writes
    0..255 as ``A1 xx``.
    """

    def __init__(self, base: int = 0, *, small_raw: builtins.bool = True) -> None:
        """Create an empty writer whose first byte lands at file offset ``base``."""
        if base < 0:
            raise ValueError("base must be non-negative")
        self.buf = bytearray()
        self.base = base
        self.small_raw = small_raw

    # -- positions ---------------------------------------------------------

    @property
    def pos(self) -> int:
        """Absolute offset of the next byte to be written."""
        return self.base + len(self.buf)

    def getvalue(self) -> bytes:
        """The bytes written so far."""
        return bytes(self.buf)

    def raw(self, data: bytes | bytearray | memoryview) -> WireWriter:
        """Append raw bytes."""
        self.buf += data
        return self

    def _code(self, code: int) -> None:
        self.buf.append(code)

    # -- keys --------------------------------------------------------------

    def event_name(self, name: str) -> WireWriter:
        """``B9`` + stop-bit length + 8-bit chars (an event / top-level key)."""
        data = java_8bit(name)
        self._code(EVENT_NAME)
        self.buf += encode_stop_bit(len(data))
        self.buf += data
        return self

    def field(self, name: str) -> WireWriter:
        """A field name: ``C0|len`` + chars when shorter than 32, else ``B7`` + stop-bit len.

        As in Java, a short name made only of digits that parses as an int is
        written as a ``FIELD_NUMBER``.
        """
        data = java_8bit(name)
        n = len(data)
        if n < 0x20:
            if n and data.isdigit() and int(data) <= 0x7FFFFFFF:
                return self.field_number(int(data))
            self._code(FIELD_NAME0 + n)
        else:
            self._code(FIELD_NAME_ANY)
            self.buf += encode_stop_bit(n)
        self.buf += data
        return self

    def field_number(self, number: int) -> WireWriter:
        """``BA`` + stop-bit number (a numeric field / method id; -1 is ``history``)."""
        self._code(FIELD_NUMBER)
        self.buf += encode_stop_bit(number)
        return self

    def type_prefix(self, alias: str) -> WireWriter:
        """``B6`` + stop-bit length + UTF-8 class alias; the next value is typed by it."""
        data = java_utf8(alias)
        self._code(TYPE_PREFIX)
        self.buf += encode_stop_bit(len(data))
        self.buf += data
        return self

    # -- scalars -----------------------------------------------------------

    def text(self, s: str | None) -> WireWriter:
        """A string: ``BB`` for None, ``E0+len`` when under 32 UTF-8 bytes, else ``B8``."""
        if s is None:
            self._code(NULL)
            return self
        data = java_utf8(s)
        if len(data) < 0x20:
            self._code(STRING_0 + len(data))
        else:
            self._code(STRING_ANY)
            self.buf += encode_stop_bit(len(data))
        self.buf += data
        return self

    def _uint8(self, value: int, small_raw: builtins.bool) -> None:
        if small_raw and value < 0x80:
            self._code(value)
        else:
            self._code(UINT8)
            self.buf.append(value)

    def _fixed(self, code: int, fmt: str, value: int) -> None:
        self._code(code)
        self.buf += struct.pack(fmt, value)

    def int_compact(self, value: int, small_raw: builtins.bool | None = None) -> WireWriter:
        """A long written with Java's number compaction (``int8/16/32/64`` on BINARY_LIGHT).

        0..255 -> raw byte (0..127, when ``small_raw``) or ``A1``; 256..32767 ->
        ``A5``; ..65535 -> ``A2``; ..2^31-1 -> ``A6``; ..2^32-1 -> ``A3``;
        negatives -> ``A4``/``A5``/``A6``; otherwise ``90`` FLOAT32 when the
        value survives a float round trip, else ``A7``.
        """
        _check_i64(value)
        raw_small = self.small_raw if small_raw is None else small_raw
        if 0 <= value <= 0xFF:
            self._uint8(value, raw_small)
        elif 0 <= value <= 0x7FFF:
            self._fixed(INT16, "<h", value)
        elif 0 <= value <= 0xFFFF:
            self._fixed(UINT16, "<H", value)
        elif 0 <= value <= 0x7FFFFFFF:
            self._fixed(INT32, "<i", value)
        elif 0 <= value <= 0xFFFFFFFF:
            self._fixed(UINT32, "<I", value)
        elif -0x80 <= value < 0:
            self._fixed(INT8, "<b", value)
        elif -0x8000 <= value < 0:
            self._fixed(INT16, "<h", value)
        elif -0x80000000 <= value < 0:
            self._fixed(INT32, "<i", value)
        elif _long_fits_float32(value):
            self._code(FLOAT32)
            self.buf += _F32.pack(float(value))
        else:
            self._fixed(INT64, "<q", value)
        return self

    def int64(self, value: int) -> WireWriter:
        """Fixed-width ``A7`` + i64 (no compaction, no alignment)."""
        _check_i64(value)
        self._fixed(INT64, "<q", value)
        return self

    def int32(self, value: int) -> WireWriter:
        """Fixed-width ``A6`` + i32."""
        if not -0x80000000 <= value <= 0x7FFFFFFF:
            raise ValueError(f"{value} is outside the int32 range")
        self._fixed(INT32, "<i", value)
        return self

    def float32(self, value: float) -> WireWriter:
        """Fixed-width ``90`` + IEEE-754 single."""
        self._code(FLOAT32)
        self.buf += _F32.pack(value)
        return self

    def float64(self, value: float, small_raw: builtins.bool | None = None) -> WireWriter:
        """A double written with Java's compaction (``writeNumber(double)``).

        Integral values become small ints / ``A2`` / FLOAT32 / ``A3`` / ``91``
        (negatives ``A4`` / ``A5`` / FLOAT32 / ``A6`` / ``91``); other values use
        fixed point ``92``/``94``/``96`` when exact, else FLOAT32 when lossless
        (or NaN), else ``91``.
        """
        d = float(value)
        raw_small = self.small_raw if small_raw is None else small_raw
        if float(_java_d2l(d)) != d:
            self._float_non_integral(d)
            return self
        if d >= 0:
            if d <= 0xFF:
                self._uint8(int(d), raw_small)
            elif d <= 0xFFFF:
                self._fixed(UINT16, "<H", int(d))
            elif _double_fits_float32(d):
                self.float32(d)
            elif d <= 0xFFFFFFFF:
                self._fixed(UINT32, "<I", int(d))
            else:
                self._code(FLOAT64)
                self.buf += _F64.pack(d)
        elif d >= -0x80:
            self._fixed(INT8, "<b", int(d))
        elif d >= -0x8000:
            self._fixed(INT16, "<h", int(d))
        elif _double_fits_float32(d):
            self.float32(d)
        elif d >= -0x80000000:
            self._fixed(INT32, "<i", int(d))
        else:
            self._code(FLOAT64)
            self.buf += _F64.pack(d)
        return self

    def _float_non_integral(self, d: float) -> None:
        l6 = _java_round(d * 1e6)
        if l6 / 1e6 == d and -(1 << 35) < l6 < (1 << 42):
            i2 = _java_div(l6, 10000)
            i4 = _java_div(l6, 100)
            for code, scaled, scale in (
                (FLOAT_STOP_2, i2, 1e2),
                (FLOAT_STOP_4, i4, 1e4),
                (FLOAT_STOP_6, l6, 1e6),
            ):
                if scaled / scale == d:
                    self._code(code)
                    self.buf += encode_stop_bit(scaled)
                    return
        if math.isnan(d) or _double_fits_float32(d):
            self.float32(d)
        else:
            self._code(FLOAT64)
            self.buf += _F64.pack(d)

    def bool(self, value: builtins.bool) -> WireWriter:
        """``B1`` for True, ``B0`` for False."""
        self._code(TRUE if value else FALSE)
        return self

    def null(self) -> WireWriter:
        """``BB``."""
        self._code(NULL)
        return self

    def _write_length(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"invalid length {n}")
        if n < 1 << 8:
            self._code(BYTES_LENGTH8)
            self.buf.append(n)
        elif n < 1 << 16:
            self._fixed(BYTES_LENGTH16, "<H", n)
        elif n < 1 << 32:
            self._fixed(BYTES_LENGTH32, "<I", n)
        else:
            raise ValueError(f"length {n} does not fit in 32 bits")

    def bytes_value(self, data: bytes | bytearray | memoryview | None) -> WireWriter:
        """``bytes(...)``: ``80/81/82`` length (n+1) + ``8A`` + data; None -> ``BB``."""
        if data is None:
            return self.null()
        self._write_length(len(data) + 1)
        self._code(U8_ARRAY)
        self.buf += data
        return self

    # -- padding and alignment --------------------------------------------

    def padding(self, n: int) -> WireWriter:
        """Java's ``addPadding``: ``8E`` + u32(n-5) + zeros when n >= 5, else n x ``8F``."""
        if n < 0:
            raise ValueError(f"cannot add {n} bytes of padding")
        if n >= 5:
            self._fixed(PADDING32, "<I", n - 5)
            self.buf += bytes(n - 5)
        else:
            self.buf += bytes([PADDING]) * n
        return self

    def align_to(self, alignment: int, plus: int = 0) -> WireWriter:
        """Java's ``writeAlignTo``: pad so that ``pos + plus`` is a multiple of ``alignment``."""
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment {alignment} is not a power of two")
        mod = (self.pos + plus) & (alignment - 1)
        if mod:
            self.padding(alignment - mod)
        return self

    def pad_to_cache_align(self) -> WireWriter:
        """Java's ``padToCacheAlign``: pad to the next 64 only when ``pos & 63 > 60``."""
        mod = self.pos & 63
        if mod > 60:
            self.padding(64 - mod)
        return self

    # -- bound values ----------------------------------------------------

    def int64_for_binding(self, value: int) -> int:
        """``align_to(8, 1)`` + ``A7`` + i64; return the absolute offset of the i64."""
        self.align_to(8, 1)
        self.int64(value)
        return self.pos - 8

    def int32_for_binding(self, value: int) -> int:
        """``align_to(4, 1)`` + ``A6`` + i32; return the absolute offset of the i32."""
        self.align_to(4, 1)
        self.int32(value)
        return self.pos - 4

    def int128_for_binding(self, value1: int, value2: int) -> int:
        """``align_to(16, 1)`` + ``8D`` + 2 + 2 + v1 + v2; return the offset of v1."""
        _check_i64(value1)
        _check_i64(value2)
        self.align_to(16, 1)
        self._code(I64_ARRAY)
        offset = self.pos + 16
        self.buf += struct.pack("<qqqq", 2, 2, value1, value2)
        return offset

    def int64_array(self, capacity: int, values: Sequence[int] = ()) -> int:
        """``align_to(8, 1)`` + ``8D`` + capacity + used + capacity longs.

        ``used`` is ``len(values)``; the values are followed by zeros.  Returns
        the absolute offset of the capacity long.
        """
        if capacity < 0 or len(values) > capacity:
            raise ValueError(f"{len(values)} values do not fit a capacity of {capacity}")
        self.align_to(8, 1)
        self._code(I64_ARRAY)
        offset = self.pos
        self.buf += struct.pack(f"<qq{len(values)}q", capacity, len(values), *values)
        self.buf += bytes(8 * (capacity - len(values)))
        return offset

    # -- nested structures -----------------------------------------------

    def begin_length32(self) -> int:
        """Write ``82`` + a u32 placeholder; return a token for :meth:`end_length32`."""
        self._code(BYTES_LENGTH32)
        token = self.pos
        self.buf += b"\0\0\0\0"
        return token

    def end_length32(self, token: int) -> WireWriter:
        """Patch the placeholder written by :meth:`begin_length32` with the body length."""
        index = token - self.base
        if not 0 <= index <= len(self.buf) - 4:
            raise ValueError(f"invalid length token {token}")
        _U32.pack_into(self.buf, index, self.pos - (token + 4))
        return self

    @contextmanager
    def marshallable(self, type_alias: str | None = None) -> Iterator[WireWriter]:
        """Context manager writing ``[B6 alias] 82 <len>`` + the body written inside."""
        if type_alias is not None:
            self.type_prefix(type_alias)
        token = self.begin_length32()
        yield self
        self.end_length32(token)

    def marshallable_typed(self, alias: str) -> AbstractContextManager[WireWriter]:
        """Alias of ``marshallable(alias)``."""
        return self.marshallable(alias)

    # -- plain Python values (method-call payloads) ------------------------

    def object_value(self, value: object,
                     default: Callable[[WireWriter, object], None] | None = None) -> WireWriter:
        """Write a plain Python value the way Java's ``ValueOut.object`` writes
        the matching Java value (numbers compacted as ``int64``/``float64`` do).

        ``None`` -> ``BB``; bool -> ``B0``/``B1``; int -> :meth:`int_compact`;
        float -> :meth:`float64`; str -> :meth:`text`; bytes-likes ->
        :meth:`bytes_value`; :class:`Typed` -> ``B6 alias`` + its value; a
        mapping -> a nested marshallable of its items (str keys as field names,
        int keys as field numbers); list/tuple/set -> a sequence; an Enum -> its
        ``value``; UUID -> ``A0``; datetime/date/time -> ``B4``/``B5``/``B3``/``B2``
        ISO text.  Anything else goes to ``default(writer, value)``.

        Raises:
            TypeError: the value has no BinaryWire form and no ``default`` was given.
            ValueError: an int is outside the int64 range.
        """
        t = type(value)
        if value is None:
            self._code(NULL)
        elif t is str:
            self.text(value)  # type: ignore[arg-type]
        elif t is int:
            self.int_compact(value)  # type: ignore[arg-type]
        elif t is float:
            self.float64(value)  # type: ignore[arg-type]
        elif t is builtins.bool:
            self._code(TRUE if value else FALSE)
        elif isinstance(value, Typed):
            self.type_prefix(value.alias)
            self.object_value(value.value, default)
        elif isinstance(value, enum.Enum):
            self.object_value(value.value, default)
        elif isinstance(value, builtins.bool):
            self._code(TRUE if value else FALSE)
        elif isinstance(value, int):
            self.int_compact(int(value))
        elif isinstance(value, float):
            self.float64(float(value))
        elif isinstance(value, str):
            self.text(str(value))
        elif isinstance(value, bytes | bytearray | memoryview):
            self.bytes_value(value)
        elif isinstance(value, Mapping):
            token = self.begin_length32()
            for k, v in value.items():
                if isinstance(k, int) and not isinstance(k, builtins.bool):
                    self.field_number(k)
                else:
                    self.field(str(k))
                self.object_value(v, default)
            self.end_length32(token)
        elif isinstance(value, list | tuple | set | frozenset):
            token = self.begin_length32()
            for v in value:
                self.object_value(v, default)
            self.end_length32(token)
        elif isinstance(value, uuid.UUID):
            n = value.int
            self._code(UUID)
            self.buf += _I64X2.pack(_signed64(n >> 64), _signed64(n & _U64_MASK))
        elif isinstance(value, _dt.datetime):
            self._textual(ZONED_DATE_TIME if value.tzinfo is not None else DATE_TIME,
                          value.isoformat())
        elif isinstance(value, _dt.date):
            self._textual(DATE, value.isoformat())
        elif isinstance(value, _dt.time):
            self._textual(TIME, value.isoformat())
        elif default is not None:
            default(self, value)
        else:
            raise TypeError(f"cannot write a {t.__name__} as BinaryWire")
        return self

    def local_time(self, text: str) -> WireWriter:
        """``B2`` + stop-bit length + text: a ``LocalTime`` as Java writes one
        (its ``toString()``, e.g. ``21:15``)."""
        self._textual(TIME, text)
        return self

    def _textual(self, code: int, text: str) -> None:
        data = java_utf8(text)
        self._code(code)
        self.buf += encode_stop_bit(len(data))
        self.buf += data


def _signed64(n: int) -> int:
    return n - (1 << 64) if n & (1 << 63) else n


# --------------------------------------------------------------------------
# Plain values: a fast reader for method-call payloads
# --------------------------------------------------------------------------


class Typed(NamedTuple):
    """A value that carried a ``TYPE_PREFIX`` (``B6 alias``): what Java writes
    for a typed marshallable or an ``object(Class, v)`` whose class differs from
    the declared one.  Writing a :class:`Typed` emits the prefix again."""

    alias: str
    value: object


class HistoryBytes(bytes):
    """The raw body of a ``HISTORY_MESSAGE`` (``86``) value: Java's compact
    ``VanillaMessageHistory`` bytes (see ``_history``)."""

    __slots__ = ()


class EmptyBody(dict[str, object]):
    """A nested ``80/81/82`` body with nothing in it: an empty marshallable or an
    empty sequence (the bytes cannot tell which)."""

    __slots__ = ()


_KEY_CODES: Final = frozenset([FIELD_NAME_ANY, EVENT_NAME, FIELD_NUMBER, *range(0xC0, 0xE0)])
_PAD_CODES: Final = frozenset([PADDING, PADDING32, COMMENT])
_U16 = struct.Struct("<H")


class PlainReader:
    """Reads BinaryWire into plain Python values, without :class:`Value` wrappers.

    Marshallables become dicts (field names as str, ``FIELD_NUMBER`` keys as
    int), sequences lists, ``U8_ARRAY`` bytes, a history value
    :class:`HistoryBytes`, a typed value :class:`Typed`, an empty body
    :class:`EmptyBody`; numbers, text, booleans, null, UUIDs as usual; the
    textual date/time codes as their ISO text.  :attr:`marked` becomes True once
    a value needing type-directed fix-up was produced (a :class:`Typed`, an
    :class:`EmptyBody` or a dict with int keys).

    Offsets (arguments and results) index ``buf``; errors are :class:`WireError`.
    """

    __slots__ = ("buf", "marked")

    def __init__(self, buf: BytesLike) -> None:
        """Read from ``buf``."""
        self.buf = buf
        self.marked = False

    def _err(self, msg: str, pos: int) -> WireError:
        return WireError(f"{msg} at offset 0x{pos:x}")

    def skip_padding(self, pos: int, end: int) -> int:
        """Skip ``8F``/``8E`` padding and ``BE`` comments from ``pos``."""
        buf = self.buf
        while pos < end:
            code = buf[pos]
            if code == PADDING:
                pos += 1
            elif code == PADDING32:
                if pos + 5 > end:
                    raise self._err("truncated padding", pos)
                pos += 5 + _U32.unpack_from(buf, pos + 1)[0]
                if pos > end:
                    raise self._err("truncated padding", pos)
            elif code == COMMENT:
                n, p = _read_stop_bit(buf, pos + 1, end, 0)
                if n < 0 or p + n > end:
                    raise self._err("truncated comment", pos)
                pos = p + n
            else:
                break
        return pos

    def at_key(self, pos: int) -> builtins.bool:
        """Whether the code at ``pos`` starts a key (field, event or field number)."""
        return self.buf[pos] in _KEY_CODES

    def key(self, pos: int, end: int) -> tuple[Key, int]:
        """Read a key at ``pos`` (padding already skipped)."""
        buf = self.buf
        code = buf[pos]
        if FIELD_NAME0 <= code < STRING_0:
            n = code - FIELD_NAME0
            if pos + 1 + n > end:
                raise self._err("truncated field name", pos)
            return bytes(buf[pos + 1 : pos + 1 + n]).decode("latin-1"), pos + 1 + n
        if code in (EVENT_NAME, FIELD_NAME_ANY):
            n, p = _read_stop_bit(buf, pos + 1, end, 0)
            if n < 0 or p + n > end:
                raise self._err("truncated field name", pos)
            return bytes(buf[p : p + n]).decode("latin-1"), p + n
        if code == FIELD_NUMBER:
            return _read_stop_bit(buf, pos + 1, end, 0)
        raise self._err(f"expected a key, found code 0x{code:02x}", pos)

    def fields(self, pos: int, end: int, depth: int = 0) -> dict[Key, object]:
        """Read ``key value`` pairs up to ``end`` into a dict (first key wins)."""
        out: dict[Key, object] = {}
        buf = self.buf
        value = self.value
        while pos < end:
            code = buf[pos]
            if code in _PAD_CODES:
                pos = self.skip_padding(pos, end)
                if pos >= end:
                    break
                code = buf[pos]
            if FIELD_NAME0 <= code < STRING_0:  # the usual short field name, inline
                q = pos + 1 + code - FIELD_NAME0
                if q > end:
                    raise self._err("truncated field name", pos)
                k: Key = bytes(buf[pos + 1 : q]).decode("latin-1")
                pos = q
            else:
                k, pos = self.key(pos, end)
                if type(k) is int:
                    self.marked = True
            v, pos = value(pos, end, depth)
            if k not in out:
                out[k] = v
        return out

    def value(self, pos: int, end: int, depth: int = 0) -> tuple[object, int]:
        """Read one value at ``pos`` (leading padding skipped); return it and
        the offset after it."""
        if depth > _MAX_DEPTH:
            raise self._err("nesting too deep", pos)
        buf = self.buf
        if pos >= end:
            raise self._err("missing value", pos)
        code = buf[pos]
        if code in _PAD_CODES:
            pos = self.skip_padding(pos, end)
            if pos >= end:
                raise self._err("missing value", pos)
            code = buf[pos]
        p = pos + 1
        if code >= STRING_0:
            q = p + code - STRING_0
            if q > end:
                raise self._err("truncated text", pos)
            return _decode_utf8(bytes(buf[p:q]), p), q
        if code < 0x80:
            return code, p
        spec = _INT_CODES.get(code)
        if spec is not None:
            st, size = spec
            if p + size > end:
                raise self._err("truncated number", pos)
            return st.unpack_from(buf, p)[0], p + size
        if code == FLOAT64:
            if p + 8 > end:
                raise self._err("truncated float64", pos)
            return _F64.unpack_from(buf, p)[0], p + 8
        if code == FLOAT32:
            if p + 4 > end:
                raise self._err("truncated float32", pos)
            return _F32.unpack_from(buf, p)[0], p + 4
        if code == STRING_ANY:
            n, q = _read_stop_bit(buf, p, end, 0)
            if n == -1:
                return None, q
            if n < 0 or q + n > end:
                raise self._err("truncated text", pos)
            return _decode_utf8(bytes(buf[q : q + n]), q), q + n
        if code in (BYTES_LENGTH32, BYTES_LENGTH16, BYTES_LENGTH8):
            return self._nested(code, pos, end, depth)
        if code == TRUE:
            return True, p
        if code == FALSE:
            return False, p
        if code == NULL:
            return None, p
        scale = _FLOAT_STOP_SCALE.get(code)
        if scale is not None:
            n, q = _read_stop_bit(buf, p, end, 0)
            return n / scale, q
        if code == TYPE_PREFIX:
            n, q = _read_stop_bit(buf, p, end, 0)
            if n < 0 or q + n > end:
                raise self._err("truncated type prefix", pos)
            alias = _decode_utf8(bytes(buf[q : q + n]), q)
            inner, q = self.value(q + n, end, depth + 1)
            self.marked = True
            return Typed(alias, inner), q
        if code in _TEXTUAL_CODES:
            n, q = _read_stop_bit(buf, p, end, 0)
            if n == -1:
                return None, q
            if n < 0 or q + n > end:
                raise self._err("truncated text", pos)
            return _decode_utf8(bytes(buf[q : q + n]), q), q + n
        if code == UUID:
            if p + 16 > end:
                raise self._err("truncated UUID", pos)
            msb, lsb = _I64X2.unpack_from(buf, p)
            return uuid.UUID(int=((msb & _U64_MASK) << 64) | (lsb & _U64_MASK)), p + 16
        if code == U8_ARRAY:
            return bytes(buf[p:end]), end
        if code == HISTORY_MESSAGE:
            return HistoryBytes(buf[p:end]), end
        if code == I64_ARRAY:
            if p + 16 > end:
                raise self._err("truncated I64 array", pos)
            capacity, used = _I64X2.unpack_from(buf, p)
            if capacity < 0 or capacity > (end - p - 16) // 8 or not 0 <= used <= capacity:
                raise self._err(f"I64 array capacity {capacity} exceeds the data", pos)
            vals = list(struct.unpack_from(f"<{used}q", buf, p + 16))
            return vals, p + 16 + 8 * capacity
        if code in _KEY_CODES:
            raise self._err(f"field name code 0x{code:02x} where a value was expected", pos)
        raise self._err(f"unsupported wire code 0x{code:02x}", pos)

    def _nested(self, code: int, pos: int, end: int, depth: int) -> tuple[object, int]:
        buf = self.buf
        if code == BYTES_LENGTH32:
            if pos + 5 > end:
                raise self._err("truncated length", pos)
            n = _U32.unpack_from(buf, pos + 1)[0]
            body = pos + 5
        elif code == BYTES_LENGTH16:
            if pos + 3 > end:
                raise self._err("truncated length", pos)
            n = _U16.unpack_from(buf, pos + 1)[0]
            body = pos + 3
        else:
            if pos + 2 > end:
                raise self._err("truncated length", pos)
            n = buf[pos + 1]
            body = pos + 2
        body_end = body + n
        if body_end > end:
            raise self._err("truncated nested body", pos)
        first = self.skip_padding(body, body_end)
        if first >= body_end:
            self.marked = True
            return EmptyBody(), body_end
        c = buf[first]
        if c == U8_ARRAY:
            return bytes(buf[first + 1 : body_end]), body_end
        if c == HISTORY_MESSAGE:
            return HistoryBytes(buf[first + 1 : body_end]), body_end
        if c in _KEY_CODES:
            return self.fields(first, body_end, depth + 1), body_end
        out: list[object] = []
        q = first
        while q < body_end:
            v, q = self.value(q, body_end, depth + 1)
            out.append(v)
            q = self.skip_padding(q, body_end)
        return out, body_end


def payload_text(payload: BytesLike) -> str:
    """A text payload as a str: one BinaryWire string (what Java's ``writeText``
    and ``Appender.append_text`` write: a one-byte ``0xE0 + length`` prefix, or
    ``0xB8`` and a stop-bit length from 32 bytes on) without its prefix, else
    the whole payload as UTF-8 (Chronicle 4 and raw writers).

    Raises:
        WireError: the payload is neither.
    """
    buf = bytes(payload)
    if buf and buf[0] == PADDING and buf.count(PADDING) == len(buf):
        # padding only: an empty excerpt (a commit pads an empty one to 0x8F,
        # as Java's does); Java's text readers skip padding and find nothing
        return ""
    if buf and (buf[0] >= STRING_0 or buf[0] == STRING_ANY):
        try:
            value, end = PlainReader(buf).value(0, len(buf))
        except WireError:
            pass
        else:
            if end == len(buf) and isinstance(value, str):
                return value
    try:
        return buf.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"the payload is not text: {exc}") from None
