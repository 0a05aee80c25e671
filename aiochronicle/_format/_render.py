"""Readable payloads: pluggable decoders that turn payload bytes into text for
people (``aiochronicle tail``/``dump``, ``Excerpt`` rendering of codecs).

A *decoder* takes the payload bytes and returns a :class:`DecodedPayload` (or
None when the bytes are not its format).  Built in: ``wire`` (BinaryWire, as
Java writes it), ``text`` (a BinaryWire string or UTF-8 text) and ``hex`` (never
fails).  ``auto`` tries every decoder registered with ``auto=True`` (codec-aware
decoders of other modules, newest first), then BinaryWire, then printable
UTF-8, then hex.  :func:`register_decoder` adds a decoder under a name usable as
``--decode NAME``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from ._wire import Document, I64Array, Value, WireError, parse_document, parse_values

__all__ = [
    "DecodedPayload",
    "PayloadDecoder",
    "decode_auto",
    "decode_hex",
    "decode_payload",
    "decode_text",
    "decode_wire",
    "decoder_names",
    "get_decoder",
    "hexdump",
    "register_decoder",
    "render_document",
    "render_value",
]


@dataclass(frozen=True, slots=True)
class DecodedPayload:
    """A payload made readable.

    Attributes:
        kind: which decoder understood it (``text``, ``wire``, ``utf8``, ``hex``
            or the name of a registered codec).
        value: plain, JSON-serialisable data (str, numbers, lists, dicts).
        text: the multi-line (YAML-like) rendering.
        line: the same on one line.
    """

    kind: str
    value: object
    text: str
    line: str


PayloadDecoder = Callable[[bytes], "DecodedPayload | None"]
"""A function from payload bytes to a :class:`DecodedPayload`, or None if the
bytes are not in its format."""


# --------------------------------------------------------------------------
# Rendering BinaryWire values
# --------------------------------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z_./][A-Za-z0-9_./:@$+ -]*\Z")
_RESERVED = {"true", "false", "null", "~", "yes", "no", "on", "off", ""}


def _scalar_text(s: str) -> str:
    if _PLAIN.match(s) and s.lower() not in _RESERVED and not s.endswith((" ", ":")):
        return s
    return json.dumps(s, ensure_ascii=False)


def _key_text(k: str | int) -> str:
    if k == -1:
        return "history"  # FIELD_NUMBER -1: MessageHistory (reference §10.3)
    return str(k) if isinstance(k, int) else _scalar_text(k)


def _array_items(arr: I64Array) -> tuple[list[int], int]:
    """The values up to the last non-zero one, and how many zeros were cut."""
    vals = list(arr.values)
    last = len(vals)
    while last and vals[last - 1] == 0:
        last -= 1
    return vals[:last], len(vals) - last


def render_value(v: Value, indent: int = 0, *, flow: bool = False) -> str:
    """Render a parsed BinaryWire value as YAML-like text (Java's dump style).

    ``flow`` puts everything on one line.
    """
    prefix = f"!{v.type_name} " if v.type_name else ""
    pad = "  " * (indent + 1)
    close = "  " * indent
    val = v.value
    if isinstance(val, Document):
        if not val.items:
            return prefix + "{ }"
        parts = [f"{_key_text(k)}: {render_value(x, indent + 1, flow=flow)}" for k, x in val]
        if flow:
            return prefix + "{ " + ", ".join(parts) + " }"
        return prefix + "{\n" + ",\n".join(pad + p for p in parts) + "\n" + close + "}"
    if isinstance(val, I64Array):
        head = f"# length: {val.capacity}, used: {val.used}"
        items, zeros = _array_items(val)
        if flow:
            shown = ", ".join(str(i) for i in items)
            tail = f"{', ' if items else ''}... {zeros} zeros" if zeros else ""
            return prefix + f"[ {shown}{tail} ]"
        lines = [pad + head]
        lines += [pad + str(i) + ("," if n < len(items) - 1 or zeros else "")
                  for n, i in enumerate(items)]
        if zeros:
            lines.append(pad + f"# ... {zeros} zero{'s' if zeros != 1 else ''}")
        return prefix + "[\n" + "\n".join(lines) + "\n" + close + "]"
    if isinstance(val, list):
        parts = [render_value(x, indent + 1, flow=flow) for x in val if isinstance(x, Value)]
        if not parts:
            return prefix + "[ ]"
        if flow:
            return prefix + "[ " + ", ".join(parts) + " ]"
        return prefix + "[\n" + ",\n".join(pad + p for p in parts) + "\n" + close + "]"
    if v.kind == "null":
        return prefix + "!!null \"\""
    if isinstance(val, bool):
        return prefix + ("true" if val else "false")
    if isinstance(val, int | float):
        return prefix + repr(val)
    if isinstance(val, bytes):
        tag = "!history " if v.kind == "history" else "!!binary "
        return prefix + tag + val.hex()
    if isinstance(val, str):
        if v.kind != "text":
            return prefix + f"!{v.kind} " + _scalar_text(val)
        return prefix + _scalar_text(val)
    return prefix + _scalar_text(str(val))


def _jsonable(v: Value) -> object:
    val = v.value
    if isinstance(val, Document):
        out: dict[str, object] = {}
        for k, x in val:
            out.setdefault(str(k), _jsonable(x))
        return out
    if isinstance(val, I64Array):
        return list(val.values)
    if isinstance(val, list):
        return [_jsonable(x) for x in val if isinstance(x, Value)]
    if isinstance(val, bytes):
        return val.hex()
    if isinstance(val, int | float | str | bool) or val is None:
        return val
    return str(val)


def render_document(doc: Document, *, flow: bool = False) -> str:
    """Render a top-level document: one ``key: value`` per line (or ``; ``-joined)."""
    parts = [f"{_key_text(k)}: {render_value(v, 0, flow=flow)}" for k, v in doc]
    return ("; " if flow else "\n").join(parts)


# --------------------------------------------------------------------------
# Decoders
# --------------------------------------------------------------------------

_KEY_CODES = frozenset([0xB7, 0xB9, 0xBA, *range(0xC0, 0xE0)])
_PAD_CODES = frozenset([0x8E, 0x8F])


def _wire_text(payload: bytes) -> DecodedPayload | None:
    """A payload holding exactly one BinaryWire string (Java's ``writeText``)."""
    if not payload or payload[0] < 0xB8 or payload[0] not in (0xB8, *range(0xE0, 0x100)):
        return None
    try:
        vals = parse_values(payload, 0, len(payload))
    except WireError:
        return None
    if len(vals) != 1 or vals[0].kind != "text" or not isinstance(vals[0].value, str):
        return None
    s = vals[0].value
    return DecodedPayload("text", s, s, s.replace("\n", "\\n"))


def _wire_document(payload: bytes) -> DecodedPayload | None:
    """A payload of BinaryWire ``key: value`` pairs (documents, method calls)."""
    i = 0
    while i < len(payload) and payload[i] in _PAD_CODES:
        i += 1
    if i >= len(payload) or payload[i] not in _KEY_CODES:
        return None
    try:
        doc = parse_document(payload, 0, len(payload))
    except WireError:
        return None
    if not doc.items:
        return None
    value = {("history" if k == -1 else str(k)): _jsonable(v) for k, v in doc}
    return DecodedPayload("wire", value, render_document(doc),
                          render_document(doc, flow=True))


def decode_wire(payload: bytes) -> DecodedPayload | None:
    """BinaryWire: a string, a document, or a sequence of values."""
    got = _wire_text(payload) or _wire_document(payload)
    if got is not None:
        return got
    if not payload or payload[0] < 0x80:
        return None
    try:
        vals = parse_values(payload, 0, len(payload))
    except WireError:
        return None
    if not vals:
        return None
    value = [_jsonable(v) for v in vals]
    text = "\n".join(render_value(v) for v in vals)
    line = ", ".join(render_value(v, flow=True) for v in vals)
    return DecodedPayload("wire", value if len(value) > 1 else value[0], text, line)


def _printable(s: str) -> bool:
    return all(c.isprintable() or c in "\t\n\r" for c in s)


def decode_utf8(payload: bytes) -> DecodedPayload | None:
    """Printable UTF-8 text."""
    try:
        s = payload.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not _printable(s):
        return None
    return DecodedPayload("utf8", s, s, s.replace("\n", "\\n"))


def decode_text(payload: bytes) -> DecodedPayload:
    """Text however it was written: a BinaryWire string, else UTF-8 (bad bytes replaced)."""
    got = _wire_text(payload)
    if got is not None:
        return got
    s = payload.decode("utf-8", errors="replace")
    return DecodedPayload("utf8", s, s, s.replace("\n", "\\n"))


def hexdump(data: bytes, offset: int = 0) -> str:
    """Rows of 16 bytes: offset, hex, and the printable ASCII."""
    rows = []
    for i in range(0, len(data), 16):
        chunk = data[i:i + 16]
        hx = " ".join(f"{b:02x}" for b in chunk)
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        rows.append(f"{offset + i:08x} {hx:<47} {asc}")
    return "\n".join(rows)


def decode_hex(payload: bytes) -> DecodedPayload:
    """Hex (never fails)."""
    return DecodedPayload("hex", payload.hex(), hexdump(payload), payload.hex())


def _forced(name: str, fn: PayloadDecoder) -> Callable[[bytes], DecodedPayload]:
    def decode(payload: bytes) -> DecodedPayload:
        got = fn(payload)
        return got if got is not None else decode_hex(payload)

    decode.__name__ = f"decode_{name}"
    return decode


_AUTO: list[PayloadDecoder] = []
_NAMED: dict[str, PayloadDecoder] = {"wire": decode_wire, "text": decode_text, "hex": decode_hex}


def register_decoder(name: str, decoder: PayloadDecoder, *, auto: bool = False) -> None:
    """Make ``decoder`` available as ``--decode NAME``; with ``auto`` it is also
    tried first (before BinaryWire) when decoding automatically."""
    if name == "auto":
        raise ValueError("'auto' is reserved")
    _NAMED[name] = decoder
    if auto:
        _AUTO.insert(0, decoder)


def decoder_names() -> list[str]:
    """The ``--decode`` choices: ``auto`` then every named decoder."""
    return ["auto", *sorted(_NAMED)]


def decode_auto(payload: bytes) -> DecodedPayload:
    """Registered codecs, then BinaryWire, then printable UTF-8, then hex."""
    for fn in _AUTO:
        got = fn(payload)
        if got is not None:
            return got
    if payload and payload[0] >= 0x80:
        got = decode_wire(payload)
        if got is not None:
            return got
    return decode_utf8(payload) or decode_hex(payload)


def get_decoder(mode: str = "auto") -> Callable[[bytes], DecodedPayload]:
    """The decoder called ``mode``; it falls back to hex when the bytes are not its format."""
    if mode == "auto":
        return decode_auto
    fn = _NAMED.get(mode)
    if fn is None:
        raise ValueError(f"unknown decoder {mode!r}; expected one of {', '.join(decoder_names())}")
    return _forced(mode, fn)


def decode_payload(payload: bytes, mode: str = "auto") -> DecodedPayload:
    """Decode one payload with the decoder called ``mode``."""
    return get_decoder(mode)(payload)
