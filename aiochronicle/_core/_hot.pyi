# Types of the C API module aiochronicle._core._hot (native/hot.c, native/wirecall.c,
# native/histcall.c),
# the second module of the one extension file aiochronicle._core._cq.
#
# The classes named *Hooks are not in the module: they state the methods C
# calls by name on ``self`` (native/hot.c's str_* names), which the Python
# subclasses must provide; each type that calls them lists them as a base, so
# mypy checks the subclasses' signatures (tests/test_native_boundary.py checks
# this file against the module).
import asyncio
from collections.abc import Awaitable, Callable, Generator
from contextvars import Context, ContextVar
from typing import Any, Protocol, final, overload

from typing_extensions import Buffer

@final
class NativeHandle:
    """A struct or word of the native core, made by :func:`handle` (never an
    address): what the methods taking native memory accept; it keeps the
    memory alive.  Not constructible from Python."""

class _CallsHooks(Protocol):
    def _let_go(self) -> None:
        """Called when the last call in flight leaves after a close was asked."""

class _AppenderHooks(Protocol):
    def _append_native_failed(self, rc: int, data: object, /) -> int:
        """The slow path of ``append`` for the core's result code ``rc``."""

class _TailerHooks(Protocol):
    def _read_slow(self, rc: int, /) -> Any:
        """The slow path of ``read_nowait`` for the core's result code ``rc``."""
    def _read_other(self) -> Any:
        """``read_nowait`` of a tailer the native path does not serve."""
    def _read_blocking(self, timeout: float | None = None) -> Any:
        """The waiting read ``read_blocking`` falls back to."""
    def _anext(self) -> Awaitable[Any]:
        """The awaitable ``__anext__`` hands over to when nothing is there."""

class _ReaderHooks(Protocol):
    def _read_one_slow(self) -> bool:
        """``read_one`` when the pending batch is empty or not native."""
    def _read_one_general(self) -> bool:
        """``read_one`` of an excerpt the native dispatch does not take."""
    def _reentered(self) -> bool:
        """``read_one`` while this reader's batch read (``read_available``,
        ``run``) is in progress: raises ReentrantReadError."""

class _HotCalls(_CallsHooks):
    """Counts the object's calls in flight (native/hot.c)."""

    def _forked(self) -> None: ...
    def _enter(self) -> None: ...
    def _leave(self) -> None: ...
    def _owe(self) -> bool: ...

class HotAppender(_HotCalls, _AppenderHooks):
    def _bind_native(self, handle: NativeHandle, /) -> None: ...
    def append(self, data: bytes | bytearray | memoryview | str, /) -> int: ...

class HotTailer(_HotCalls, _TailerHooks):
    checkpoint_every: int
    _unyielded: int
    def __anext__(self) -> Awaitable[Any]: ...
    def _bind_native(self, handle: NativeHandle, forward: bool, plain: bool = ...,
                     /) -> None: ...
    def read_nowait(self) -> Any: ...
    def read_blocking(self, timeout: float | None = None) -> Any: ...
    def _spin_read(self, budget_ns: int, stop: NativeHandle, stop_seen: int, /) -> Any: ...
    def _arm_read(self, parked: NativeHandle, slot: int, owner: NativeHandle, ident: int,
                  alone: bool, /) -> Any: ...

class HotReader(_ReaderHooks):
    """The pending batch and ``read_one()`` of a MethodReader."""

    _pend_i: int
    _pend_n: int
    _one_native: bool
    _busy: bool
    _pend_data: Any
    _pend_off: Any
    _pend_idx: Any
    _fast_mp: dict[bytes, tuple[Callable[[Any], Any], Callable[[Any], Any]]]
    _fast_wire_names: dict[Any, tuple[Any, tuple[Callable[..., Any], ...]]]
    _fast_wire_ids: dict[Any, tuple[Any, tuple[Callable[..., Any], ...]]]
    _fast_done: Any
    def read_one(self) -> bool: ...

class WriterMethod:
    """A method writer's method: positional calls encoded (``prefix +
    encode(arg) + suffix``, or through ``into``, msgspec's ``encode_into``)
    and appended in C, with the message history (form ``hist``: 1 msgpack,
    2 BinaryWire) at ``prefix[hist_at]``; any other call is ``fallback``.
    With a gate (an int64 cell): appended to ``gate_appender`` while it holds
    0, else through ``append``."""

    fallback: Callable[..., None]
    def __init__(self, appender: Any, append: Callable[[bytes], int],
                 encode: Callable[[Any], bytes], prefix: bytes, suffix: bytes, arity: int,
                 pack: bool, direct: bool, fallback: Callable[..., None],
                 into: Callable[[Any, bytearray], None] | None = None, hist: int = 0,
                 hist_at: int = 0, gate: NativeHandle | None = None,
                 gate_appender: HotAppender | None = None, /) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> None: ...
    def __get__(self, obj: object, cls: type | None = None) -> Any: ...

_PlanNode = tuple[int, int, int, int, bytes | None, type | None, str | None]

class WireEncoder:
    """The arguments of a method call in BinaryWire, as Java's method writer
    writes them (``key`` first); ``fallback`` (the Python encoder) writes what
    ``plan`` does not cover."""

    fallback: Callable[..., bytes]
    def __init__(self, key: bytes, plan: tuple[_PlanNode, ...],
                 fallback: Callable[..., bytes], /) -> None: ...
    def __call__(self, args: tuple[Any, ...], history: bytes = ..., /) -> bytes: ...

class WireDecoder:
    """The arguments of a method call written in BinaryWire, by ``plan``."""

    def __init__(self, plan: tuple[_PlanNode, ...], /) -> None: ...
    def decode(self, buf: Buffer, pos: int, /) -> tuple[Any, ...] | None: ...

@final
class Park:
    """What a parked task awaits (native/park.c): asyncio's future protocol
    with one state (pending, then done or cancelled), made by :func:`new_park`.
    :func:`wake_parks` (and :func:`park_readable`) end parks and run their
    callbacks at once; ``set_result`` and ``cancel`` schedule them with the
    loop's ``call_soon``, as a Future does.  Not constructible from Python."""
    _asyncio_future_blocking: bool
    def result(self) -> None: ...
    def exception(self) -> None: ...
    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def get_loop(self) -> asyncio.AbstractEventLoop: ...
    def set_result(self, result: None, /) -> None: ...
    def cancel(self, msg: Any | None = None) -> bool: ...
    def add_done_callback(self, fn: Callable[[Park], object], /, *,
                          context: Context | None = None) -> None: ...
    def remove_done_callback(self, fn: Callable[[Park], object], /) -> int: ...
    def __await__(self) -> Generator[Park]: ...
    def __iter__(self) -> Generator[Park]: ...
    def __next__(self) -> Park: ...

def new_park(loop: asyncio.AbstractEventLoop, parks: set[Park] | None = None,
             wakers: set[Park] | None = None, /) -> Park: ...
def end_park(park: Park, parks: set[Park] | None, wakers: set[Park] | None = None, /) -> None: ...
def wake_parks(parks: set[Park], done: asyncio.Future[None] | None = None, /) -> None: ...
def park_readable(fd: int, parks: set[Park], done: asyncio.Future[None] | None = None,
                  /) -> None: ...

class Incoming:
    """What a method reader knows of the message a handler is handling; its
    history is built only when asked for (``history`` caches it)."""

    raw: object
    source_id: int
    index: int
    read_ns: int
    history: Any
    def __init__(self, raw: object, source_id: int, index: int, read_ns: int) -> None: ...

@overload
def _dispatch_mp(data: Buffer, offsets: Buffer, start: int, end: int,
                 fast: dict[bytes, tuple[Callable[[Any], Any], Callable[[Any], Any]]],
                 done: Buffer, /) -> int: ...
@overload
def _dispatch_mp(data: Buffer, offsets: Buffer, start: int, end: int,
                 fast: dict[bytes, tuple[Callable[[Any], Any], Callable[[Any], Any]]],
                 done: Buffer, indices: Buffer, source_id: int, mode: int = ..., /) -> int: ...
_WireFast = dict[Any, tuple[Callable[[Any, int], tuple[Any, ...] | None],
                            tuple[Callable[..., Any], ...]]]
@overload
def _dispatch_wire(data: Buffer, offsets: Buffer, start: int, end: int, names: _WireFast,
                   ids: _WireFast, done: Buffer, /) -> int: ...
@overload
def _dispatch_wire(data: Buffer, offsets: Buffer, start: int, end: int, names: _WireFast,
                   ids: _WireFast, done: Buffer, indices: Buffer, source_id: int,
                   mode: int = ..., /) -> int: ...
def _dispatch_one(payload: Buffer, index: int,
                  fast: dict[bytes, tuple[Callable[[Any], Any], Callable[[Any], Any]]],
                  source_id: int, names: _WireFast, ids: _WireFast, mode: int = ...,
                  /) -> bool: ...
def set_history(var: ContextVar[Any], /) -> None: ...
def current_incoming() -> Incoming | None: ...
def hold(inc: Incoming, /) -> None: ...
def release(inc: Incoming, /) -> None: ...
def outgoing_history(form: int, /) -> bytes | None: ...
def handle(buffer: Buffer, ctype: str, /) -> NativeHandle: ...
def _hot_after(found: NativeHandle, hot_ns: int, /) -> int:
    """A notify waiter's spin budget after a find: twice the gap since the
    last find (``found``: an ``int64_t`` handle of monotonic ns, set to now),
    at most ``hot_ns``; 0 from a gap of ``hot_ns`` on."""
def set_excerpt_type(tp: type[tuple[Any, ...]], /) -> None: ...
def version() -> str: ...
