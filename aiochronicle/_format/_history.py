"""Message history: where a message came from and when each hop saw it.

The model is Java's ``VanillaMessageHistory``: a list of *sources* (the
``sourceId`` of a queue and the index read from it) and a list of *timings*
(nanoseconds).  A method writer on a queue whose ``sourceId`` is not 0 writes
the history first in each excerpt; a method reader adds its own source (the
``sourceId`` of the queue it reads and the index it read) and the time it read
the message; a writer called while that message is being handled carries the
history forward and adds the time it writes.  The last service of a chain so
sees every hop's timings.

On the wire (BinaryWire, as Java writes it by default)::

    BA 80 00            FIELD_NUMBER -1 (the ``history`` event)
    81 <u16 length>     BYTES_LENGTH16
    86                  HISTORY_MESSAGE, then raw little-endian:
    u8 sources, i32 sourceId[sources], i64 index[sources],
    u8 timings + 1, i64 timing[timings], i64 now

Java's self-describing alternative (``b9 "history" 81 <len> sources: [...]
timings: [...]``) is read too.  Timings are ``time.monotonic_ns()``:
``CLOCK_MONOTONIC``, the clock of Java's ``System.nanoTime()`` on Linux, so
Python and Java services on one host compare.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Final

from .._core._native import Incoming, current_incoming, set_history
from ._wire import WireError

__all__ = ["MessageHistory", "current_history"]

MAX_SOURCES: Final = 128
"""Java's ``MESSAGE_HISTORY_LENGTH``: the most sources a history holds."""
MAX_TIMINGS: Final = 254
"""The most timings a history can hold and still be written (the count of
timings plus the writer's own goes in one byte)."""

HISTORY_KEY: Final = b"\xba\x80\x00"
"""``FIELD_NUMBER -1``: the key Java writes before a binary history."""

_now = time.monotonic_ns
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")


class MessageHistory:
    """Sources and timings of a message, as Java's ``VanillaMessageHistory``.

    Attributes:
        sources: ``(source_id, index)`` pairs, oldest first.
        timings: nanosecond timestamps (``time.monotonic_ns()``), oldest first.
    """

    __slots__ = ("sources", "timings")

    def __init__(self, sources: Iterable[tuple[int, int]] = (),
                 timings: Iterable[int] = ()) -> None:
        """A history holding ``sources`` and ``timings``."""
        self.sources: list[tuple[int, int]] = [(int(s), int(i)) for s, i in sources]
        self.timings: list[int] = [int(t) for t in timings]

    # -- the Java accessors ------------------------------------------------
    def add_source(self, source_id: int, index: int) -> None:
        """Append a ``(source_id, index)`` pair.

        Raises:
            ValueError: the history already holds :data:`MAX_SOURCES` sources.
        """
        if len(self.sources) >= MAX_SOURCES:
            raise ValueError(f"a message history holds at most {MAX_SOURCES} sources")
        self.sources.append((source_id, index))

    def add_timing(self, ns: int) -> None:
        """Append a timing (nanoseconds)."""
        self.timings.append(ns)

    @property
    def last_source_id(self) -> int:
        """The source id of the newest source, -1 when there is none."""
        return self.sources[-1][0] if self.sources else -1

    @property
    def last_source_index(self) -> int:
        """The index of the newest source, -1 when there is none."""
        return self.sources[-1][1] if self.sources else -1

    def latencies_ns(self) -> list[int]:
        """The time between consecutive timings: one entry per hop.

        In a chain *writer -> reader/writer -> reader* the timings are (write,
        read, write, read) and the latencies (queue hop, processing, queue hop).
        """
        t = self.timings
        return [t[i + 1] - t[i] for i in range(len(t) - 1)]

    def copy(self) -> MessageHistory:
        """An independent copy."""
        return MessageHistory(self.sources, self.timings)

    def to_dict(self) -> dict[str, list[int]]:
        """``{"sources": [id, index, ...], "timings": [...]}`` (Java's YAML shape)."""
        flat: list[int] = []
        for s, i in self.sources:
            flat += (s, i)
        return {"sources": flat, "timings": list(self.timings)}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageHistory):
            return NotImplemented
        return self.sources == other.sources and self.timings == other.timings

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        src = ", ".join(f"{s}={i:#x}" for s, i in self.sources)
        return f"MessageHistory(sources=[{src}], timings={self.timings})"

    # -- encoding ----------------------------------------------------------
    def to_bytes(self, now: int | None = None) -> bytes:
        """The raw compact form (what follows the ``86`` code).

        With ``now``, the writer's own timing is appended as Java does when it
        writes (so the bytes hold one more timing than :attr:`timings`).

        Raises:
            ValueError: too many sources or timings to encode.
        """
        n = len(self.sources)
        timings = self.timings if now is None else [*self.timings, now]
        if n > MAX_SOURCES or len(timings) > MAX_TIMINGS + 1:
            raise ValueError(f"a message history holds at most {MAX_SOURCES} sources "
                             f"and {MAX_TIMINGS + 1} timings")
        return struct.pack(f"<B{n}i{n}qB{len(timings)}q", n,
                           *(s for s, _ in self.sources), *(i for _, i in self.sources),
                           len(timings), *timings)

    def wire_bytes(self, now: int | None = None) -> bytes:
        """The history as a Java method writer writes it first in an excerpt:
        ``BA 80 00 81 <u16 len> 86`` + :meth:`to_bytes`."""
        raw = self.to_bytes(now)
        return HISTORY_KEY + b"\x81" + struct.pack("<H", len(raw) + 1) + b"\x86" + raw

    @classmethod
    def from_bytes(cls, raw: bytes | bytearray | memoryview) -> MessageHistory:
        """Parse the raw compact form (the bytes after ``86``).

        Raises:
            WireError: the bytes are truncated.
        """
        buf = bytes(raw)
        try:
            n = buf[0]
            ids = struct.unpack_from(f"<{n}i", buf, 1)
            pos = 1 + 4 * n
            idx = struct.unpack_from(f"<{n}q", buf, pos)
            pos += 8 * n
            t = buf[pos]
            timings = struct.unpack_from(f"<{t}q", buf, pos + 1)
        except (IndexError, struct.error):
            raise WireError(f"truncated message history ({len(buf)} bytes)") from None
        return cls(zip(ids, idx, strict=True), timings)

    @classmethod
    def from_plain(cls, value: object) -> MessageHistory:
        """Build a history from its decoded form: raw bytes (:class:`HistoryBytes`),
        or the self-describing ``{"sources": [id, index, ...], "timings": [...]}``.

        Raises:
            WireError: the value is not a history.
        """
        if isinstance(value, bytes | bytearray | memoryview):
            return cls.from_bytes(value)
        if isinstance(value, Mapping):
            # an empty sequence is the bytes of an empty map in BinaryWire (82 00000000):
            # Java 5.2x writes `sources` so when a message has no source yet
            src = value.get("sources") or []
            tim = value.get("timings") or []
            if isinstance(src, list) and isinstance(tim, list):
                if src and isinstance(src[0], list):  # pairs (our JSON form may use them)
                    src = [x for pair in src for x in pair]
                if (len(src) % 2 == 0 and all(type(x) is int for x in src)
                        and all(type(x) is int for x in tim)):
                    return cls(zip(src[::2], src[1::2], strict=True), tim)
        raise WireError(f"not a message history: {value!r:.80}")


# --------------------------------------------------------------------------
# The message being handled
# --------------------------------------------------------------------------


def incoming_history(inc: Incoming) -> MessageHistory:
    """The history of the message ``inc`` describes, as its handler sees it:
    the writer's, plus this read (built once, then kept on ``inc``).

    :class:`Incoming` (native/histcall.c) is what a method reader knows of
    the message being handled: the history bytes read, the source, the
    index and when it was read.
    """
    h = inc.history
    if h is None:
        h = MessageHistory() if inc.raw is None else MessageHistory.from_plain(inc.raw)
        h.add_source(inc.source_id, inc.index)
        h.add_timing(inc.read_ns)
        inc.history = h
    return h  # type: ignore[no-any-return]


CURRENT: ContextVar[Incoming | None] = ContextVar("aiochronicle_history", default=None)
"""The message an async handler is handling (a sync handler's is this thread's
current message in the native core: ``hold``/``release``, and the method
readers dispatching in C); the method writers of the native core
(native/histcall.c) read both."""
set_history(CURRENT)


def current_incoming_or_context() -> Incoming | None:
    """The message being handled: the running sync handler's, else the
    context's (an async handler's)."""
    inc = current_incoming()
    return inc if inc is not None else CURRENT.get()


def current_history() -> MessageHistory | None:
    """The history of the message the current handler is handling (None outside
    a method-reader dispatch, and for messages read without history tracking).

    It lists the sources and timings the writer recorded, then the source this
    reader read it from and when.  Method writers called from the handler carry
    it forward.  A sync handler's message is its thread's while it runs (as
    Java's ``MessageHistory.get()``): a task it starts does not inherit it.
    """
    inc = current_incoming_or_context()
    return None if inc is None else incoming_history(inc)


_FIRST = struct.Struct("<BiqBqq")  # one source, two timings (read, write)
_SOURCE_ID = struct.Struct("<i")
_READ_WRITE = struct.Struct("<qq")


def _forward_raw(inc: Incoming) -> bytes | None:
    """The compact history of an excerpt written while ``inc`` is handled,
    spliced from the bytes read (the source read and two timings added),
    without building a :class:`MessageHistory`; None when that cannot be done
    (a self-describing history, or one at its limits: the slow path raises)."""
    raw = inc.raw
    now = _now()
    if raw is None:
        return _FIRST.pack(1, inc.source_id, inc.index, 2, inc.read_ns, now)
    if not isinstance(raw, bytes):
        return None
    n = raw[0]
    ids_end = 1 + 4 * n
    idx_end = ids_end + 8 * n
    t = raw[idx_end]
    if n >= MAX_SOURCES or t + 2 > MAX_TIMINGS + 1:
        return None
    return b"".join((bytes((n + 1,)), raw[1:ids_end], _SOURCE_ID.pack(inc.source_id),
                     raw[ids_end:idx_end], _I64.pack(inc.index), bytes((t + 2,)),
                     raw[idx_end + 1:idx_end + 1 + 8 * t],
                     _READ_WRITE.pack(inc.read_ns, now)))


def outgoing_wire_bytes() -> bytes:
    """The BinaryWire history prefix for an excerpt written now."""
    inc = current_incoming_or_context()
    if inc is not None and inc.history is None:
        raw = _forward_raw(inc)
        if raw is not None:
            return HISTORY_KEY + b"\x81" + struct.pack("<H", len(raw) + 1) + b"\x86" + raw
    h = MessageHistory() if inc is None else incoming_history(inc)
    return h.wire_bytes(_now())


def outgoing_raw() -> bytes:
    """The raw compact history for an excerpt written now."""
    inc = current_incoming_or_context()
    if inc is not None and inc.history is None:
        raw = _forward_raw(inc)
        if raw is not None:
            return raw
    h = MessageHistory() if inc is None else incoming_history(inc)
    return h.to_bytes(_now())


def outgoing_plain() -> dict[str, list[int]]:
    """The self-describing history (for JSON) of an excerpt written now."""
    inc = current_incoming_or_context()
    h = MessageHistory() if inc is None else incoming_history(inc)
    out = h.to_dict()
    out["timings"].append(_now())
    return out


def check_history(raw: bytes) -> None:
    """Check that compact history bytes are complete (cheaply, without parsing).

    Raises:
        WireError: the length does not match the counts.
    """
    try:
        n = raw[0]
        t = raw[1 + 12 * n]
    except IndexError:
        raise WireError(f"truncated message history ({len(raw)} bytes)") from None
    if len(raw) < 2 + 12 * n + 8 * t:
        raise WireError(f"truncated message history ({len(raw)} bytes)")
