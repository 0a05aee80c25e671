"""The event loops the async tests run on: each test runs once per loop kind, and
the uvloop variant alone skips where uvloop is not available (Windows)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from skips import skip

try:
    import uvloop
except ImportError:  # pragma: no cover - Windows: uvloop is not a dependency there
    uvloop = None

KINDS = ["asyncio", "uvloop"]


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """``asyncio.new_event_loop`` or uvloop's (skipping the test without uvloop)."""
    if kind == "asyncio":
        return asyncio.new_event_loop
    if uvloop is None:
        skip("uvloop")
    return uvloop.new_event_loop
