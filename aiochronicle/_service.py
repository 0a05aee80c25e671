"""Services: a method-reader handler with method writers on its output queues,
run exactly once by message history (DESIGN.md decision 12).

A service's position is not a saved tailer index: it is the input index that
the message history of its own last output records (Chronicle's
``afterLastWritten``).  On start a service

1. finds, in each output queue, the last excerpt whose history's newest source
   is one of its inputs: the input index it was written for is the last input
   handled (every input before it was handled too, in order);
2. loads its last snapshot (``SnapshotPolicy``), if any: the handler's state
   and the input and output positions it covers;
3. replays the inputs after the snapshot (or from the first input, without
   one) up to that last handled input, with outputs *suppressed*: each output
   the handler writes is compared with the one recorded then, and not written
   again (a difference is a :class:`NondeterministicHandlerError`).  An input
   whose outputs a crash cut midway is re-handled the same way: the outputs
   already written are suppressed, the rest written;
4. goes on live.

Handlers must be deterministic: the same inputs in the same order give the
same outputs and the same state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._pauser import Pauser

__all__ = ["Service", "ServiceInput", "ServiceOutput", "ServiceStatistics", "SnapshotPolicy"]


@dataclass(frozen=True, slots=True)
class ServiceInput:
    """One input queue of a :class:`Service`.

    Attributes:
        path: the queue directory.
        source_id: the queue's ``sourceId`` (non-zero, and different for each
            input of a service): the method reader records it with the index of
            every input in the history of the outputs written while handling
            it, which is how a restarted service finds where it stopped.  None:
            the one the queue records (a :class:`ServiceError` when it records
            none).
        interfaces: interfaces lending their annotations and method ids to the
            handler's methods (as ``Tailer.method_reader(interfaces=...)``).
        start: the index to start from when the outputs record nothing of this
            input yet (default: the queue's first excerpt).
        end: handle inputs up to this index (inclusive) only, then stop reading
            this input (default: no end).  For replays of a recorded range.
    """

    path: str
    source_id: int | None = None
    interfaces: tuple[type, ...] = ()
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True, slots=True)
class ServiceOutput:
    """One output queue of a :class:`Service`: the handler factory gets a method
    writer of ``interface`` on it, as the keyword argument ``name``.

    Attributes:
        name: the keyword the handler factory is given the writer by (a Python
            identifier, unique in the service).
        path: the queue directory.
        interface: the interface whose calls the writer appends.
        source_id: the queue's ``sourceId`` (non-zero: message history is
            written only on queues that have one).  None: the one the queue
            records (a :class:`ServiceError` when it records none).
        codec: the codec of the calls (default: the one the queue records,
            else msgpack).
    """

    name: str
    path: str
    interface: type
    source_id: int | None = None
    codec: str | None = None


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """Where and how often a service snapshots its handler's state.

    A snapshot is one excerpt on the queue at ``path`` (a queue of the service's
    own): the handler's ``snapshot()`` (msgpack-encoded), the index of the last
    input handled from each input queue and the index of the last output
    written to each output queue.  One is written after ``every_inputs`` inputs
    or ``every_seconds`` seconds (whichever comes first, and only when inputs
    were handled since the last), and when the service stops cleanly.

    Attributes:
        path: the snapshot queue's directory.
        every_inputs: inputs handled between two snapshots (None: no count).
        every_seconds: the most seconds between two snapshots while inputs
            come (None: no timer).
    """

    path: str
    every_inputs: int | None = 1000
    every_seconds: float | None = 5.0


@dataclass(frozen=True, slots=True)
class ServiceStatistics:
    """Counters of a :class:`Service` (``Service.statistics``).

    Attributes:
        name: the service's name.
        state: ``"new"``, ``"recovering"``, ``"live"`` or ``"stopped"``.
        inputs_handled: inputs handled since ``run()`` started (replayed ones
            included).
        outputs_written: outputs appended since ``run()`` started.
        replayed: inputs handled again on start (from the snapshot, or the
            first input, up to the last input handled before).
        suppressed: outputs the handler wrote again on start that were already
            in the output queues (compared, not written).
        errors: inputs whose handler raised and were skipped
            (``on_error="skip"``).
        snapshots: snapshots written since ``run()`` started.
        snapshot_age: seconds since the last snapshot was written or loaded
            (None: there is none).
        recovery_seconds: seconds from ``run()`` starting to the service going
            live (None while it recovers).
        last_index: per input source id, the index of the last input handled
            (-1: none yet).
    """

    name: str
    state: str
    inputs_handled: int
    outputs_written: int
    replayed: int
    suppressed: int
    errors: int
    snapshots: int
    snapshot_age: float | None
    recovery_seconds: float | None
    last_index: Mapping[int, int] = field(default_factory=dict)


class Service:
    """A read-process-write service, exactly once by message history.

    ``handler`` is a factory called once per :meth:`run` as
    ``handler(**writers)``, one method writer per :class:`ServiceOutput`, by its
    name; it returns the handler object, whose public methods are called for
    the method calls read from the inputs (as a method reader's handler; they
    may be ``async def``).  It may keep state; to have that state come back
    after a restart without replaying every input, give a ``snapshots`` policy
    and two methods to the handler:

    * ``snapshot(self) -> object``: the state, msgspec-encodable;
    * ``restore(self, state: object) -> None``: take it back (decoded as plain
      msgpack values, or as the type the handler's ``snapshot_type`` attribute
      names).

    Without a snapshot policy, a restart replays every input from the first
    (``stateless=True``: only the input a crash cut midway, for handlers that
    keep no state).

    ``pauser``: how each input's tailer waits (a :class:`Pauser`, with one
    input only, or a factory called once per input; default
    ``Pauser.balanced()``).  ``on_error``: what happens when the handler
    raises: ``"stop"`` (default) logs it with the input's index and makes
    :meth:`run` raise :class:`ServiceHandlerError`; ``"skip"`` logs it and goes
    on with the next input (counted in ``statistics.errors``).  Never is an
    input skipped silently.

    Each output queue is written by this service alone; each input and output
    queue has a ``sourceId``.  With several inputs, each input's excerpts are
    handled once each and in order, and each input's outputs keep their order;
    how the inputs interleave is not recorded (see the docs, "Exactly once").

    Raises:
        ServiceError: the configuration cannot work (checked here where it can
            be without opening a queue, the rest by :meth:`run`).
    """

    def __init__(self, name: str, handler: Callable[..., object],
                 inputs: Sequence[ServiceInput], outputs: Sequence[ServiceOutput] = (), *,
                 snapshots: SnapshotPolicy | None = None,
                 pauser: Pauser | Callable[[], Pauser] | None = None,
                 on_error: Literal["stop", "skip"] = "stop",
                 stateless: bool = False) -> None:
        """See the class docstring."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        """The service's name (in logs, errors and snapshots)."""
        raise NotImplementedError

    @property
    def handler(self) -> object | None:
        """The handler object of the current or last :meth:`run` (None before)."""
        raise NotImplementedError

    @property
    def live(self) -> bool:
        """True once :meth:`run` has recovered and handles live inputs."""
        raise NotImplementedError

    async def wait_live(self) -> None:
        """Return once the service is live (recovered), as :attr:`live` says."""
        raise NotImplementedError

    @property
    def statistics(self) -> ServiceStatistics:
        """The counters now."""
        raise NotImplementedError

    async def run(self, *, until_end: bool = False) -> ServiceStatistics:
        """Recover (see the module docs) and handle inputs as they come, until
        :meth:`stop` (or, with ``until_end``, until no input has more to read
        now, or each has reached its ``end``); then write a snapshot (with a
        policy, if inputs were handled since the last) and return the
        statistics.  Cancelling it stops at once, without a snapshot: what was
        written stays exactly-once (a restart recovers from it).

        Raises:
            ServiceError: a queue without a source id, a snapshot of another
                service.
            NondeterministicHandlerError: a replayed input's outputs differ
                from the recorded ones.
            ServiceHandlerError: the handler raised (``on_error="stop"``).
        """
        raise NotImplementedError

    def stop(self) -> None:
        """Make :meth:`run` finish the current input, snapshot and return (from
        the event loop's thread: a handler, a signal handler, another task)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<Service {self.name!r}>"


_Unused = (asyncio, Any)
