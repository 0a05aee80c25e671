# Types of the C extension aiochronicle._hot (native/hot.c, native/wirecall.c).
from collections.abc import Awaitable, Callable
from typing import Any

from typing_extensions import Buffer

class _HotCalls:
    """Counts the object's calls in flight (native/hot.c)."""

    def _enter(self) -> None: ...
    def _leave(self) -> None: ...
    def _owe(self) -> bool: ...

class HotAppender(_HotCalls):
    def _bind_native(self, address: int, /) -> None: ...
    def append(self, data: bytes | bytearray | memoryview | str, /) -> int: ...

class HotTailer(_HotCalls):
    checkpoint_every: int
    _unyielded: int
    def __anext__(self) -> Awaitable[Any]: ...
    def _bind_native(self, address: int, forward: bool, plain: bool = ..., /) -> None: ...
    def read_nowait(self) -> Any: ...
    def read_blocking(self, timeout: float | None = None) -> Any: ...
    def _spin_read(self, budget_ns: int, stop_address: int, stop_seen: int, /) -> Any: ...
    def _arm_read(self, parked: int, slot: int, owner: int, ident: int, alone: bool, /) -> Any: ...

class HotReader:
    """The pending batch and ``read_one()`` of a MethodReader."""

    _pend_i: int
    _pend_n: int
    _one_native: bool
    _pend_data: Any
    _pend_off: Any
    _pend_idx: Any
    _fast_mp: dict[bytes, tuple[Callable[[Any], Any], Callable[[Any], Any]]]
    _fast_done: Any
    def read_one(self) -> bool: ...

class WriterMethod:
    """A method writer's method: positional calls encoded (``prefix +
    encode(arg) + suffix``, or through ``into``, msgspec's ``encode_into``)
    and appended in C; any other call is ``fallback``."""

    fallback: Callable[..., None]
    def __init__(self, appender: Any, append: Callable[[bytes], int],
                 encode: Callable[[Any], bytes], prefix: bytes, suffix: bytes, arity: int,
                 pack: bool, direct: bool, fallback: Callable[..., None],
                 into: Callable[[Any, bytearray], None] | None = None, /) -> None: ...
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

def _dispatch_mp(data: Buffer, offsets: Buffer, start: int, end: int,
                 fast: dict[bytes, tuple[Callable[[Any], Any], Callable[[Any], Any]]],
                 done: Buffer, /) -> int: ...
def set_excerpt_type(tp: type[tuple[Any, ...]], /) -> None: ...
def version() -> str: ...
