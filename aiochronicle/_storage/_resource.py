"""What every user object shares: ``with`` / ``async with`` closing, and how
a close lets go of a mapped cycle file that a call may still be using.

An appender or tailer counts its calls in flight: its per-message calls in C
(``native/hot.c``), its other entry points with :func:`in_flight`.  Closing
it (from any thread, or from a signal handler that interrupted one of its
calls on this thread) asks the count: with no call in flight the file is let
go at once; otherwise the last call out lets it go.  So a close never unmaps
memory that a call in progress still reads or writes, and it needs to know
nothing about which threads exist.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Concatenate, ParamSpec, Protocol, TypeVar

__all__ = ["in_flight"]

_Self = TypeVar("_Self", bound="_Resource")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Resource:
    """``with`` and ``async with`` for the user objects: both close on exit."""

    def close(self) -> None:
        raise NotImplementedError

    def _close(self, clean: bool) -> None:
        """Close; ``clean`` is False when a ``with`` block ends with an exception
        (then named tailers keep the excerpt in hand as not done)."""
        self.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._close(et is None)

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._close(et is None)


class _CycleFileUser(_Resource):
    """An appender or tailer: a user object holding a cycle file while its
    calls are in flight, closed with its queue."""

    def _detach(self) -> None:
        """Turn later calls away; let go of the cycle file unless a call is in flight."""
        raise NotImplementedError

    def _owe(self) -> bool:
        """True while a call is in flight (``native/hot.c``)."""
        raise NotImplementedError

    def queue_closed(self) -> bool:
        """For the queue's use: its files are shut; let go of the cycle file,
        now or when the call in flight leaves.  True if a call is in flight."""
        self._detach()
        return self._owe()


class _Counted(Protocol):
    """An object whose calls are counted in flight (``native/hot.c``)."""

    def _enter(self) -> None: ...
    def _leave(self) -> None: ...


_C = TypeVar("_C", bound=_Counted)


def in_flight(method: Callable[Concatenate[_C, _P], _R]) -> Callable[Concatenate[_C, _P], _R]:
    """Count ``method`` as a call in flight of its object for its whole run:
    a close meanwhile (any thread, or a signal handler inside it) leaves the
    object's cycle file mapped until the last call out."""

    @functools.wraps(method)
    def counted(self: _C, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        self._enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._leave()

    return counted
