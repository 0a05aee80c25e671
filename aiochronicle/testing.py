"""Pytest fixtures for testing your own services against aiochronicle.

The plugin is opt-in, so installing aiochronicle changes no other project's
pytest sessions.  Enable it for a test suite in its top-level ``conftest.py``
(or a test module)::

    pytest_plugins = ["aiochronicle.testing"]

or on the command line (``pytest -p aiochronicle.testing``, also as ``addopts``
in the pytest configuration).  It provides these fixtures:

``chronicle_queue_dir``
    A fresh, empty directory for one queue (under pytest's ``tmp_path``).
``chronicle_clock``
    A :class:`aiochronicle.SetTimeProvider` fixed at :data:`CHRONICLE_EPOCH_MILLIS`
    (2024-01-01 00:00:00 UTC); move it with ``set_millis`` or ``advance_millis``
    to make cycles roll deterministically.
``chronicle_queue``
    An open :class:`aiochronicle.Queue` in ``chronicle_queue_dir`` that uses
    ``chronicle_clock``; closed after the test.
``chronicle_queue_factory``
    A function ``make(name="queue", **options)`` that opens a queue in its own
    directory under ``tmp_path`` (on ``chronicle_clock`` unless a
    ``time_provider`` is given; any other :func:`aiochronicle.open_queue`
    option passes through), for services with several queues or settings of
    their own.  Every queue it made is closed after the test.

Example::

    def test_my_service(chronicle_queue, chronicle_clock):
        chronicle_queue.appender().append(b"hello")
        chronicle_clock.advance_millis(86_400_000)  # the next daily cycle
        ...

    def test_pipeline(chronicle_queue_factory):
        inbound = chronicle_queue_factory("in", source_id=1)
        outbound = chronicle_queue_factory("out", roll_cycle=aiochronicle.RollCycles.FAST_HOURLY)
        ...
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from ._format._clock import SetTimeProvider
    from ._objects._queue import Queue

__all__ = [
    "CHRONICLE_EPOCH_MILLIS",
    "QueueFactory",
    "chronicle_clock",
    "chronicle_queue",
    "chronicle_queue_dir",
    "chronicle_queue_factory",
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
    # the native core loads when a fixture is first used, not with the plugin
    from ._format._clock import SetTimeProvider

    return SetTimeProvider(CHRONICLE_EPOCH_MILLIS)


@pytest.fixture
def chronicle_queue(chronicle_queue_dir: Path,
                    chronicle_clock: SetTimeProvider) -> Iterator[Queue]:
    """An open queue in ``chronicle_queue_dir`` on ``chronicle_clock``, closed after the test."""
    from ._objects._queue import open_queue

    queue = open_queue(chronicle_queue_dir, time_provider=chronicle_clock)
    try:
        yield queue
    finally:
        queue.close()


class QueueFactory(Protocol):
    """The type of the ``chronicle_queue_factory`` fixture, for annotating tests."""

    def __call__(self, name: str = "queue", **options: Any) -> Queue:
        """Open the queue ``name`` (a directory under the test's ``tmp_path``)."""
        ...


@pytest.fixture
def chronicle_queue_factory(tmp_path: Path,
                            chronicle_clock: SetTimeProvider) -> Iterator[QueueFactory]:
    """Opens queues in directories under ``tmp_path``; closes them after the test.

    ``make(name, **options)``: ``name`` is the directory (opening the same name
    twice gives two handles on one queue, as two processes would have);
    ``options`` are :func:`aiochronicle.open_queue` keywords, with
    ``time_provider`` defaulting to ``chronicle_clock``.
    """
    from ._objects._queue import open_queue

    opened: list[Queue] = []

    def make(name: str = "queue", **options: Any) -> Queue:
        if not name or os.path.isabs(name) or ".." in Path(name).parts:
            raise ValueError(f"queue name {name!r} must be a relative path inside tmp_path")
        options.setdefault("time_provider", chronicle_clock)
        queue = open_queue(tmp_path / name, **options)
        opened.append(queue)
        return queue

    try:
        yield make
    finally:
        for queue in reversed(opened):
            queue.close()
