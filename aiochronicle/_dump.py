"""Readable views of a queue: payload decoding and a DumpMain-style file dump.

Payload decoding is pluggable.  A *decoder* takes the payload bytes and returns a
:class:`DecodedPayload` (or None when the bytes are not its format).  Built in:

* ``wire``: BinaryWire, as Java writes it (``writeText`` strings, ``writeDocument``
  fields, method-writer events);
* ``text``: a BinaryWire string or UTF-8 text;
* ``hex``: a hex dump (never fails).

``auto`` tries every decoder registered with ``auto=True`` (codec-aware decoders
of other modules, newest first), then BinaryWire, then printable UTF-8, then hex.
:func:`register_decoder` adds a decoder under a name usable as ``--decode NAME``.

:func:`dump_path` writes every document of a queue (or of one ``.cq4``/``.cq4t``
file) the way Java's ``DumpMain`` shows it: ``--- !!meta-data #binary`` /
``--- !!data #binary`` blocks, ``# position: N, header: S`` lines, index pages
with their trailing zeros elided, and the decoded payloads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

from ._errors import ChronicleError, CorruptQueueError
from ._headerless import HEADERLESS_LIMITATION, is_headerless
from ._mapped import list_dir, open_regular
from ._rollcycles import CycleNamer, RollCycle
from ._wire import Document, I64Array, Value, WireError, parse_document, parse_values

__all__ = [
    "DecodedPayload",
    "PayloadDecoder",
    "decode_payload",
    "decoder_names",
    "dump_path",
    "get_decoder",
    "hexdump",
    "register_decoder",
    "render_value",
]

HDR_META = 0x40000000
HDR_NOT_COMPLETE = 0x80000000
HDR_EOF = 0xC0000000
LENGTH_MASK = 0x3FFFFFFF
_WINDOW = 1 << 20


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


# --------------------------------------------------------------------------
# Reading files without mapping them whole
# --------------------------------------------------------------------------


class FileWindow:
    """Reads a file through a sliding window of ``pread`` calls: memory stays flat
    however large the file is, and growth by other processes is picked up."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = open_regular(path)
        self._start = 0
        self._buf = b""

    def __enter__(self) -> FileWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer at the end of the file)."""
        start, buf = self._start, self._buf
        if start <= offset and offset + length <= start + len(buf):
            return buf[offset - start:offset - start + length]
        if length > _WINDOW:
            return os.pread(self.fd, length, offset)
        self._buf = os.pread(self.fd, _WINDOW, offset)
        self._start = offset
        return self._buf[:length]

    def u32(self, offset: int) -> int | None:
        b = self.read(offset, 4)
        return int.from_bytes(b, "little") if len(b) == 4 else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# --------------------------------------------------------------------------
# Walking documents
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RawDocument:
    """One document of a file: header position, header word, and what it is."""

    pos: int
    header: int
    kind: str  # "data", "meta", "eof", "end", "incomplete", "truncated"

    @property
    def length(self) -> int:
        return self.header & LENGTH_MASK


def walk_documents(f: FileWindow, start: int = 0, align: int = 4,
                   stop: int | None = None) -> Iterator[RawDocument]:
    """Every document from ``start``; ends with an ``eof``, ``end`` (a zero
    header), ``incomplete`` or ``truncated`` document."""
    pos = start
    size = f.size
    while True:
        if stop is not None and pos >= stop:
            return
        word = f.u32(pos)
        if word is None:
            yield RawDocument(pos, 0, "end")
            return
        if word == 0:
            yield RawDocument(pos, 0, "end")
            return
        if word & HDR_EOF == HDR_EOF and word & LENGTH_MASK == 0:
            yield RawDocument(pos, word, "eof")
            return
        if word & HDR_NOT_COMPLETE:
            yield RawDocument(pos, word, "incomplete")
            return
        length = word & LENGTH_MASK
        if pos + 4 + length > size:
            yield RawDocument(pos, word, "truncated")
            return
        yield RawDocument(pos, word, "meta" if word & HDR_META else "data")
        pos += 4 + length
        if align > 1:
            pos = (pos + align - 1) & ~(align - 1)


# --------------------------------------------------------------------------
# The dump
# --------------------------------------------------------------------------

Progress = Callable[[int, int], None]


def _is_queue_dir(path: str) -> bool:
    try:
        names = list_dir(path)
    except FileNotFoundError:
        return False
    return any(n.endswith((".cq4", ".cq4t")) for n in names)


def _dump_meta_doc(out: TextIO, f: FileWindow, doc: RawDocument) -> None:
    body = f.read(doc.pos + 4, doc.length)
    out.write("--- !!meta-data #binary\n")
    try:
        parsed = parse_document(body, 0, len(body), base=doc.pos + 4)
        out.write(render_document(parsed) + "\n")
    except WireError as exc:
        out.write(f"# not BinaryWire ({exc})\n{hexdump(body, doc.pos + 4)}\n")


def _header_layout(f: FileWindow) -> tuple[int, int]:
    """(align, file cycle shift) from a cycle file's header; (4, 32) when unknown."""
    word = f.u32(0)
    if word is None or not word & HDR_META or word & HDR_NOT_COMPLETE:
        return 4, 32
    body = f.read(4, word & LENGTH_MASK)
    try:
        doc = parse_document(body, 0, len(body), base=4)
        h = doc["header"].as_document()
        df = h.get("dataFormat")
        return (4 if df is not None and df.as_int() == 1 else 1), 32
    except (WireError, KeyError):
        return 4, 32


def dump_file(out: TextIO, path: str, *, decoder: Callable[[bytes], DecodedPayload],
              roll_cycle: RollCycle | None = None, cycle: int | None = None,
              from_seq: int = 0, to_seq: int | None = None, data_only: bool = False,
              progress: Progress | None = None, start_pos: int = 0) -> int:
    """Dump one ``.cq4`` or ``.cq4t`` file; returns the number of data documents shown.

    ``from_seq``/``to_seq`` (inclusive) restrict the data documents shown;
    ``data_only`` leaves out metadata documents.  ``start_pos`` (with
    ``from_seq``) lets the caller skip straight to a known header.

    Raises:
        CorruptQueueError: after writing what could be read, if the file holds
            a header that runs past its end or is not a cycle file at all.
    """
    shown = 0
    with FileWindow(path) as f:
        size = f.size
        table = path.endswith(".cq4t")
        align = 4 if table else _header_layout(f)[0]
        if not data_only:
            out.write(f"# file: {path}\n# size: {size} bytes")
            if cycle is not None:
                out.write(f", cycle: {cycle}")
            out.write("\n")
        first = f.u32(0)
        if not table and is_headerless(f.u32, size):
            if not data_only:
                out.write(f"# {HEADERLESS_LIMITATION}\n")
        elif first is None or not first & HDR_META or first & HDR_NOT_COMPLETE:
            raise CorruptQueueError(
                f"first header word {first if first is None else hex(first)} is not a "
                "complete metadata document: not a Chronicle Queue file", path, 0)
        seq = from_seq if start_pos else 0
        last_pos = 0
        for doc in walk_documents(f, start_pos, align):
            last_pos = doc.pos
            if progress is not None:
                progress(doc.pos, size)
            if doc.kind == "end":
                if not data_only:
                    out.write(f"...\n# {max(0, size - doc.pos)} bytes remaining\n")
                break
            if doc.kind == "eof":
                if not data_only:
                    out.write(f"# position: {doc.pos}, header: -1 # EOF\n"
                              "--- !!not-ready-meta-data #binary\n...\n"
                              f"# {max(0, size - doc.pos - 4)} bytes remaining\n")
                break
            if doc.kind == "incomplete":
                out.write(f"# position: {doc.pos}, header: {doc.header:#010x}\n"
                          "--- !!not-ready-data #binary\n"
                          f"# incomplete header (length {doc.length}): a writer died or "
                          "is still writing here\n...\n")
                break
            if doc.kind == "truncated":
                out.write(f"# position: {doc.pos}, header: {doc.header:#010x}\n"
                          f"# corrupt: a document of {doc.length} bytes runs past the end "
                          f"of the file ({size} bytes)\n")
                raise CorruptQueueError("a document runs past the end of the file", path,
                                        doc.pos)
            if doc.kind == "meta":
                if not data_only:
                    out.write(f"# position: {doc.pos}, header: -1\n")
                    _dump_meta_doc(out, f, doc)
                continue
            # data
            this = seq
            seq += 1
            if this < from_seq and not table:
                continue
            if to_seq is not None and this > to_seq and not table:
                break
            payload = f.read(doc.pos + 4, doc.length)
            if table:
                out.write(f"# position: {doc.pos}, header: {this}\n--- !!data #binary\n")
                try:
                    parsed = parse_document(payload, 0, len(payload), base=doc.pos + 4)
                    out.write(render_document(parsed) + "\n")
                except WireError:
                    out.write(hexdump(payload, doc.pos + 4) + "\n")
                continue
            where = f"# position: {doc.pos}, header: {this}"
            if roll_cycle is not None and cycle is not None:
                with contextlib.suppress(ValueError):
                    where += f", index: {roll_cycle.to_index(cycle, this):#x}"
            out.write(where + "\n--- !!data #binary\n")
            out.write(decoder(payload).text + "\n")
            shown += 1
        if progress is not None:
            progress(max(last_pos, 0), size)
    return shown


def _queue_files(path: str) -> list[str]:
    names = sorted(n for n in os.listdir(path) if n.endswith((".cq4", ".cq4t")))
    return [os.path.join(path, n) for n in names]


def dump_path(out: TextIO, path: str, *, decoder: Callable[[bytes], DecodedPayload],
              from_index: int | None = None, to_index: int | None = None,
              skip_table_store: bool = False, progress: Progress | None = None) -> int:
    """Dump a queue directory (every ``.cq4t`` and ``.cq4`` in name order, as
    Java's DumpMain) or a single file.  With an index range only the data
    documents of that range are shown.  Returns the number of excerpts shown."""
    from ._ops import NotAQueueError, open_existing_queue

    if os.path.exists(path) and not os.path.isdir(path):
        if not path.endswith((".cq4", ".cq4t")):
            raise NotAQueueError(f"{path} is not a .cq4 or .cq4t file")
        if from_index is not None or to_index is not None:
            raise ChronicleError("an index range needs the queue directory, not a single file")
        return dump_file(out, path, decoder=decoder, progress=progress)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no such queue: {path}")
    if not _is_queue_dir(path):
        raise NotAQueueError(f"not a Chronicle queue: {path} (no .cq4 or .cq4t files)")
    ranged = from_index is not None or to_index is not None
    with open_existing_queue(path) as q:
        rc = q.roll_cycle
        namer = CycleNamer(rc, q.epoch, q.week_rule)
        files = _queue_files(path)
        sizes = {p: os.path.getsize(p) for p in files}
        total = sum(sizes.values()) or 1
        done = 0
        shown = 0
        lo = from_index if from_index is not None else 0
        hi = to_index
        refused: CorruptQueueError | None = None
        for p in files:
            name = os.path.basename(p)
            if not os.path.isfile(p):
                # a FIFO or directory named like a queue file: never opened (a FIFO
                # would block); reported once everything else is shown
                out.write(f"# skipped {p}: not a regular file\n")
                refused = refused or CorruptQueueError(
                    "not a regular file where a queue file should be", p, 0)
                continue
            if name.endswith(".cq4t"):
                if skip_table_store or ranged:
                    done += sizes[p]
                    continue
                shown += dump_file(out, p, decoder=decoder)
                done += sizes[p]
                continue
            stem = name[:-4]
            cyc = namer.parse(stem) if namer.matches(stem) else None
            from_seq, to_seq, start_pos = 0, None, 0
            if ranged:
                if cyc is None:
                    continue
                first, last = rc.to_index(cyc, 0), rc.to_index(cyc, rc.sequence_mask)
                if last < lo or (hi is not None and first > hi):
                    done += sizes[p]
                    continue
                if lo > first:
                    from_seq = rc.to_sequence(lo)
                    st = q._acquire_store(cyc)
                    if st is not None:
                        try:
                            code, pos = st.seek(from_seq)
                            if code == 0:
                                start_pos = pos
                        finally:
                            q._release_store(st)
                if hi is not None and hi <= last:
                    to_seq = rc.to_sequence(hi)
            base = done

            def prog(pos: int, size: int, base: int = base) -> None:
                if progress is not None:
                    progress(base + min(pos, size), total)

            shown += dump_file(out, p, decoder=decoder, roll_cycle=rc, cycle=cyc,
                               from_seq=from_seq, to_seq=to_seq, data_only=ranged,
                               progress=prog, start_pos=start_pos)
            done += sizes[p]
        if refused is not None:
            raise refused
        return shown
