"""Pytest fixtures for testing your own services against aiochronicle.

Installing aiochronicle registers this module as a pytest plugin (through the
``pytest11`` entry point), so the fixtures below are available in any test
suite without a ``conftest.py``:

``chronicle_queue_dir``
    A fresh, empty directory for one queue (under pytest's ``tmp_path``).
``chronicle_clock``
    A :class:`aiochronicle.SetTimeProvider` fixed at :data:`CHRONICLE_EPOCH_MILLIS`
    (2024-01-01 00:00:00 UTC); move it with ``set_millis`` or ``advance_millis``
    to make cycles roll deterministically.
``chronicle_queue``
    An open :class:`aiochronicle.Queue` in ``chronicle_queue_dir`` that uses
    ``chronicle_clock``; closed after the test.

Example::

    def test_my_service(chronicle_queue, chronicle_clock):
        chronicle_queue.appender().write(b"hello")
        chronicle_clock.advance_millis(86_400_000)  # the next daily cycle
        ...

To override the queue's options (roll cycle, codec...), write your own fixture
from ``chronicle_queue_dir`` and ``chronicle_clock``.  If the plugin is disabled
(``-p no:aiochronicle``), enable it per test module with
``pytest_plugins = ["aiochronicle.testing"]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ._clock import SetTimeProvider
from ._queue import Queue, open_queue

__all__ = [
    "CHRONICLE_EPOCH_MILLIS",
    "chronicle_clock",
    "chronicle_queue",
    "chronicle_queue_dir",
]

CHRONICLE_EPOCH_MILLIS = 1_704_067_200_000
"""The time ``chronicle_clock`` starts at: 2024-01-01 00:00:00 UTC, in milliseconds."""


@pytest.fixture
def chronicle_queue_dir(tmp_path: Path) -> Path:
    """A fresh directory path for one queue; it does not exist yet."""
    return tmp_path / "chronicle-queue"


@pytest.fixture
def chronicle_clock() -> SetTimeProvider:
    """A settable clock starting at :data:`CHRONICLE_EPOCH_MILLIS`."""
    return SetTimeProvider(CHRONICLE_EPOCH_MILLIS)


@pytest.fixture
def chronicle_queue(chronicle_queue_dir: Path,
                    chronicle_clock: SetTimeProvider) -> Iterator[Queue]:
    """An open queue in ``chronicle_queue_dir`` on ``chronicle_clock``, closed after the test."""
    queue = open_queue(chronicle_queue_dir, time_provider=chronicle_clock)
    try:
        yield queue
    finally:
        queue.close()
