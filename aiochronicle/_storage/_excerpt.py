"""What a read returns: :class:`Excerpt` (one message) and :class:`Batch`
(many, packed), and which way a tailer moves."""

from __future__ import annotations

import enum
from array import array
from collections.abc import Iterator
from typing import NamedTuple

from .._core._native import set_excerpt_type
from .._format._wire import WireWriter, payload_text

__all__ = ["SCRATCH", "Batch", "Excerpt", "MetadataExcerpt", "TailerDirection", "TailerState",
           "batch_of", "text_bytes"]

#: bytes of the buffer a tailer copies a small payload into
SCRATCH = 4096


class TailerDirection(enum.IntEnum):
    """Which way a tailer moves after each read."""

    BACKWARD = -1
    NONE = 0
    FORWARD = 1


class TailerState(enum.Enum):
    """Where a tailer stands (:attr:`Tailer.state`), by Java's ``TailerState``."""

    UNINITIALISED = "UNINITIALISED"
    """The queue had no cycle file when the tailer was last positioned."""
    FOUND_IN_CYCLE = "FOUND_IN_CYCLE"
    """At an excerpt of a cycle file, or at its end waiting for the next one."""
    END_OF_CYCLE = "END_OF_CYCLE"
    """Past the last excerpt of a cycle that is closed (EOF written): the next
    read moves on to the next cycle."""
    CYCLE_NOT_FOUND = "CYCLE_NOT_FOUND"
    """At a cycle that has no file."""
    BEYOND_START_OF_CYCLE = "BEYOND_START_OF_CYCLE"
    """Reading backward, moved before the first excerpt of the queue."""
    NOT_REACHED_IN_CYCLE = "NOT_REACHED_IN_CYCLE"
    """At an index past the next one to be written in its cycle."""


class Excerpt(NamedTuple):
    """One message read from a queue: its 64-bit index and a copy of its payload."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose
    payload: bytes

    @property
    def metadata(self) -> bool:
        """True for a metadata excerpt (only a tailer made with
        ``include_metadata=True`` returns them; their index is that of the
        next data excerpt)."""
        return False

    @property
    def text(self) -> str:
        """The payload as text.  ``append_text`` and Java's ``writeText`` store
        a BinaryWire string, whose first byte is a length prefix (``b"\\xe5hello"``
        holds ``"hello"``: 0xE0 + 5 bytes; from 32 bytes on, 0xB8 and a
        stop-bit length); this drops the prefix.  A payload without one is
        decoded as UTF-8.  Raises WireError when it is not text."""
        return payload_text(self.payload)


class MetadataExcerpt(Excerpt):
    """A metadata excerpt: :attr:`Excerpt.metadata` is True."""

    __slots__ = ()

    @property
    def metadata(self) -> bool:
        """True: this is a metadata excerpt."""
        return True


set_excerpt_type(Excerpt)


def text_bytes(text: str) -> bytes:
    """``text`` encoded as BinaryWire text, as Java's ``writeText`` writes it."""
    return WireWriter().text(text).getvalue()


class Batch:
    """Excerpts read in one native call: payloads packed back to back.

    ``offsets`` has ``len(batch) + 1`` entries (Arrow's binary layout) and
    ``indices`` one per excerpt.
    """

    __slots__ = ("data", "indices", "offsets")

    def __init__(self, data: memoryview, offsets: array[int], indices: array[int]) -> None:
        self.data = data
        self.offsets = offsets
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Excerpt:
        o = self.offsets
        return Excerpt(self.indices[i], bytes(self.data[o[i]:o[i + 1]]))

    def __iter__(self) -> Iterator[Excerpt]:
        for i in range(len(self.indices)):
            yield self[i]

    def __repr__(self) -> str:
        n = len(self.indices)
        if not n:
            return "<Batch empty>"
        size = self.offsets[n] - self.offsets[0]
        return (f"<Batch {n} excerpts, {size} bytes, "
                f"{self.indices[0]:#x}..{self.indices[n - 1]:#x}>")

    def payloads(self) -> list[bytes]:
        """Every payload as bytes."""
        o, d = self.offsets, self.data
        return [bytes(d[o[i]:o[i + 1]]) for i in range(len(self.indices))]


def batch_of(items: list[Excerpt]) -> Batch:
    offsets = array("q", [0])
    total = 0
    for ex in items:
        total += len(ex.payload)
        offsets.append(total)
    data = memoryview(b"".join(ex.payload for ex in items))
    return Batch(data, offsets, array("q", [ex.index for ex in items]))

