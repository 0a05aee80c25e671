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
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from .._format._store import CycleStore

__all__ = ["FileHold", "FileHolds", "in_flight"]

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

    def _hold_files(self, holds: FileHolds) -> None:
        """Register with the owner of the queue's files (once, when made): it
        calls the steps below on close and in a forked child."""
        self._file_hold = holds.add(self._queue_closing, self._queue_closed, self._after_fork)

    def _queue_closing(self) -> None:
        """Before a clean close of the queue (a named tailer saves its place)."""

    def _queue_closed(self) -> bool:
        """The queue's files are shut: let go of the cycle file, now or when
        the call in flight leaves.  True if a call is in flight."""
        self._detach()
        return self._owe()

    def _after_fork(self) -> CycleStore | None:
        """In a forked child: forget the parent's calls in flight; returns the
        cycle file held (the owner counts its holders again)."""
        raise NotImplementedError


class FileHold:
    """One appender's or tailer's hold on its queue's cycle files as the owner
    of the files sees it: the steps it takes on the queue's close and in a
    forked child.  The holder keeps it (a member, not a base); it refers to
    the holder's steps weakly, so a dropped holder goes as before and its
    hold leaves the registry with it."""

    __slots__ = ("__weakref__", "_after_fork", "_closed", "_closing")

    def __init__(self, closing: Callable[[], None], closed: Callable[[], bool],
                 after_fork: Callable[[], CycleStore | None]) -> None:
        self._closing = weakref.WeakMethod(closing)
        self._closed = weakref.WeakMethod(closed)
        self._after_fork = weakref.WeakMethod(after_fork)

    def closing(self) -> None:
        """Before a clean close of the queue."""
        step = self._closing()
        if step is not None:
            step()

    def closed(self) -> bool:
        """The queue's files are shut; True while a call of the holder is in flight."""
        step = self._closed()
        return step is not None and step()

    def after_fork(self) -> CycleStore | None:
        """In a forked child: the cycle file the holder holds."""
        step = self._after_fork()
        return None if step is None else step()


class FileHolds:
    """The holds on one queue's cycle files (a registry kept by their owner,
    ``Cycles``): the queue's close and the fork handler go through it, never
    through the appenders' and tailers' own methods."""

    def __init__(self) -> None:
        self._holds: weakref.WeakSet[FileHold] = weakref.WeakSet()

    def add(self, closing: Callable[[], None], closed: Callable[[], bool],
            after_fork: Callable[[], CycleStore | None]) -> FileHold:
        """A new hold with these steps, registered; the holder keeps it."""
        hold = FileHold(closing, closed, after_fork)
        self._holds.add(hold)
        return hold

    def closing(self) -> None:
        """Before a clean close: every holder's closing step."""
        for hold in list(self._holds):
            hold.closing()

    def closed(self) -> bool:
        """The files are shut: every holder lets go (now, or when its call in
        flight leaves); True if any call is in flight."""
        busy = False
        for hold in list(self._holds):
            # one with no call in flight lets its cycle file go now (the last
            # holder unmaps it); one in a call, when the call leaves
            busy = hold.closed() or busy
        return busy

    def after_fork(self) -> list[CycleStore]:
        """In a forked child: the cycle files held, one entry per holder."""
        return [st for hold in list(self._holds) if (st := hold.after_fork()) is not None]


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
