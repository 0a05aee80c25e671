"""Where features of the layers above plug into the core objects.

The core (queue, appender, tailer) offers ``Queue.codec``,
``Appender.method_writer`` and ``Tailer.method_reader`` without importing the
codec and method modules: those modules register their factories here when
they are imported (``import aiochronicle`` imports them all), and the core
calls whatever is registered.  Imports go down only; features attach from above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["HOOKS", "Hooks"]


class Hooks:
    """The factories features register (each None until its module is imported)."""

    __slots__ = ("method_reader", "method_writer", "queue_codec")

    def __init__(self) -> None:
        #: ``(queue) -> Codec``: the codec a queue records (``_codecs``)
        self.queue_codec: Callable[..., Any] | None = None
        #: ``(appender, iface, **options) -> proxy`` (``_methods``)
        self.method_writer: Callable[..., Any] | None = None
        #: ``(tailer, *handlers, **options) -> MethodReader`` (``_methods``)
        self.method_reader: Callable[..., Any] | None = None

    def need(self, name: str) -> Callable[..., Any]:
        """The factory registered as ``name``; RuntimeError when its module was
        never imported (``import aiochronicle`` imports every one)."""
        fn: Callable[..., Any] | None = getattr(self, name)
        if fn is None:
            raise RuntimeError(f"aiochronicle's {name} is not loaded: import aiochronicle")
        return fn


HOOKS = Hooks()
