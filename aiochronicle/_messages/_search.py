"""Binary search: the first excerpt at or after a key, without a scan.

The search reads O(log n) excerpts: first one excerpt per probed cycle (the
first excerpt of each cycle, to pick the cycle), then one per probe inside the
chosen cycle.  A probe positions the tailer with ``move_to_index``, which finds
an excerpt through the cycle file's two-level index (``index2index``, then the
index page's entry, then a walk over the headers of one index span of at most
``indexSpacing`` excerpts), and reads that one excerpt.

The key of an excerpt comes from a function of its payload: a field of a typed
message (:func:`field_key`), the first timing of its message history
(:func:`history_time`), or anything the caller writes.  Keys must not decrease
along the queue (the queue must be sorted by the key), as for Java's
``BinarySearch.search``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._core._errors import ChronicleError
from .._storage._excerpt import Batch, Excerpt, TailerDirection, batch_of
from ._codecs import Codecs, payload_decoder
from ._methodreader import MethodReader
from ._methods import call_history

if TYPE_CHECKING:
    from .._format._rollcycles import RollCycle
    from ._codecs import Codec

__all__ = ["SearchStats", "binary_search", "field_key", "find_field", "history_time",
           "method_key"]

KeyFn = Callable[[bytes], Any]
"""A function from an excerpt's payload to its key; None means "no key here"
(Java's ``NotComparableException``): the search looks at the next excerpt."""

#: excerpts looked at past an excerpt without a key before giving up on a probe
_SKIP_LIMIT = 1 << 16


@dataclass
class SearchStats:
    """What one :func:`binary_search` did (pass one to count).

    Attributes:
        reads: excerpts read (each read once, its key taken once).
        cycles: cycles probed by their first excerpt.
    """

    reads: int = 0
    cycles: int = 0


class _Queue(Protocol):
    @property
    def roll_cycle(self) -> RollCycle: ...
    def cycles(self) -> list[int]: ...
    def excerpts_in_cycle(self, cycle: int) -> int: ...


class SearchTailer(Protocol):
    """What a binary search needs of a tailer (:class:`Tailer` is one)."""

    @property
    def queue(self) -> Any: ...
    def move_to_index(self, index: int) -> bool: ...
    def read_nowait(self) -> Excerpt | None: ...
    def to_end(self) -> Any: ...


def binary_search(tailer: SearchTailer, key: Any, *, key_fn: KeyFn = bytes,
                  stats: SearchStats | None = None) -> int | None:
    """The index of the first excerpt whose key is at or after ``key``
    (``key_fn(payload) >= key``), or None when every excerpt's key is
    before it.  The tailer is left at that excerpt (its next read returns
    it), or at the end of the queue when None is returned.

    Excerpts whose ``key_fn`` returns None have no key: the probe moves on to
    the next excerpt (at most 65,536 in a row).  Keys must not decrease along
    the queue; the result is undefined where they do (as Java's).  Unlike
    Java's ``BinarySearch.search``, which returns any excerpt equal to the key
    or a negative approximation, this returns the first excerpt at or after
    it, the place to start a replay.
    """
    st = stats if stats is not None else SearchStats()
    q: _Queue = tailer.queue
    rc = q.roll_cycle
    cycles = q.cycles()
    counts: dict[int, int] = {}

    def count(cycle: int) -> int:
        if cycle not in counts:
            counts[cycle] = q.excerpts_in_cycle(cycle)
        return counts[cycle]

    def probe(cycle: int, seq: int, end: int) -> tuple[int, Any]:
        """(sequence, key) of the first excerpt with a key at or after ``seq``
        in ``cycle`` (before ``end``); (end, None) when there is none."""
        for _ in range(_SKIP_LIMIT):
            if seq >= end:
                return end, None
            if not tailer.move_to_index(rc.to_index(cycle, seq)):
                return end, None
            ex = tailer.read_nowait()
            if ex is None:
                return end, None
            st.reads += 1
            k = key_fn(ex.payload)
            if k is not None:
                return seq, k
            seq += 1
        raise ChronicleError(f"binary search: {_SKIP_LIMIT} excerpts in a row without a key "
                             f"from {rc.to_index(cycle, seq):#x}")

    def first_at_or_after(cycle: int) -> int | None:
        """Lower bound inside one cycle: the first sequence with a key >= key."""
        lo, hi = 0, count(cycle)
        best: int | None = None
        while lo < hi:
            mid = (lo + hi) >> 1
            s, k = probe(cycle, mid, hi)
            if k is None:
                hi = mid  # no key from mid up to hi: look below
            elif k < key:
                lo = s + 1
            else:
                best = s  # the lowest found so far; look below mid for a lower one
                hi = mid
        return best

    # the cycle: the last whose first key is before ``key`` holds the answer,
    # unless it is the first excerpt of the next one.  Cycles are probed by
    # their first excerpt (an empty one by the next that is not), so only
    # about log2(cycles) files are opened
    lo, hi = 0, len(cycles)
    firsts: dict[int, tuple[int, Any]] = {}
    while lo < hi:
        mid = (lo + hi) >> 1
        j = mid
        while j < hi and count(cycles[j]) == 0:
            j += 1
        if j == hi:
            hi = mid  # nothing from mid on: the answer lies below
            continue
        st.cycles += 1
        firsts[j] = probe(cycles[j], 0, count(cycles[j]))
        k = firsts[j][1]
        if k is not None and k < key:
            lo = j + 1
        else:
            hi = mid
    found: int | None = None
    if lo > 0:
        seq = first_at_or_after(cycles[lo - 1])
        if seq is not None:
            found = rc.to_index(cycles[lo - 1], seq)
    for j in range(lo, len(cycles)) if found is None else ():
        # the first key of cycle j is at or after ``key`` (or it has none)
        s, k = firsts[j] if j in firsts else probe(cycles[j], 0, count(cycles[j]))
        if k is not None:
            found = rc.to_index(cycles[j], s)
            break
    if found is None:
        tailer.to_end()
    else:
        tailer.move_to_index(found)
    return found


def history_time(payload: bytes) -> int | None:
    """A key function: the first timing of the excerpt's message history
    (nanoseconds, ``time.monotonic_ns()`` of the writer that started the
    chain), or None when the excerpt carries no history.  Any codec."""
    h = call_history(payload)
    if h is None or not h.timings:
        return None
    return h.timings[0]


def field_key(name: str, codec: Codec | str | None = None) -> KeyFn:
    """A key function: the value of the field ``name`` in the excerpt, decoded
    as ``codec`` (default: BinaryWire documents and method calls as Java
    writes them; give the queue's codec, e.g. ``"msgpack"``, for method
    calls of other codecs).  The field is looked for at any depth (the first
    one found, depth first); None when the excerpt has no such field."""
    decode = payload_decoder(None if codec is None else Codecs.get(codec))

    def key(payload: bytes) -> Any:
        return find_field(decode(payload).value, name)

    return key


def method_key(iface: type, method: str, key: Callable[..., Any]) -> KeyFn:
    """A key function over a typed method call: for an excerpt holding a call
    of ``iface.method`` (written by a method writer of ``iface``, any codec),
    ``key(*args)`` of its decoded, typed arguments; None for other excerpts.

    ``ac.method_key(Ticks, "on_tick", lambda tick: tick.ts)``.

    Raises:
        TypeError: ``iface`` has no method ``method``.
    """
    proto = getattr(iface, method, None)
    if not callable(proto):
        raise TypeError(f"{getattr(iface, '__name__', iface)!r} has no method {method!r}")
    box: list[Any] = []

    def call(self: object, *args: Any) -> None:
        box.append(key(*args))

    # the interface's signature, so that the reader decodes the arguments as it does
    call.__signature__ = inspect.signature(proto)  # type: ignore[attr-defined]
    call.__annotations__ = dict(getattr(proto, "__annotations__", {}))
    call.__name__ = method
    handler = type("_KeyOf" + method, (), {method: call})()
    reader = MethodReader(_NoSource(), handler, interfaces=(iface,), batch=False,
                          history=False, on_error=_ignore)

    def key_of(payload: bytes) -> Any:
        box.clear()
        reader.process(payload, 0)
        return box[0] if box else None

    return key_of


def _ignore(exc: Exception, ex: object) -> None:
    """A payload that is no call of the method has no key."""


class _NoSource:
    """The source of a method reader that only decodes payloads given to
    ``process`` (:func:`method_key`): it reads nothing itself."""

    tailer = None
    name = None
    direction = TailerDirection.FORWARD
    source_id = 0
    checkpoint_every = 64
    pauser: Any = None
    closed = False

    def read_nowait(self) -> Excerpt | None:
        return None

    def read_many(self, max_count: int, max_bytes: int, /) -> Batch:
        return batch_of([])

    def save(self) -> None:
        pass

    def wait(self, until: Any, loop: Any, handle: Any, /) -> Awaitable[Excerpt | None]:
        raise ChronicleError("a key reader does not wait")


def find_field(value: object, name: str) -> Any:
    """The value of the first field ``name`` in decoded plain data (dicts and
    lists, depth first), or None."""
    stack = [value]
    for _ in range(1 << 16):
        if not stack:
            return None
        v = stack.pop()
        if isinstance(v, dict):
            if name in v:
                return v[name]
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list | tuple):
            stack.extend(reversed(v))
    return None
