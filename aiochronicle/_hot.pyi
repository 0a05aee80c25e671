# Types of the C extension aiochronicle._hot (native/hot.c, native/wirecall.c).
from collections.abc import Callable
from typing import Any

from typing_extensions import Buffer

class HotAppender:
    def _bind_native(self, address: int, /) -> None: ...
    def append(self, data: bytes | bytearray | memoryview | str, /) -> int: ...

class HotTailer:
    def _bind_native(self, address: int, forward: bool, /) -> None: ...
    def read_nowait(self) -> Any: ...

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

def set_excerpt_type(tp: type[tuple[Any, ...]], /) -> None: ...
def version() -> str: ...
