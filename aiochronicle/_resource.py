"""What every user object shares: ``with`` / ``async with`` closing, and how
a close lets go of a mapped cycle file when other threads may still use it."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ._store import CycleStore

__all__ = ["keep_if_threaded", "single_threaded"]

_Self = TypeVar("_Self", bound="_Resource")


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


def single_threaded() -> bool:
    """No other Python thread runs: no native call of ours can be in flight
    while this one closes something."""
    return threading.active_count() == 1


def keep_if_threaded(obj: Any, st: CycleStore | None) -> None:
    """On close: when another thread could be inside a native call on ``st``
    (closing from another thread is allowed), keep it mapped until ``obj``
    is garbage; alone, let it go at once (closing releases the file)."""
    if st is not None and not single_threaded():
        obj._kept = st  # what the native struct still points at
        st.kept += 1

