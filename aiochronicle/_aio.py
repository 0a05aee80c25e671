"""asyncio support shared by Queue, Appender and Tailer (mixins)."""

from __future__ import annotations

__all__ = ["AsyncTailerMixin"]


class AsyncTailerMixin:
    """The asyncio side of :class:`~aiochronicle.Tailer` (filled in by the asyncio work)."""
